"""A pass's delta written on the driver with Arrow: the Spark path's files, or nothing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply import delta_arrow, driver_pass, lookup_arrow, passes
from changeflow.apply.arrow_files import open_checked
from changeflow.apply.target import BUCKET, FileEntry, TargetTable, bucket_expr, write_files

from .conftest import taken as spy_on
from .target_files import COLUMNS, DATA, image, new_table
from .test_lookup_arrow import _cfg, _scenario

pytestmark = pytest.mark.spark


def _frame(spark: Any, table: TargetTable, rows: list[dict[str, Any]]) -> Any:
    schema = table.spark_schema()
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows],
                                 schema)


def _read(spark: Any, table: TargetTable, files: list[FileEntry]) -> list[tuple[Any, ...]]:
    """Every row of the files as Spark reads them, with the bucket its file is in."""
    out = []
    for f in files:
        df = spark.read.schema(table.spark_schema()).parquet(f.path)
        out += [(*r, f.bucket) for r in df.collect()]
    return sorted(out, key=lambda r: tuple((v is None, repr(v)) for v in r))


def test_the_arrow_delta_is_the_spark_delta(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = new_table(tmp_path, ["id"], COLUMNS)
    rows = [image(i, 2) for i in range(1, 40)] + [
        image(40, 2, deleted=True), image(41, 2, absent=["name", "raw"]),
        image(42, 2, name="ünïcødé"), {**image(43, 2), "_cf_seq": None}]
    df = _frame(spark, table, rows)
    got = delta_arrow.write(spark, table, df, "pdelta", "fast", max_rows=len(rows))
    assert got is not None, "the Arrow path was not taken"
    fast, n_fast = got
    slow, n_slow = write_files(spark, table, df, "pdelta", "slow")
    assert n_fast == n_slow == len(rows)
    assert sorted(f.bucket for f in fast) == sorted(f.bucket for f in slow) == [0, 1]
    assert all(f.kind == "pdelta" and f.version == 1 and f.n_bytes == os.path.getsize(
        f.path.removeprefix("file:")) for f in fast)
    assert _read(spark, table, fast) == _read(spark, table, slow)
    # each row is in the bucket Spark's hash gives its key
    for f in fast:
        buckets = spark.read.schema(table.spark_schema()).parquet(f.path).select(
            bucket_expr(["id"], 2).alias(BUCKET)).distinct().collect()
        assert [r[0] for r in buckets] == [f.bucket]
    # Spark infers the declared types from the files (the target_column_types check)...
    declared = {f.name: f.dataType for f in table.spark_schema().fields}
    inferred = spark.read.parquet(*[f.path for f in fast]).schema
    assert {f.name: f.dataType for f in inferred.fields if f.name != BUCKET} == declared
    # ...and the Arrow readers accept them as Spark's own
    want = lookup_arrow.af.arrow_schema(lookup_arrow.schema_of(table, DATA))
    assert want is not None
    for f in fast:
        open_checked(f.path.removeprefix("file:"), want, ["id"])


def test_it_declines_what_it_cannot_show(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = new_table(tmp_path, ["id"], COLUMNS)
    df = _frame(spark, table, [image(1, 2)])
    assert delta_arrow.write(spark, table, df, "delta", "big",
                             max_rows=delta_arrow.MAX_ROWS + 1) is None
    remote = TargetTable("hr.t", "s3a://bucket/hr.t", ["id"], COLUMNS, 2, 0)
    assert delta_arrow.write(spark, remote, df, "delta", "s3", max_rows=1) is None
    assert not (tmp_path / "hr.t").exists()  # nothing written by either
    empty = delta_arrow.write(spark, table, df.limit(0), "delta", "none", max_rows=1)
    assert empty == ([], 0)


def test_an_apply_gives_the_same_with_either_path(spark, enqueue, tmp_path,  # type: ignore[no-untyped-def]
                                                  monkeypatch) -> None:
    monkeypatch.setattr(driver_pass, "ENABLED", False)  # the Spark pass's pieces
    taken = spy_on(monkeypatch, delta_arrow, "write")
    fast = _scenario(spark, _cfg(tmp_path / "fast"), enqueue)
    assert taken and all(taken)
    monkeypatch.setattr(passes, "ARROW_WRITES", False)
    taken.clear()
    slow = _scenario(spark, _cfg(tmp_path / "slow"), enqueue)
    assert not taken
    assert fast == slow
    assert fast[1] == [(1, "a", 100, "x" * 10), (2, "b2", 201, "x" * 10),
                       (3, "back", 3, "w"), (4, "n4", 400, "x" * 10),
                       (5, "n5", 500, "x" * 10), (6, "n6", 600, "x" * 10)]
