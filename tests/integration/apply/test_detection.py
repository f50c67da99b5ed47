"""Effects of row LCRs, and which keys detection sends to the exact fold."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from changeflow import lcr
from changeflow.apply import conflicts, images
from changeflow.targets.catalog import TargetTable

from .conftest import row, vals

pytestmark = pytest.mark.spark

TABLE = TargetTable("hr.emp", ["id"],
                    [("id", "INTEGER"), ("name", "VARCHAR2"), ("sal", "NUMBER")], 4)


def _changes(spark: Any, messages: list[dict[str, Any]]) -> Any:
    """Row LCRs as a frame typed as the queue's (through Arrow, as the queue reads them)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    table = pa.Table.from_pylist([{n: m[n] for n in lcr.FIELD_NAMES} for m in messages],
                                 schema=lcr.arrow_schema())
    return spark.createDataFrame(table).select(
        *[F.col(f.name).cast(f.dataType) for f in lcr.spark_schema().fields])


def test_effects_one_per_lcr_and_two_for_a_key_moving_update(spark: Any) -> None:
    lcrs = [
        row("INSERT", new=vals(id=1, name="a", sal=Decimal(10)), pos=1),
        row("UPDATE", old=vals(id=2, name="b"), new=vals(id=2, name="b2"), pos=2),
        row("DELETE", old=vals(id=3, name="c"), pos=3),
        row("UPDATE", old=vals(id=4, name="d"), new=vals(id=5, sal=Decimal(7)), pos=4),
        row("UPDATE", new=vals(id=6, name="f", sal=Decimal(1)), pos=5),  # no old values
        row("LOB_TRIM", new=vals(id=7, name="g"), pos=6),  # not a row change: no effect
    ]
    eff = images.effects(_changes(spark, lcrs), TABLE, ["name"], partial=True)
    got = sorted(tuple(r) for r in eff.select(
        "id", "name", "sal", "_e_kind", "_e_pos", "_e_sub", "_e_absent", "_o_name", "_h_name",
        "_e_src", "_e_scn", "_e_txn").collect())
    d = Decimal
    assert got == [
        (1, "a", d(10), "I", 1, 0, None, None, False, "DBS1.EXAMPLE.COM", 10, "t1"),
        (2, "b2", None, "U", 2, 0, ["sal"], "b", True, "DBS1.EXAMPLE.COM", 10, "t1"),
        (3, None, None, "D", 3, 0, None, "c", True, "DBS1.EXAMPLE.COM", 10, "t1"),
        (4, None, None, "D", 4, 0, None, "d", True, "DBS1.EXAMPLE.COM", 10, "t1"),
        (5, "d", d(7), "I", 4, 1, None, "d", True, "DBS1.EXAMPLE.COM", 10, "t1"),
        (6, "f", d(1), "U", 5, 0, None, None, False, "DBS1.EXAMPLE.COM", 10, "t1"),
    ]
    assert [c for c in eff.columns if c in dict(TABLE.columns)] == ["id", "name", "sal"]


