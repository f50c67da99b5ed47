"""A batch with each kind of defect is set aside, named in the error, and never delivered.

Stages check a written batch, commit it in the state the report gives (``quarantined``
when a blocking check failed), record it in the queue's quarantine and raise the error
after their commit, so later batches flow. :func:`_check_commit` does exactly that.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pytest

from changeflow import fs, lcr
from changeflow.quality import HopCounters, QualityError, check_batch, results, set_aside, state_of
from changeflow.quality.quarantine import RESULT_FILE
from changeflow.queues import io as qio
from changeflow.queues.quarantine import quarantined, release
from changeflow.sites import queue_site

from .conftest import T0, row_lcr

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DST = "strmadmin.streams_queue@site2"
KEY_ONLY = {"REGION_NAME": lcr.encode_value("x")}

DEFECTS: dict[str, tuple[list[dict[str, Any]], int]] = {
    # check id: (messages, index of the offending message)
    "required_fields": ([row_lcr(1), row_lcr(2, object_name=None)], 1),
    "command_type_allowed": ([row_lcr(1), row_lcr(2, command_type="UPSERT")], 1),
    "insert_no_old_values": ([row_lcr(1), row_lcr(2, old_values=KEY_ONLY)], 1),
    "delete_no_new_values": ([row_lcr(1), row_lcr(2, "DELETE", new_values=KEY_ONLY)], 1),
    "update_has_key": ([row_lcr(1), row_lcr(2, "UPDATE", old_values=KEY_ONLY)], 1),
    "unique_msg_id": ([row_lcr(1), row_lcr(2, msg_id="same"), row_lcr(3, msg_id="same")], 1),
    "transaction_single_commit_scn": ([row_lcr(1), row_lcr(2, commit_scn=11)], 1),
    "commit_order_in_batch": (
        [row_lcr(1), row_lcr(2, transaction_id="tx9", commit_scn=9,
                             commit_time=T0.replace(hour=1))], 1),
}


def _write(spark, cfg, df):  # type: ignore[no-untyped-def]
    rt, q = queue_site(cfg, DST)
    return qio.write_batch(spark, rt.catalog, q, df, producer="propagation:p12")


def _check_commit(spark, cfg, batch, **kw):  # type: ignore[no-untyped-def]
    """Check and commit a batch as the stages do; raise the quality error after the commit."""
    report = check_batch(spark, cfg, stage="propagation:p12", batch=batch, queue=DST, **kw)
    rt, q = queue_site(cfg, DST)
    with rt.store.begin() as conn:
        seq = rt.catalog.commit_batch(q, batch, conn, state=state_of(report))
        failed = set_aside(rt, q, report, seq, conn)
    if failed is not None:
        raise failed
    return report, seq


@pytest.mark.parametrize("check", sorted(DEFECTS))
def test_defective_batch_is_quarantined(spark, pipeline, lcr_frame, check: str) -> None:  # type: ignore[no-untyped-def]
    messages, bad = DEFECTS[check]
    batch = _write(spark, pipeline, lcr_frame(messages))
    with pytest.raises(QualityError) as info:
        _check_commit(spark, pipeline, batch)
    err = info.value
    text = str(err)
    assert f"'{check}'" in text and "propagation:p12" in text
    failed = {c.check: c for c in err.report.blocking_failures}
    assert check in failed
    sample_ids = {s.get("msg_id") or s.get("transaction_id") for s in failed[check].samples}
    bad_msg = messages[bad]
    assert bad_msg["msg_id"] in sample_ids or bad_msg["transaction_id"] in sample_ids
    # Set aside in place, beside its validation result, and named in the error.
    qpath = err.report.quarantine_path
    assert qpath == batch.path
    assert spark.read.parquet(qpath).count() == len(messages)
    with open(os.path.join(qpath, RESULT_FILE)) as fh:
        saved = json.load(fh)
    assert saved["status"] == "failed" and saved["batch_id"] == batch.batch_id
    seq = err.report.quarantine_seq
    assert f"set aside as batch {seq}" in text
    # No consumer sees it; the quarantine lists it; the failure is persisted.
    rt, q = queue_site(pipeline, DST)
    assert rt.catalog.info(q).depth == 0
    [held] = quarantined(rt.catalog, q)
    assert (held.seq, held.origin, held.n_messages) == (seq, "quality", len(messages))
    [latest] = results.latest(rt.store)
    assert latest.status == "failed" and latest.quarantine_path == qpath
    # Released once "fixed", it flows to the consumers that had not read it.
    rt.catalog.add_consumer(q, "late-reader")
    new = release(rt.catalog, q, seq)
    assert new > seq and rt.catalog.info(q).depth == len(messages)
    assert [b.seq for b in rt.catalog.pending(q, "late-reader")] == []


def test_clean_batch_passes_untouched(spark, pipeline, lcr_frame) -> None:  # type: ignore[no-untyped-def]
    df = lcr_frame([row_lcr(1), row_lcr(2, "UPDATE"), row_lcr(3, "DELETE")])
    batch = _write(spark, pipeline, df)
    before = sorted(fs.data_files(spark, batch.path))
    report = check_batch(spark, pipeline, stage="propagation:p12", batch=batch, queue=DST,
                         counters=HopCounters(read=3, propagated=3, discarded=0))
    assert report is not None and report.status == "passed"
    assert {c.check for c in report.checks} >= {"unique_msg_id", "hop_reconciled",
                                                 "commit_order_in_batch"}
    assert sorted(fs.data_files(spark, batch.path)) == before
    rt, q = queue_site(pipeline, DST)
    assert rt.catalog.commit_batch(q, batch, state=state_of(report)) is not None
    assert rt.catalog.info(q).depth == 3


def test_hop_that_does_not_reconcile_blocks(spark, pipeline, lcr_frame) -> None:  # type: ignore[no-untyped-def]
    batch = _write(spark, pipeline, lcr_frame([row_lcr(1)]))
    with pytest.raises(QualityError, match="hop_reconciled") as info:
        _check_commit(spark, pipeline, batch,
                      counters=HopCounters(read=5, propagated=1, discarded=3))
    [hop] = info.value.report.blocking_failures
    assert hop.samples == [{"messages_read": 5, "messages_propagated": 1,
                            "messages_discarded": 3, "messages_accounted": 4}]


def test_warn_only_check_logs_and_passes(spark, make_pipeline, lcr_frame, caplog) -> None:  # type: ignore[no-untyped-def]
    cfg = make_pipeline("quality: {warn_only: [insert_no_old_values]}\n")
    batch = _write(spark, cfg, lcr_frame([row_lcr(1, old_values=KEY_ONLY)]))
    with caplog.at_level(logging.WARNING, logger="changeflow.quality"):
        report = check_batch(spark, cfg, stage="propagation:p12", batch=batch, queue=DST)
    assert report is not None and report.status == "warned"
    assert fs.exists(spark, batch.path)
    assert "insert_no_old_values" in caplog.text


def test_commit_order_across_batches(spark, make_pipeline, lcr_frame) -> None:  # type: ignore[no-untyped-def]
    cfg = make_pipeline("quality: {blocking: [commit_order_across_batches]}\n")
    rt, q = queue_site(cfg, DST)
    first = _write(spark, cfg, lcr_frame([row_lcr(1, commit_scn=20)]))
    _check_commit(spark, cfg, first)
    late = _write(spark, cfg, lcr_frame([row_lcr(2, commit_scn=15)]))
    with pytest.raises(QualityError, match="commit_order_across_batches"):
        _check_commit(spark, cfg, late)
    assert rt.catalog.info(q).depth == 1


def test_disabled_quality_is_a_no_op(spark, make_pipeline, lcr_frame) -> None:  # type: ignore[no-untyped-def]
    cfg = make_pipeline("quality: {enabled: false}\n")
    batch = _write(spark, cfg, lcr_frame([row_lcr(1, command_type="UPSERT")]))
    assert check_batch(spark, cfg, stage="propagation:p12", batch=batch, queue=DST) is None
    assert fs.exists(spark, batch.path)


def test_the_driver_and_spark_validations_agree(spark, pipeline, lcr_frame, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A batch of few transactions is validated on the driver (GX's pandas engine); one of
    more than ``DRIVER_ROLLUP_ROWS`` with Spark jobs. Both give the same checks."""
    from changeflow.quality import batch as qbatch

    def outcome(report):  # type: ignore[no-untyped-def]
        return {c.check: (c.success, c.unexpected_count) for c in report.checks}

    cases = {**DEFECTS, "clean": ([row_lcr(1), row_lcr(2)], 0)}
    for name, (messages, _) in cases.items():
        written = _write(spark, pipeline, lcr_frame(messages))
        hop = HopCounters(read=len(messages), propagated=len(messages) - 1,  # one unaccounted
                          discarded=0)
        on_driver = check_batch(spark, pipeline, stage="propagation:p12", batch=written,
                                queue=DST, counters=hop)
        monkeypatch.setattr(qbatch, "DRIVER_ROLLUP_ROWS", 0)
        in_spark = check_batch(spark, pipeline, stage="propagation:p12", batch=written,
                               queue=DST, counters=hop)
        monkeypatch.undo()
        assert outcome(on_driver) == outcome(in_spark), name
        failed = {c for c, (ok, _) in outcome(on_driver).items() if not ok}
        assert failed == {"hop_reconciled"} | ({name} if name != "clean" else set()), name
