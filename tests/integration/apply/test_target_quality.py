"""The apply's target check: its cost follows the changes, and a write that disagrees
with the applied LCRs is caught before the commit (moved here from the quality tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow import fs
from changeflow.apply.engine import apply_once, target_catalog
from changeflow.apply.target import FileEntry
from changeflow.quality import QualityError, check_target
from changeflow.quality.target import TargetWrite
from changeflow.sites import consumer_name, queue_site

from .conftest import QUEUE, row, table_rows, vals

pytestmark = pytest.mark.spark
APPLY = "applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2}]"


@pytest.mark.parametrize("driver", [True, False], ids=["driver-pass", "spark-pass"])
def test_a_write_that_disagrees_with_the_lcrs_reaches_no_target(
        spark, make_cfg, enqueue, monkeypatch, driver: bool) -> None:  # type: ignore[no-untyped-def]
    lossy_scenario(spark, make_cfg, enqueue, monkeypatch, driver=driver)


def lossy_scenario(spark, make_cfg, enqueue, monkeypatch, *,  # type: ignore[no-untyped-def]
                   driver: bool) -> None:
    """A pass (on the driver or in Spark) whose delta loses its tombstone."""
    import pyarrow.compute as pc

    from changeflow.apply import driver_pass, tables

    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in (1, 2)])
    apply_once(spark, cfg, "ap")
    before = table_rows(spark, cfg)
    enqueue(cfg, [row("INSERT", new=vals(id=3, name="c"), txn="t2", scn=20),
                  row("DELETE", old=vals(id=1), txn="t2", scn=20, pos=2)])
    real = tables.TablePlan.images

    def lossy(self, seq, tag, failed):  # type: ignore[no-untyped-def]
        return real(self, seq, tag, failed).where("NOT _cf_deleted")  # a lost tombstone

    real_driver = driver_pass._images

    def lossy_driver(*args):  # type: ignore[no-untyped-def]
        images = real_driver(*args)
        return images.filter(pc.invert(images.column("_cf_deleted")))

    monkeypatch.setattr(tables.TablePlan, "images", lossy)
    monkeypatch.setattr(driver_pass, "_images", lossy_driver)
    monkeypatch.setattr(driver_pass, "ENABLED", driver)
    with pytest.raises(QualityError, match="target_rows_as_applied") as info:
        apply_once(spark, cfg, "ap")
    counts = next(c for c in info.value.report.blocking_failures
                  if c.check == "target_rows_reconcile").samples[0]
    assert (counts["rows_before"], counts["rows_after"], counts["expected_after"]) == (2, 3, 2)
    monkeypatch.undo()
    assert table_rows(spark, cfg) == before
    rt, q = queue_site(cfg, QUEUE)
    assert len(rt.catalog.pending(q, consumer_name("apply", "ap"))) == 1
    qpath = info.value.report.quarantine_path or ""
    assert "/_quarantine/hr.emp/delta-" in qpath and fs.exists(spark, qpath)
    apply_once(spark, cfg, "ap")  # without the fault, the same batch applies
    assert table_rows(spark, cfg) == [(2, "n2"), (3, "c")]


def test_written_column_types_must_match_the_manifest(spark, make_cfg, enqueue,
                                                      tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"))])
    apply_once(spark, cfg, "ap")
    cat = target_catalog(cfg, cfg.applies[0])
    table = cat.get("hr.emp")
    assert table is not None
    # A delta whose name was written as a number, not the declared VARCHAR2.
    path = str(tmp_path / "bad" / "_cf_bucket=0")
    spark.createDataFrame([(5, 7, 99, 0, False)], "id long, name long, _cf_scn long, "
                          "_cf_pos long, _cf_deleted boolean").write.parquet(path)
    files = [FileEntry(p, 0, table.version + 1, "delta", 1) for p, _ in fs.data_files(spark, path)]
    with pytest.raises(QualityError, match="target_column_types") as info:
        check_target(spark, cfg, stage="apply:ap", catalog=cat,
                     writes=[TargetWrite(table, files)])
    [fail] = [c for c in info.value.report.blocking_failures if c.check == "target_column_types"]
    assert fail.samples == [{"table_name": "hr.emp", "column": "name", "declared": "string",
                             "written": "bigint", "type_as_declared": False}]
