"""A batch checked in memory (Arrow) gets the report the Spark path gives it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from changeflow import lcr
from changeflow.quality import check_arrow_batch, check_batch, results
from changeflow.queues import arrow_io
from changeflow.sites import queue_site

from .conftest import row_lcr
from .test_batches import DEFECTS, DST

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _write(cfg: Any, messages: list[dict[str, Any]]) -> tuple[Any, pa.Table]:
    rt, q = queue_site(cfg, DST)
    table = pa.Table.from_pylist(messages, schema=lcr.arrow_schema())
    return arrow_io.write_arrow_batch(rt.catalog, q, table, producer="capture:c1"), table


def _summary(report: Any) -> dict[str, Any]:
    return {c.check: (c.success, c.unexpected_count, c.element_count,
                      sorted(str(s) for s in c.samples)) for c in report.checks}


def test_clean_batch_passes_and_records_its_watermarks(spark, pipeline) -> None:  # type: ignore[no-untyped-def]
    batch, table = _write(pipeline, [row_lcr(1), row_lcr(2, "UPDATE"),
                                     row_lcr(3, transaction_id="tx11", commit_scn=12)])
    report = check_arrow_batch(spark, pipeline, stage="capture:c1", batch=batch, queue=DST,
                               table=table)
    assert report is not None and report.status == "passed"
    assert _summary(report) == _summary(check_batch(spark, pipeline, stage="capture:c1",
                                                    batch=batch, queue=DST))
    rt, q = queue_site(pipeline, DST)
    assert isinstance(report.result_id, int)
    assert results.prior_watermarks(rt.store, q, "capture:c1") == {}  # not committed yet


@pytest.mark.parametrize("check", sorted(DEFECTS))
def test_defective_batch_gets_the_spark_report(spark, pipeline, check: str) -> None:  # type: ignore[no-untyped-def]
    messages, _ = DEFECTS[check]
    batch, table = _write(pipeline, messages)
    got = check_arrow_batch(spark, pipeline, stage="capture:c1", batch=batch, queue=DST,
                            table=table)
    want = check_batch(spark, pipeline, stage="capture:c1", batch=batch, queue=DST)
    assert got is not None and want is not None
    assert got.status == want.status == "failed"
    assert check in {c.check for c in got.blocking_failures}
    assert _summary(got) == _summary(want)
    assert got.quarantine_path == batch.path
