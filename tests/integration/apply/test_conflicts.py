"""Conflict detection and the prebuilt handlers on Parquet targets."""

from __future__ import annotations

import pytest

from changeflow.apply import errorq
from changeflow.apply.config import ConflictHandlerSpec
from changeflow.apply.conflicts import set_handler
from changeflow.apply.engine import apply_once
from changeflow.errors import ConfigError
from changeflow.sites import queue_site

from .conftest import QUEUE, row, table_rows, vals

pytestmark = pytest.mark.spark
COLS = ["id", "name", "sal", "bonus"]


def _seed(spark, cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    enqueue(cfg, [row("INSERT", new=vals(id=i, name=f"n{i}", sal=100 * i, bonus=i), pos=i)
                  for i in (1, 2, 3, 4)])
    apply_once(spark, cfg, "ap")


def _kinds(cfg) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    rt, _ = queue_site(cfg, QUEUE)
    return sorted((e.transaction_id, e.error_kind) for e in errorq.entries(rt.store, "ap"))


def test_unresolved_conflicts_fail_their_transactions(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg("applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2}]")
    _seed(spark, cfg, enqueue)
    enqueue(cfg, [
        row("INSERT", new=vals(id=1, name="dup", sal=1, bonus=0), txn="uniq", scn=20),
        row("UPDATE", new=vals(id=9, name="x", sal=1, bonus=0), old=vals(id=9), txn="missing",
            scn=21),
        row("DELETE", old=vals(id=8), txn="gone", scn=22),
        # the target holds sal=200, the LCR says it was 999: an update conflict; the
        # transaction's other change (id 3) is not applied either
        row("UPDATE", new=vals(id=3, name="n3", sal=301, bonus=3), old=vals(id=3, sal=300),
            txn="differs", scn=23, pos=1),
        row("UPDATE", new=vals(id=2, name="n2", sal=201, bonus=2), old=vals(id=2, sal=999),
            txn="differs", scn=23, pos=2),
        row("UPDATE", new=vals(id=4, name="n4", sal=401, bonus=4), old=vals(id=4, sal=400),
            txn="fine", scn=24),
    ])
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors) == (1, 4)
    assert _kinds(cfg) == [("differs", "conflict"), ("gone", "conflict"),
                           ("missing", "conflict"), ("uniq", "conflict")]
    assert table_rows(spark, cfg, cols=COLS) == [
        (1, "n1", 100, 1), (2, "n2", 200, 2), (3, "n3", 300, 3), (4, "n4", 401, 4)]
    rt, _ = queue_site(cfg, QUEUE)
    [differs] = [e for e in errorq.entries(rt.store, "ap") if e.transaction_id == "differs"]
    assert "sal: target 200, LCR old value 999" in differs.error_message
    assert differs.n_messages == 2 and differs.failing_position == 2


def test_prebuilt_handlers_resolve(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg("""
        applies:
          - name: ap
            queue: strmadmin.apply_q@site2
            buckets: 2
            conflicts:
              handlers:
                - {table: hr.emp, columns: [sal], method: MAXIMUM, resolution_column: sal}
                - {table: hr.emp, columns: [bonus], method: DISCARD}
                - {table: hr.emp, columns: [name], method: OVERWRITE}
                - {table: hr.emp, conflict: uniqueness, method: MINIMUM, resolution_column: sal}
                - {table: hr.emp, conflict: delete, method: OVERWRITE}
    """)
    _seed(spark, cfg, enqueue)
    enqueue(cfg, [
        # sal group: 150 < 100? no: MAXIMUM keeps the higher of target 100 and LCR 150
        row("UPDATE", new=vals(id=1, name="a", sal=150, bonus=7), old=vals(id=1, sal=1, bonus=1,
            name="zz"), txn="t1", scn=20),
        # 150 is less than the target's 200: MAXIMUM keeps 200; bonus conflicts: DISCARD
        row("UPDATE", new=vals(id=2, name="b", sal=150, bonus=7), old=vals(id=2, sal=5, bonus=5),
            txn="t2", scn=21),
        # uniqueness, MINIMUM: the LCR's 50 < 300 wins; 999 > 400 loses
        row("INSERT", new=vals(id=3, name="c", sal=50, bonus=0), txn="t3", scn=22),
        row("INSERT", new=vals(id=4, name="d", sal=999, bonus=0), txn="t4", scn=23),
        # row missing, OVERWRITE: the UPDATE becomes an INSERT
        row("UPDATE", new=vals(id=7, name="g", sal=70, bonus=0), old=vals(id=7), txn="t5",
            scn=24),
    ])
    res = apply_once(spark, cfg, "ap")
    assert (res.errors, res.conflicts_resolved) == (0, 4)
    assert table_rows(spark, cfg, cols=COLS) == [
        (1, "a", 150, 7), (2, "b", 200, 2), (3, "c", 50, 0), (4, "n4", 400, 4),
        (7, "g", 70, 0)]


def test_compare_list_and_detection_off(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg("""
        applies:
          - {name: ap, queue: strmadmin.apply_q@site2, buckets: 2,
             conflicts: {compare: {hr.emp: [sal]}}}
          - {name: upsert, queue: strmadmin.other_q@site2, buckets: 2,
             conflicts: {detect: false}}
    """)
    _seed(spark, cfg, enqueue)
    # bonus differs but is not compared: no conflict
    enqueue(cfg, [row("UPDATE", new=vals(id=1, name="n1", sal=101, bonus=9),
                      old=vals(id=1, sal=100, bonus=555), txn="t1", scn=20)])
    assert apply_once(spark, cfg, "ap").errors == 0
    assert table_rows(spark, cfg, cols=COLS)[0] == (1, "n1", 101, 9)
    other = "strmadmin.other_q@site2"
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="x"), txn="u1", scn=5, table="HR.UPS"),
                  row("INSERT", new=vals(id=1, name="y"), txn="u2", scn=6, table="HR.UPS"),
                  row("UPDATE", new=vals(id=2, name="z"), old=vals(id=2), txn="u3", scn=7,
                      table="HR.UPS"),
                  row("DELETE", old=vals(id=3), txn="u4", scn=8, table="HR.UPS")], other)
    assert apply_once(spark, cfg, "upsert").errors == 0
    assert table_rows(spark, cfg, "hr.ups") == [(1, "y"), (2, "z")]


def test_handler_on_unknown_column_is_refused_before_anything(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg("applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2}]")
    _seed(spark, cfg, enqueue)
    rt, q = queue_site(cfg, QUEUE)
    bad = ConflictHandlerSpec(table="hr.emp", columns=["salary"], method="OVERWRITE")
    with pytest.raises(ConfigError, match="column 'salary' is not a column of the table"):
        set_handler(rt.store, "ap", bad, ["id", "name", "sal", "bonus"])
    set_handler(rt.store, "ap", bad, None)  # the table unknown yet: checked when applying
    enqueue(cfg, [row("UPDATE", new=vals(id=1, name="q"), old=vals(id=1), txn="t9", scn=90)])
    position = rt.catalog.position(q, "apply:ap")
    with pytest.raises(ConfigError, match="'salary' is not a column"):
        apply_once(spark, cfg, "ap")
    assert rt.catalog.position(q, "apply:ap") == position  # nothing applied or acknowledged
    assert table_rows(spark, cfg, cols=COLS)[0] == (1, "n1", 100, 1)
