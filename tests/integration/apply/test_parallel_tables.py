"""A pass works on its tables side by side (``parallelism``): the same outcome as one table
after the other, conflicts across tables included."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from changeflow.apply import errorq
from changeflow.apply.engine import apply_once, targets_of
from changeflow.config import load_config
from changeflow.sites import open_pipeline, queue_site
from changeflow.targets.read import snapshots

from .conftest import BASE, QUEUE, row, table_rows, vals

pytestmark = pytest.mark.spark
TABLES = ("HR.EMP", "HR.DEPT", "HR.LOC")


def _cfg(root: Path, parallelism: int):  # type: ignore[no-untyped-def]
    root.mkdir()
    (root / "pipeline.yaml").write_text(BASE + textwrap.dedent(f"""
        applies:
          - {{name: ap, queue: {QUEUE}, buckets: 2, parallelism: {parallelism}}}
    """))
    cfg = load_config(root / "pipeline.yaml")
    open_pipeline(cfg)
    return cfg


def _batch() -> list[dict]:  # type: ignore[type-arg]
    return [
        # txn a changes EMP 1 as it should, but DEPT 1's old value is wrong: a fails whole
        row("UPDATE", table="HR.EMP", new=vals(id=1, v=150), old=vals(id=1, v=100), txn="a",
            scn=20, pos=1),
        row("UPDATE", table="HR.DEPT", new=vals(id=1, v=7), old=vals(id=1, v=999), txn="a",
            scn=20, pos=2),
        # txn b follows a on EMP 1: consistent with a, a conflict once a is out (found in
        # a later round than a's, whichever table is looked at first)
        row("UPDATE", table="HR.EMP", new=vals(id=1, v=175), old=vals(id=1, v=150), txn="b",
            scn=21),
        # c and d touch the other tables and hold
        row("INSERT", table="HR.LOC", new=vals(id=9, v=90), txn="c", scn=22, pos=1),
        row("UPDATE", table="HR.DEPT", new=vals(id=2, v=201), old=vals(id=2, v=200), txn="c",
            scn=22, pos=2),
        row("UPDATE", table="HR.LOC", new=vals(id=1, v=101), old=vals(id=1, v=100), txn="d",
            scn=23),
        row("DELETE", table="HR.EMP", old=vals(id=4, v=400), txn="d", scn=23, pos=2),
        # a new table, written by MERGE INTO beside the others' row deltas
        row("INSERT", table="HR.NEW", new=vals(id=1, v=1), txn="e", scn=24),
    ]


@pytest.mark.parametrize("parallelism", [1, 4])
def test_tables_side_by_side_end_as_one_after_the_other(spark, enqueue, tmp_path,  # type: ignore[no-untyped-def]
                                                        parallelism) -> None:
    cfg = _cfg(tmp_path / f"p{parallelism}", parallelism)
    enqueue(cfg, [row("INSERT", table=t, new=vals(id=i, v=100 * i), txn=f"s{i}", scn=i, pos=j)
                  for i in (1, 2, 3, 4) for j, t in enumerate(TABLES, 1)])
    assert apply_once(spark, cfg, "ap").errors == 0
    enqueue(cfg, _batch())
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors) == (3, 2)
    rt, _ = queue_site(cfg, QUEUE)
    assert sorted((e.transaction_id, e.error_kind) for e in errorq.entries(rt.store, "ap")) == [
        ("a", "conflict"), ("b", "conflict")]
    assert table_rows(spark, cfg, "hr.emp", ["id", "v"]) == [(1, 100), (2, 200), (3, 300)]
    assert table_rows(spark, cfg, "hr.dept", ["id", "v"]) == [
        (1, 100), (2, 201), (3, 300), (4, 400)]
    assert table_rows(spark, cfg, "hr.loc", ["id", "v"]) == [
        (1, 101), (2, 200), (3, 300), (4, 400), (9, 90)]
    assert table_rows(spark, cfg, "hr.new", ["id", "v"]) == [(1, 1)]
    # each pass's snapshot of each table is listed with the pass that wrote it, and no
    # scratch snapshot is (the scratch mark is a write option, not a session setting
    # another table's write could pick up)
    targets = targets_of(cfg, cfg.applies[0])
    for name, passes in (("hr.emp", 2), ("hr.dept", 2), ("hr.loc", 2), ("hr.new", 1)):
        listed = snapshots(spark, targets, name)
        assert len({s["pass_id"] for s in listed if s["apply"] == "ap"}) == passes, listed
        assert all(s["on_main"] for s in listed), (name, listed)
