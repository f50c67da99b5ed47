"""The current rows of the looked-up keys picked on the driver: the Spark window's rows."""

from __future__ import annotations

from typing import Any

import pytest

from changeflow.apply import conflicts, lookup_arrow
from changeflow.apply.target import FileEntry, TargetTable

from .target_files import COLUMNS, image, new_table, write

pytestmark = pytest.mark.spark


def _currents(spark: Any, monkeypatch: Any, table: TargetTable, files: list[FileEntry],
              keys: list[tuple[Any, ...]], columns: list[str]) -> tuple[list[Any], list[Any]]:
    """The current rows picked on the driver, and by the Spark path's window."""
    from pyspark.sql import types as T

    picked: list[int] = []
    real = lookup_arrow.newest

    def spy(rows: Any, key_columns: list[str]) -> Any:
        picked.append(rows.num_rows)
        return real(rows, key_columns)

    monkeypatch.setattr(lookup_arrow, "newest", spy)

    full = {f.name: f for f in table.spark_schema().fields}
    key_df = spark.createDataFrame(keys, T.StructType([full[k] for k in table.key_columns]))
    _, fast, on_driver = conflicts.lookup_current(spark, table, files, key_df, columns,
                                                  partial=False)
    assert on_driver
    slow = conflicts.current_of(conflicts.lookup(spark, table, files, key_df, columns,
                                                 arrow=False), table, columns, partial=False)
    assert picked, "the current rows were not picked on the driver"
    assert fast.schema == slow.schema
    order = lambda r: tuple((v is None, repr(v)) for v in r)  # noqa: E731
    return (sorted((tuple(r) for r in fast.collect()), key=order),
            sorted((tuple(r) for r in slow.collect()), key=order))


def test_the_current_rows_picked_on_the_driver_are_the_spark_windows(spark, tmp_path,  # type: ignore[no-untyped-def]
                                                                      monkeypatch) -> None:
    table = new_table(tmp_path, ["id"], COLUMNS)
    files = write(spark, table, [image(i, 1) for i in range(1, 7)], "base", "b")
    files += write(spark, table, [
        image(1, 2), image(2, 2, deleted=True), image(7, 2),
        {**image(4, 2, name="late"), "_cf_pos": 9}, image(4, 2, name="early"),  # position
        {**image(5, 2, name="no-seq"), "_cf_seq": None},  # counts as 0: older than 1
        image(6, 2, name="kept"), image(6, 2, deleted=True),  # the image before a tombstone
    ], "delta", "d")
    fast, slow = _currents(spark, monkeypatch, table, files, [(i,) for i in range(1, 9)], ["name", "sal"])
    assert fast == slow
    # id, exists, source, scn, position, name, sal
    assert [(r[0], r[1], r[5]) for r in fast] == [
        (1, True, "n1-2"), (2, False, None), (3, True, "n3-1"), (4, True, "late"),
        (5, True, "n5-1"), (6, True, "kept"), (7, True, "n7-2")]


def test_the_current_rows_of_composite_and_null_keys(spark, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]  # type: ignore[no-untyped-def]
    cols = [("region", "VARCHAR2"), *COLUMNS]
    table = new_table(tmp_path, ["region", "id"], cols)
    rows = [image(i, 1, key={"region": r, "id": i}) for r in ("a", "b", None) for i in (1, 2)]
    files = write(spark, table, rows, "base", "b")
    files += write(spark, table, [image(2, 2, name="b2", key={"region": "b", "id": 2}),
                                  image(2, 2, name="null2", key={"region": None, "id": 2})],
                   "delta", "d")
    fast, slow = _currents(spark, monkeypatch, table, files, [("a", 1), ("b", 2), ("a", 2)], ["name"])
    assert fast == slow
    assert [(r[0], r[1], r[6]) for r in fast] == [("a", 1, "n1-1"), ("a", 2, "n2-1"),
                                                  ("b", 2, "b2")]
    # NULL keys match nothing in the lookup; the driver's pick keeps them one key each
    import pyarrow as pa

    raw = pa.table({"region": [None, None, "a", None], "id": [2, 2, 2, 1],
                    "_cf_seq": [1, 2, 1, 1], "_cf_scn": [1, 1, 1, 1], "_cf_pos": [1, 1, 1, 1],
                    "_cf_deleted": [False, False, False, None]})
    got = lookup_arrow.newest(raw, ["region", "id"]).to_pylist()
    assert sorted((r["region"] or "", r["id"], r["_cf_seq"]) for r in got) == [
        ("", 1, 1), ("", 2, 2), ("a", 2, 1)]


def test_without_the_arrow_lookup_spark_picks_them(spark, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    table = new_table(tmp_path, ["id"], COLUMNS)
    files = write(spark, table, [image(1, 1), image(1, 2), image(2, 1)], "base", "b")
    keys = spark.createDataFrame([(1,), (2,)], "id bigint")
    for partial in (False, True):  # partial images: the Spark window even after Arrow
        matched, current, on_driver = conflicts.lookup_current(
            spark, table, files, keys, ["name"], partial=partial)
        assert on_driver and matched.count() == 3
        assert sorted((r.id, r._c_name) for r in current.collect()) == [(1, "n1-2"),
                                                                         (2, "n2-1")]
    monkeypatch.setattr(lookup_arrow, "lookup", lambda *a, **k: None)
    monkeypatch.setattr(lookup_arrow, "newest", lambda *a, **k: pytest.fail("picked"))
    matched, current, on_driver = conflicts.lookup_current(spark, table, files, keys,
                                                           ["name"], partial=False)
    assert not on_driver and matched.count() == 3
    assert sorted((r.id, r._c_name) for r in current.collect()) == [(1, "n1-2"), (2, "n2-1")]
