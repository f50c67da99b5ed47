"""TRUNCATE and DROP TABLE of tables a Parquet target does not have (issue 13).

A TRUNCATE of a table the target has no rows of yet (a PostgreSQL capture never sends
CREATE TABLE: pgbench -i truncates and reloads its tables in one transaction) empties
nothing: the rows after it create the table. A DROP TABLE does drop: rows after it in
the same transaction fail it.
"""

from __future__ import annotations

import pytest

from changeflow.apply import errorq
from changeflow.apply.engine import apply_once, targets_of
from changeflow.sites import queue_site

from .conftest import QUEUE, ddl, row, table_rows, vals

pytestmark = pytest.mark.spark


def test_truncate_of_a_new_table_creates_it_and_drop_still_drops(  # type: ignore[no-untyped-def]
        spark, make_cfg, enqueue) -> None:
    cfg = make_cfg("applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2}]")
    dept = {"table": "HR.DEPT"}
    enqueue(cfg, [
        # a row of its own, then one transaction: a row, TRUNCATE, two rows: only the
        # two last rows survive, in a table the target creates
        row("INSERT", new=vals(id=1, name="a"), txn="own", scn=10, **dept),
        row("INSERT", new=vals(id=2, name="b"), txn="tr", scn=12, pos=1, **dept),
        ddl('TRUNCATE TABLE "HR"."DEPT"', "TRUNCATE TABLE", txn="tr", scn=12, pos=2, **dept),
        ddl('TRUNCATE TABLE "HR"."NONE"', "TRUNCATE TABLE", table="HR.NONE", txn="tr",
            scn=12, pos=3),
        row("INSERT", new=vals(id=3, name="c"), txn="tr", scn=12, pos=4, **dept),
        row("INSERT", new=vals(id=4, name="d"), txn="tr", scn=12, pos=5, **dept),
        # CREATE, a row, DROP, a row: the last row has no table
        ddl("CREATE TABLE hr.tmp (id int PRIMARY KEY, name varchar(5))", "CREATE TABLE",
            table="HR.TMP", txn="cd", scn=20, pos=1),
        row("INSERT", new=vals(id=1, name="x"), table="HR.TMP", txn="cd", scn=20, pos=2),
        ddl("DROP TABLE hr.tmp", "DROP TABLE", table="HR.TMP", txn="cd", scn=20, pos=3),
        row("INSERT", new=vals(id=2, name="y"), table="HR.TMP", txn="cd", scn=20, pos=4),
        # DROP TABLE IF EXISTS of a table the target never had, then a row of it
        ddl("DROP TABLE IF EXISTS hr.never", "DROP TABLE", table="HR.NEVER", txn="de",
            scn=21, pos=1),
        row("INSERT", new=vals(id=1, name="z"), table="HR.NEVER", txn="de", scn=21, pos=2),
    ])
    res = apply_once(spark, cfg, "ap")
    rt, _ = queue_site(cfg, QUEUE)
    failed = {e.transaction_id: (e.error_kind, e.error_message)
              for e in errorq.entries(rt.store, "ap")}
    assert sorted(failed) == ["cd", "de"] and res.errors == 2, failed
    for txn, table in (("cd", "hr.tmp"), ("de", "hr.never")):
        kind, text = failed[txn]
        assert kind == "table" and f"{table} was dropped earlier in its transaction" in text
    assert table_rows(spark, cfg, "hr.dept") == [(3, "c"), (4, "d")]
    catalog = targets_of(cfg, cfg.applies[0])
    assert catalog.get(spark, "hr.none") is None  # a TRUNCATE alone creates nothing
    assert catalog.get(spark, "hr.tmp") is None and catalog.get(spark, "hr.never") is None