def _current(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(rows, "id bigint, _c_exists boolean, _c_src string, "
                                       "_c_scn bigint, _c_pos bigint, _c_name string")


def test_troubled_keys_are_the_keys_detection_sends_to_the_fold(spark: Any) -> None:
    from pyspark.sql import functions as F

    src = "DBS1.EXAMPLE.COM"
    lcrs = [
        row("UPDATE", old=vals(id=1, name="a"), new=vals(id=1, name="a2"), pos=1),  # fine
        row("UPDATE", old=vals(id=2, name="x"), new=vals(id=2, name="b2"), pos=2),  # differs
        row("INSERT", new=vals(id=3, name="c"), pos=3),  # the key exists
        row("UPDATE", old=vals(id=4, name="d"), new=vals(id=4, name="d2"), pos=4),  # replay
        row("DELETE", old=vals(id=5, name="e"), pos=5),  # the key is missing
        row("UPDATE", old=vals(id=6, name="f"), new=vals(id=6, name="f2"), pos=6),
        row("UPDATE", old=vals(id=6, name="f2"), new=vals(id=6, name="f3"), pos=7),  # fine
        row("INSERT", new=vals(id=None, name="n1"), pos=8),
        row("INSERT", new=vals(id=None, name="n2"), pos=9),  # the NULL key exists now
    ]
    eff = images.effects(_changes(spark, lcrs), TABLE, ["name"], partial=True).persist()
    current = _current(spark, [(1, True, src, 1, 1, "a"), (2, True, src, 1, 2, "b"),
                               (3, True, src, 1, 3, "c"), (4, True, src, 10, 4, "d2"),
                               (6, True, src, 1, 6, "f")])
    wide = conflicts.detect(eff, current, TABLE, ["name"], detect_conflicts=True)
    odd = {r.id for r in wide.where(F.col("_x_bad") | F.col("_x_skip")).collect()}
    assert odd == {2, 3, 4, 5, None}
    troubled = conflicts.troubled_keys(eff, current, TABLE, ["name"], detect_conflicts=True)
    assert sorted((r.id for r in troubled.collect()), key=lambda i: (i is not None, i)) == [
        None, 2, 3, 4, 5]
    fast = conflicts.by_keys(eff, troubled, ["id"], "left_anti")
    assert fast.columns == eff.columns
    assert sorted(((r.id, r._e_pos) for r in fast.collect()), key=repr) == [
        (1, 1), (6, 6), (6, 7)]
    fold = conflicts.by_keys(eff, troubled, ["id"], "left_semi")
    assert sorted(r._e_pos for r in fold.collect()) == [2, 3, 4, 5, 8, 9]
    eff.unpersist()


def test_single_images_are_the_final_images_of_one_effect_per_key(spark: Any) -> None:
    lcrs = [
        row("INSERT", new=vals(id=1, name="a", sal=Decimal(10)), pos=1),
        row("UPDATE", old=vals(id=2, name="b"), new=vals(id=2, name="b2", sal=Decimal(3)),
            pos=2),
        row("DELETE", old=vals(id=3, name="c"), pos=3),
        row("UPDATE", old=vals(id=4, name="d"), new=vals(id=5, name="e", sal=Decimal(7)),
            pos=4),  # a moved key: D on 4, I on 5
    ]
    eff = images.effects(_changes(spark, lcrs), TABLE, ["name"], partial=False)
    tag = bytes.fromhex("ab12")
    grouped = images.final_images(eff, TABLE, tag, partial=False)
    single = images.single_images(eff, TABLE, tag)
    assert single.columns == grouped.columns
    got = sorted(tuple(r) for r in single.collect())
    assert got == sorted(tuple(r) for r in grouped.collect())
    assert [(r[0], r[6]) for r in got] == [(1, "W"), (2, "W"), (3, "D"), (4, "D"), (5, "W")]


def test_detection_of_one_effect_per_key_needs_no_window(spark: Any) -> None:
    """With one effect per key, ``single`` detection finds what the windows find."""
    src = "DBS1.EXAMPLE.COM"
    lcrs = [
        row("UPDATE", old=vals(id=1, name="a"), new=vals(id=1, name="a2"), pos=1),  # fine
        row("UPDATE", old=vals(id=2, name="x"), new=vals(id=2, name="b2"), pos=2),  # differs
        row("INSERT", new=vals(id=3, name="c"), pos=3),  # the key exists
        row("UPDATE", old=vals(id=4, name="d"), new=vals(id=4, name="d2"), pos=4),  # replay
        row("DELETE", old=vals(id=5, name="e"), pos=5),  # the key is missing
        row("UPDATE", old=vals(id=6, name="f"), new=vals(id=6, name="f2"), pos=6),
        row("UPDATE", old=vals(id=7, name="g"), new=vals(id=7, name="g2"), pos=1),  # older
        row("INSERT", new=vals(id=8, name="h"), pos=8),  # a new key
        row("INSERT", new=vals(id=None, name="n1"), pos=9),  # a NULL key
    ]
    eff = images.effects(_changes(spark, lcrs), TABLE, ["name"], partial=True).persist()
    current = _current(spark, [(1, True, src, 1, 1, "a"), (2, True, src, 1, 2, "b"),
                               (3, True, src, 1, 3, "c"), (4, True, src, 10, 4, "d2"),
                               (6, True, src, 1, 6, "f"), (7, True, src, 11, 1, "g")])
    cols = ["id", "_x_skip", "_x_conflict", "_x_bad"]
    found = {}
    for single in (False, True):
        det = conflicts.detect(eff, current, TABLE, ["name"], detect_conflicts=True,
                               single=single)
        found[single] = sorted((tuple(r) for r in det.select(*cols).collect()), key=repr)
    assert found[True] == found[False]
    assert found[True] == sorted([
        (1, False, None, False), (2, False, "update", True), (3, False, "uniqueness", True),
        (4, True, "update", True), (5, False, "delete", True), (6, False, None, False),
        (7, True, None, False), (8, False, None, False), (None, False, "null_key", True)],
        key=repr)
    eff.unpersist()
