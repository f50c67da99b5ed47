"""The target check's rollup on the driver with Arrow: the Spark path's counts, or None."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from changeflow.apply import delta_arrow, driver_pass
from changeflow.apply.target import FileEntry, TargetTable, write_files
from changeflow.quality import QualityError, target_arrow
from changeflow.quality import target as qt

from .conftest import taken as spy_on
from .target_files import COLUMNS, image, new_table
from .test_target_quality import lossy_scenario

pytestmark = pytest.mark.spark

EXPECTED = "id int, before boolean, present boolean"


def _files(spark: Any, table: TargetTable, rows: list[dict[str, Any]], tag: str
           ) -> list[FileEntry]:
    schema = table.spark_schema()
    df = spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows],
                               schema)
    return write_files(spark, table, df, "delta", tag)[0]


def _both(spark: Any, w: qt.TargetWrite) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rollup row with Arrow and with Spark (``rows_after`` included)."""
    fast = target_arrow.rollup(spark, w)
    assert fast is not None, "the Arrow path was not taken"
    qt.ARROW = True
    row_fast = dict(qt._rollup(spark, w)[0])
    qt.ARROW = False
    try:
        row_slow = dict(qt._rollup(spark, w)[0])
    finally:
        qt.ARROW = True
    return row_fast, row_slow


def test_counts_are_the_spark_paths(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = new_table(tmp_path, ["id"], COLUMNS)
    before_rows = [image(i, 1) for i in range(1, 7)] + [image(6, 2, deleted=True)]
    before = spark.createDataFrame(
        [tuple(r.get(f.name) for f in table.spark_schema().fields) for r in before_rows],
        table.spark_schema())
    # the delta: 1 updated, 2 deleted, 7 and 8 inserted, 6 (deleted before) back; key 3 is
    # written as a row although the LCRs deleted it (an as-applied violation), key 9 is
    # written although no LCR names it (another), key 4 is expected twice (a uniqueness
    # violation per row), key 5 is not written (it keeps its row)
    delta = _files(spark, table, [image(1, 3), image(2, 3, deleted=True), image(3, 3),
                                  image(7, 3), image(8, 3), image(6, 3), image(9, 3)], "d")
    expected = spark.createDataFrame(
        [(1, True, True), (2, True, False), (3, True, False), (4, True, True),
         (4, True, True), (5, True, True), (6, False, True), (7, False, True),
         (8, False, True)], EXPECTED)
    w = qt.TargetWrite(table, delta, before, expected, rows_before=5)
    fast, slow = _both(spark, w)
    assert fast == slow
    # checked against the scenario too, not only against the other path
    assert (fast["keys"], fast["key_unique_violations"], fast["as_applied_violations"],
            fast["inserts"], fast["deletes"], fast["rows_after"], fast["expected_after"]) == \
        (10, 2, 2, 4, 1, 8, 6)
    # a newer tombstone wins over an older row of the same key; NULL seq counts as 0
    w2 = qt.TargetWrite(table, _files(spark, table, [
        image(1, 1, deleted=True), {**image(5, 0), "_cf_seq": None, "_cf_scn": 10**6}], "e"),
        before.where("id in (1, 5)"),
        spark.createDataFrame([(1, True, False), (5, True, True)], EXPECTED),
        rows_before=5)
    fast2, slow2 = _both(spark, w2)
    assert fast2 == slow2 and fast2["as_applied_violations"] == 1  # key 1: image (seq 1) wins


def test_samples_name_the_offending_keys(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = new_table(tmp_path, ["id"], COLUMNS)
    delta = _files(spark, table, [image(3, 2)], "d")
    w = qt.TargetWrite(table, delta, None,
                       spark.createDataFrame([(3, False, False)], EXPECTED), rows_before=0)
    out = target_arrow.rollup(spark, w)
    assert out is not None
    assert target_arrow.samples(out[1], "hr.t", ["id"], "as_applied", 5) == [
        {"table_name": "hr.t", "key": '{"id":3}', "key_not_null": True, "key_unique": True,
         "as_applied": False, "before": False, "expected": False, "after": True}]


def test_it_declines_what_it_cannot_show(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = new_table(tmp_path, ["id"], COLUMNS)
    delta = _files(spark, table, [image(1, 2)], "d")
    ok = spark.createDataFrame([(1, True, True)], EXPECTED)
    assert target_arrow.rollup(spark, qt.TargetWrite(table, delta, None, ok)) is not None
    nulls = spark.createDataFrame([(1, True, True), (None, False, True)], EXPECTED)
    assert target_arrow.rollup(spark, qt.TargetWrite(table, delta, None, nulls)) is None
    remote = [*delta, FileEntry("s3a://bucket/t/x.parquet", 0, 1, "delta", 1)]
    assert target_arrow.rollup(spark, qt.TargetWrite(table, remote, None, ok)) is None
    floats = new_table(tmp_path / "f", ["score"], COLUMNS)
    fdelta = _files(spark, floats, [image(1, 2)], "d")
    fexp = spark.createDataFrame([(1 / 3, True, True)], "score double, before boolean, "
                                 "present boolean")
    assert target_arrow.rollup(spark, qt.TargetWrite(floats, fdelta, None, fexp)) is None


@pytest.mark.parametrize("arrow", [True, False])
def test_a_lost_tombstone_is_caught_either_way(spark, make_cfg, enqueue, monkeypatch,  # type: ignore[no-untyped-def]
                                               arrow: bool) -> None:
    taken = spy_on(monkeypatch, target_arrow, "rollup")
    monkeypatch.setattr(qt, "ARROW", arrow)
    monkeypatch.setattr(delta_arrow, "MAX_ROWS", delta_arrow.MAX_ROWS if arrow else 0)
    lossy_scenario(spark, make_cfg, enqueue, monkeypatch, driver=False)
    if arrow:
        assert taken and all(taken), "the Arrow path was not taken"
    else:
        assert not taken


@pytest.mark.parametrize("arrow", [True, False])
def test_a_delta_that_lost_every_row_is_caught(spark, make_cfg, enqueue,  # type: ignore[no-untyped-def]
                                               monkeypatch, arrow: bool) -> None:
    from changeflow.apply import tables
    from changeflow.apply.engine import apply_once

    from .conftest import row, vals

    cfg = make_cfg("applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2}]")
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}"), pos=i) for i in (1, 2)])
    apply_once(spark, cfg, "ap")
    enqueue(cfg, [row("DELETE", old=vals(id=2), txn="t2", scn=20)])
    real = tables.TablePlan.images
    monkeypatch.setattr(tables.TablePlan, "images", lambda self, seq, tag, failed: real(
        self, seq, tag, failed).where("NOT _cf_deleted"))
    monkeypatch.setattr(driver_pass, "ENABLED", False)  # the Spark pass's check
    monkeypatch.setattr(qt, "ARROW", arrow)
    with pytest.raises(QualityError) as info:
        apply_once(spark, cfg, "ap")
    assert info.value.report.quarantine_path is None  # nothing was written to move
    [fail] = [c for c in info.value.report.blocking_failures
              if c.check == "target_rows_as_applied"]
    assert fail.samples == [{"table_name": "hr.emp", "key": '{"id":2}', "key_not_null": True,
                             "key_unique": True, "as_applied": False, "before": True,
                             "expected": False, "after": True}]
