"""The conflict lookup on the driver with Arrow: the Spark path's rows, or the Spark path."""

from __future__ import annotations

import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply import conflicts, driver_pass, lookup_arrow
from changeflow.apply.arrow_files import spark_metadata
from changeflow.apply.engine import apply_once
from changeflow.apply.target import FileEntry, TargetTable
from changeflow.config import load_config
from changeflow.sites import open_pipeline

from .conftest import BASE, row, table_rows, vals
from .conftest import taken as spy_on
from .target_files import COLUMNS, DATA, image, new_table, write

pytestmark = pytest.mark.spark


def _both(spark: Any, table: TargetTable, files: list[FileEntry], keys: list[tuple[Any, ...]],
          columns: list[str]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The Arrow path's rows and the Spark path's rows of the same lookup (same schema)."""
    from pyspark.sql import types as T

    full = {f.name: f for f in table.spark_schema().fields}
    key_df = spark.createDataFrame(keys, T.StructType([full[k] for k in table.key_columns]))
    fast = lookup_arrow.lookup(spark, table, files, key_df, columns)
    assert fast is not None, "the Arrow path was not taken"
    slow = conflicts.lookup(spark, table, files, key_df, columns, arrow=False)
    assert fast.schema == slow.schema
    order = lambda r: tuple((v is None, repr(v)) for v in r)  # noqa: E731
    return (sorted((tuple(r) for r in fast.collect()), key=order),
            sorted((tuple(r) for r in slow.collect()), key=order))


def test_the_arrow_path_finds_every_image_of_the_keys(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    table = new_table(tmp_path, ["id"], COLUMNS)
    files = write(spark, table, [image(i, 1) for i in range(1, 7)], "base", "b")
    files += write(spark, table, [image(1, 2), image(2, 2, deleted=True), image(7, 2)],
                    "delta", "d")
    files += write(spark, table, [image(3, 3, absent=["name", "raw"]), image(1, 3)],
                    "pdelta", "p")
    fast, slow = _both(spark, table, files, [(1,), (2,), (3,), (7,), (99,), (None,)], DATA)
    assert fast == slow
    # Checked against the rows written, not only against the other path: every image of
    # keys 1, 2, 3 and 7 (base, update, tombstone, partial image), nothing else.
    names = ["id", *DATA, "_cf_seq", "_cf_scn", "_cf_pos", "_cf_deleted", "_cf_src",
             "_cf_tag", "_cf_absent"]
    got = sorted((r[0], r[names.index("_cf_seq")], r[names.index("_cf_deleted")],
                  r[names.index("_cf_absent")] and tuple(r[names.index("_cf_absent")]))
                 for r in fast)
    assert got == [(1, 1, False, None), (1, 2, False, None), (1, 3, False, None),
                   (2, 1, False, None), (2, 2, True, None), (3, 1, False, None),
                   (3, 3, False, ("name", "raw")), (7, 2, False, None)]
    [partial] = [r for r in fast if r[0] == 3 and r[names.index("_cf_seq")] == 3]
    assert partial[names.index("name")] is None and partial[names.index("sal")] == Decimal(
        "3.25")
    assert fast[0][names.index("raw")] == bytes([1, 1])


def test_the_arrow_path_reads_only_the_asked_columns(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    table = new_table(tmp_path, ["id"], COLUMNS)
    files = write(spark, table, [image(i, 1) for i in range(1, 5)], "base", "b")
    fast, slow = _both(spark, table, files, [(2,), (4,)], ["seen"])
    assert fast == slow and [len(r) for r in fast] == [2 + 7] * 2
    assert _both(spark, table, files, [(99,)], ["seen"]) == ([], [])  # no key found


def test_composite_keys(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cols = [("region", "VARCHAR2"), *COLUMNS]
    table = new_table(tmp_path, ["region", "id"], cols)
    rows = [image(i, 1, key={"region": r, "id": i}) for r in ("a", "b") for i in (1, 2, 3)]
    files = write(spark, table, rows, "base", "b")
    files += write(spark, table, [image(2, 2, deleted=True, key={"region": "b", "id": 2})],
                    "delta", "d")
    fast, slow = _both(spark, table, files,
                       [("a", 1), ("b", 2), ("c", 1), (None, 3), ("a", None)], ["name", "sal"])
    assert fast == slow
    assert sorted((r[0], r[1], r[4]) for r in fast) == [("a", 1, 1), ("b", 2, 1), ("b", 2, 2)]


def test_a_file_written_before_a_column_was_added_gives_nulls(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    old = new_table(tmp_path, ["id"], COLUMNS)
    files = write(spark, old, [image(i, 1) for i in (1, 2, 3)], "base", "b")
    new = old.with_columns([("extra", "VARCHAR2")])
    files += write(spark, new, [{**image(1, 2), "extra": "x"}], "delta", "d")
    fast, slow = _both(spark, new, files, [(1,), (3,)], ["name", "extra"])
    assert fast == slow
    assert sorted((r[0], r[2] or "") for r in fast) == [(1, ""), (1, "x"), (3, "")]


def test_the_spark_path_when_the_arrow_path_cannot_show_it_is_exact(spark, tmp_path,  # type: ignore[no-untyped-def]
                                                                    monkeypatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = new_table(tmp_path, ["id"], COLUMNS)
    files = write(spark, table, [image(i, 1) for i in (1, 2, 3)], "base", "b")
    keys = spark.createDataFrame([(1,), (2,)], "id bigint")
    assert lookup_arrow.lookup(spark, table, files, keys, ["name"]) is not None

    def odd(name: str, column: str, values: Any, *, spark_version: str | None = "4.0.0"
            ) -> list[FileEntry]:
        path = tmp_path / f"{name}.parquet"
        data = pa.table({"id": pa.array([1], pa.int64()), column: values})
        if spark_version is not None:
            data = data.replace_schema_metadata(spark_metadata(spark_version))
        pq.write_table(data, path)
        return [*files, FileEntry(f"file:{path}", 0, 9, "delta", 1)]

    # a file of the right types that says Spark 3+ wrote it: read with Arrow
    assert lookup_arrow.lookup(spark, table, odd("fine", "name", pa.array(["x"])), keys,
                               ["name"]) is not None
    # not written by Spark, or by Spark 2 (dates of another calendar)
    for version in (None, "2.4.8"):
        assert lookup_arrow.lookup(spark, table, odd("plain", "name", pa.array(["x"]),
                                                     spark_version=version),
                                   keys, ["name"]) is None
    # a type Spark would convert on read (decimal as an integer), a name in another case
    assert lookup_arrow.lookup(spark, table, odd("int", "sal", pa.array([1])), keys,
                               ["sal"]) is None
    assert lookup_arrow.lookup(spark, table, odd("case", "NAME", pa.array(["x"])), keys,
                               ["name"]) is None
    # not a local file, too many keys, a floating-point key
    remote = [*files, FileEntry("s3a://bucket/t/x.parquet", 0, 9, "delta", 1)]
    assert lookup_arrow.lookup(spark, table, remote, keys, ["name"]) is None
    assert lookup_arrow.lookup(spark, table, files, keys, ["name"],
                               max_keys=lookup_arrow.MAX_KEYS + 1) is None
    monkeypatch.setattr(lookup_arrow, "MAX_KEYS", 1)
    assert lookup_arrow.lookup(spark, table, files, keys, ["name"]) is None
    monkeypatch.undo()
    floats = new_table(tmp_path / "f", ["score"], COLUMNS)
    ffiles = write(spark, floats, [image(1, 1)], "base", "b")
    fkeys = spark.createDataFrame([(1 / 3,)], "score double")
    assert lookup_arrow.lookup(spark, floats, ffiles, fkeys, ["name"]) is None


APPLY = """
applies:
  - name: ap
    queue: strmadmin.apply_q@site2
    buckets: 2
    conflicts:
      handlers:
        - {table: hr.emp, columns: [sal], method: MAXIMUM, resolution_column: sal}
"""


def _scenario(spark: Any, cfg: Any, enqueue: Any) -> tuple[list[Any], list[Any]]:
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}", sal=100 * i, big="x" * 10), pos=i)
                  for i in range(1, 7)])
    results = [apply_once(spark, cfg, "ap")]
    enqueue(cfg, [
        row("UPDATE", new=vals(id=1, name="a", sal=50), old=vals(id=1, sal=7), txn="t1",
            scn=20),  # an update conflict MAXIMUM resolves (the target's 100 stays)
        row("UPDATE", new=vals(id=2, name="b"), old=vals(id=2), txn="t2", scn=21),  # partial
        row("DELETE", old=vals(id=3), txn="t3", scn=22),
        row("UPDATE", new=vals(id=9, name="z"), old=vals(id=9), txn="t4", scn=23),  # missing
        row("INSERT", new=vals(id=4, name="dup", sal=1, big="y"), txn="t5", scn=24),
    ])
    results.append(apply_once(spark, cfg, "ap"))
    enqueue(cfg, [row("UPDATE", new=vals(id=2, name="b2", sal=201), old=vals(id=2, sal=200),
                      txn="t6", scn=30),
                  row("INSERT", new=vals(id=3, name="back", sal=3, big="w"), txn="t7", scn=31),
                  row("DELETE", old=vals(id=3), txn="t8", scn=29)])  # already deleted
    results.append(apply_once(spark, cfg, "ap"))
    summary = [(r.transactions, r.errors, r.conflicts_resolved, r.superseded, r.changes)
               for r in results]
    return summary, table_rows(spark, cfg, cols=["id", "name", "sal", "big"])


def _cfg(root: Path) -> Any:
    root.mkdir()
    (root / "pipeline.yaml").write_text(BASE + textwrap.dedent(APPLY))
    cfg = load_config(root / "pipeline.yaml")
    open_pipeline(cfg)
    return cfg


def test_an_apply_gives_the_same_with_either_path(spark, enqueue, tmp_path,  # type: ignore[no-untyped-def]
                                                  monkeypatch) -> None:
    monkeypatch.setattr(driver_pass, "ENABLED", False)  # the Spark pass's pieces
    taken = spy_on(monkeypatch, lookup_arrow, "lookup")
    fast = _scenario(spark, _cfg(tmp_path / "fast"), enqueue)
    assert taken and all(taken)
    monkeypatch.setattr(lookup_arrow, "lookup", lambda *a, **k: None)
    slow = _scenario(spark, _cfg(tmp_path / "slow"), enqueue)
    assert fast == slow
    assert fast[1] == [(1, "a", 100, "x" * 10), (2, "b2", 201, "x" * 10),
                       (3, "back", 3, "w"), (4, "n4", 400, "x" * 10),
                       (5, "n5", 500, "x" * 10), (6, "n6", 600, "x" * 10)]
