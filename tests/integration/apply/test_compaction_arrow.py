"""Compaction on the driver with Arrow: the Spark path's rows, or the Spark path."""

from __future__ import annotations

import os
from typing import Any

import pytest

from changeflow.apply import compaction, compaction_arrow
from changeflow.apply.arrow_files import local_path
from changeflow.apply.target import FileEntry, TargetTable, read_files, resolve

from .target_files import COLUMNS, image, new_table, write

pytestmark = pytest.mark.spark


def _sorted(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows), key=lambda r: tuple((v is None, repr(v)) for v in r))


def _both(spark: Any, table: TargetTable, files: list[FileEntry]
          ) -> tuple[list[FileEntry], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The Arrow path's new files and rows, and the Spark path's rows of the same files."""
    new = compaction_arrow.write_compacted(spark, table, files, "t1")
    assert new is not None, "the Arrow path was not taken"
    slow, _ = compaction.compacted(spark, table, files)
    return new, _sorted(read_files(spark, table, new).collect()), _sorted(slow.drop("_cf_bucket").collect())


def test_a_compaction_keeps_the_newest_image_of_each_key(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    table = new_table(tmp_path, ["id"], COLUMNS)
    files = write(spark, table, [image(i, 1) for i in range(1, 9)], "base", "b")
    files += write(spark, table, [image(1, 2), image(2, 2, deleted=True), image(9, 2)],
                   "delta", "d1")
    files += write(spark, table, [image(1, 3), image(9, 3, deleted=True), image(2, 3)],
                   "delta", "d2")
    new, fast, slow = _both(spark, table, files)
    assert fast == slow
    # Checked against the images written too: id 1 and 2 from version 3, 3-8 from the
    # base, 9 deleted; every column as written.
    assert [(r[0], r[-7]) for r in fast] == [(1, 3), (2, 3), *[(i, 1) for i in range(3, 9)]]
    one = image(1, 3)
    assert (fast[0][1], fast[0][2], fast[0][6], fast[0][-2]) == (
        one["name"], one["sal"], one["raw"], one["_cf_tag"])
    assert {f.kind for f in new} == {"base"} and len(new) == len({f.bucket for f in new})
    # The new files read with Spark's own schema inference: the table's types
    inferred = {f.name: f.dataType for f in spark.read.parquet(*[f.path for f in new])
                .schema.fields}
    assert all(inferred[f.name] == f.dataType for f in table.spark_schema().fields)


def test_dates_before_the_gregorian_calendar_read_as_written(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import datetime as dt

    table = new_table(tmp_path, ["id"], COLUMNS)
    old = {"born": dt.date(1000, 3, 1), "seen": dt.datetime(1500, 1, 1, 12, tzinfo=dt.UTC),
           "local": dt.datetime(1200, 6, 1, 8)}
    files = write(spark, table, [{**image(i, 1), **old} for i in (1, 2, 3)], "base", "b")
    files += write(spark, table, [{**image(2, 2), **old}], "delta", "d")
    # Spark rebases such dates of files it does not know as its own by this setting;
    # the new files say they are (proleptic dates, as Arrow and Spark 3+ write them).
    spark.conf.set("spark.sql.parquet.datetimeRebaseModeInRead", "LEGACY")
    try:
        _, fast, slow = _both(spark, table, files)
    finally:
        spark.conf.unset("spark.sql.parquet.datetimeRebaseModeInRead")
    assert fast == slow
    assert {(r[3], r[5]) for r in fast} == {(old["born"], old["local"])}


def test_buckets_without_a_base_and_composite_keys(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cols = [("region", "VARCHAR2"), *COLUMNS]
    table = new_table(tmp_path, ["region", "id"], cols)
    files = write(spark, table, [image(i, 1, key={"region": r, "id": i})
                                 for r in ("a", "b") for i in (1, 2)], "delta", "d1")
    files += write(spark, table, [image(2, 2, deleted=True, key={"region": "b", "id": 2}),
                                  image(1, 2, key={"region": "a", "id": 1})], "delta", "d2")
    _, fast, slow = _both(spark, table, files)
    assert fast == slow
    assert [(r[0], r[1], r[-7]) for r in fast] == [("a", 1, 2), ("a", 2, 1), ("b", 1, 1)]


def test_the_spark_path_when_the_arrow_path_cannot_show_it_is_exact(spark, tmp_path,  # type: ignore[no-untyped-def]
                                                                    monkeypatch) -> None:
    table = new_table(tmp_path, ["id"], COLUMNS)
    base = write(spark, table, [image(i, 1) for i in range(1, 5)], "base", "b")
    # partial images: the column-wise resolution stays Spark's
    partial = write(spark, table, [image(1, 2, absent=["name"])], "pdelta", "p")
    assert compaction_arrow.write_compacted(spark, table, base + partial, "x1") is None
    # two images of a key with the same apply order: Spark would keep either of them
    tie = write(spark, table, [image(2, 2), {**image(2, 2), "name": "other"}], "delta", "t")
    assert compaction_arrow.write_compacted(spark, table, base + tie, "x2") is None
    # a NULL commit position
    null = write(spark, table, [{**image(3, 2), "_cf_scn": None}], "delta", "n")
    assert compaction_arrow.write_compacted(spark, table, base + null, "x3") is None
    for tag in ("x1", "x2", "x3"):  # nothing written stays
        assert not os.path.exists(tmp_path / "hr.t" / f"base-v1-{tag}")
    monkeypatch.setattr(compaction_arrow, "MAX_BUCKET_BYTES", 10)
    fine = write(spark, table, [image(4, 2)], "delta", "f")
    assert compaction_arrow.write_compacted(spark, table, base + fine, "x4") is None
    monkeypatch.undo()
    floats = new_table(tmp_path / "f", ["score"], COLUMNS)
    ffiles = write(spark, floats, [image(1, 1)], "base", "b")
    ffiles += write(spark, floats, [image(1, 2)], "delta", "d")
    assert compaction_arrow.write_compacted(spark, floats, ffiles, "x5") is None


def test_compact_takes_the_arrow_path_and_the_table_reads_the_same(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from changeflow.apply.target import TargetCatalog
    from changeflow.state import StateStore

    store = StateStore(f"sqlite:///{tmp_path}/state.db")
    catalog = TargetCatalog(store, str(tmp_path))
    table = new_table(tmp_path, ["id"], COLUMNS)
    for kind, rows in (("base", [image(i, 1) for i in range(1, 30)]),
                       ("delta", [image(3, 2), image(4, 2, deleted=True), image(40, 2)]),
                       ("delta", [image(4, 3), image(5, 3, deleted=True)])):
        files = write(spark, table, rows, kind, f"v{table.version}")
        with store.begin() as conn:
            catalog.commit(conn, table, files)
        table = catalog.get("hr.t")
        assert table is not None
    before = _sorted(resolve(read_files(spark, table, catalog.files("hr.t")), ["id"]).collect())
    old = catalog.files("hr.t")
    assert compaction.compact(spark, catalog, "hr.t", ratio=0.0, max_deltas=0) == [0, 1]
    files = catalog.files("hr.t")
    assert {f.kind for f in files} == {"base"} and len(files) == 2
    assert all(local_path(f.path) is not None and "base-v4-" in f.path for f in files)
    assert not any(os.path.exists(local_path(f.path) or "") for f in old)
    after = _sorted(resolve(read_files(spark, table, files), ["id"]).collect())
    assert after == before and len(after) == 29 + 1 - 1  # 40 added, 5 deleted
