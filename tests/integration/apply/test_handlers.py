"""DML, DDL, precommit and message handlers on a Parquet apply; DDL; enqueue destinations."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from changeflow.apply import errorq
from changeflow.apply.engine import apply_once, targets_of
from changeflow.apply.records import HandlerError
from changeflow.queues import io as qio
from changeflow.sites import queue_site

from .conftest import QUEUE, ddl, row, table_rows, user_msg, vals

pytestmark = pytest.mark.spark

HANDLERS = '''
SEEN = []

def emp(lcr):
    if lcr.get_value("NEW", "name") == "skip":
        return                                   # not executed: skipped
    if lcr.get_value("NEW", "name") == "boom":
        raise ValueError("no boom allowed")
    lcr.set_value("NEW", "name", lcr.get_value("NEW", "name").upper())
    lcr.execute()
    lcr.set_object_name("EMP_AUDIT")             # and a copy into another table
    lcr.execute()

def ddl(lcr):
    if "INDEX" in lcr.get_ddl_text():
        return                                   # ignore index DDL
    lcr.execute()

def precommit(commit):
    if commit.transaction_id == "veto":
        raise RuntimeError("vetoed")

def message(msg):
    if msg.get("qty") < 0:
        raise ValueError("negative quantity")
'''


def _module(tmp_path: Path) -> str:
    name = f"cf_handlers_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(HANDLERS)
    sys.path.insert(0, str(tmp_path))
    return name


def _errors(cfg) -> list[tuple]:  # type: ignore[no-untyped-def]
    rt, _ = queue_site(cfg, QUEUE)
    return sorted((e.transaction_id or e.failing_msg_id, e.error_kind, e.error_message)
                  for e in errorq.entries(rt.store, "ap"))


def test_handlers_run_in_the_apply(spark, make_cfg, enqueue, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    mod = _module(tmp_path)
    cfg = make_cfg(textwrap.dedent(f"""
        applies:
          - name: ap
            queue: strmadmin.apply_q@site2
            buckets: 2
            handlers:
              dml: [{{table: hr.emp, handler: "{mod}:emp"}}]
              ddl: "{mod}:ddl"
              precommit: "{mod}:precommit"
              message: "{mod}:message"
    """))
    enqueue(cfg, [
        row("INSERT", new=vals(id=1, name="ann"), txn="t1", scn=10),
        row("INSERT", new=vals(id=2, name="skip"), txn="t2", scn=11),
        row("INSERT", new=vals(id=3, name="ok"), txn="t3", scn=12, pos=1),
        row("INSERT", new=vals(id=4, name="boom"), txn="t3", scn=12, pos=2),
        row("INSERT", new=vals(id=5, name="vetoed"), txn="veto", scn=13),
        user_msg(1, qty=3), user_msg(2, qty=-1),
    ])
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors, res.user_messages) == (2, 3, 2)
    assert table_rows(spark, cfg) == [(1, "ANN")]
    assert table_rows(spark, cfg, "hr.emp_audit") == [(1, "ANN")]
    errors = _errors(cfg)
    assert [(k, kind) for k, kind, _ in errors] == [("t3", "handler"), ("user-2", "message"),
                                                    ("veto", "handler")]
    assert "no boom allowed" in errors[0][2] and "vetoed" in errors[2][2]
    # DDL: the handler drops index DDL, ADD COLUMN evolves the table (old rows: NULL)
    enqueue(cfg, [ddl("CREATE INDEX emp_i ON hr.emp (name)", "CREATE INDEX", txn="d1", scn=20),
                  ddl("ALTER TABLE hr.emp ADD (dept NUMBER(4))", "ALTER TABLE", txn="d2",
                      scn=21),
                  row("INSERT", new=vals(id=6, name="x", dept=10), txn="t6", scn=22)])
    res = apply_once(spark, cfg, "ap")
    assert res.errors == 0 and res.passes == 3  # a pass ends at each DDL transaction
    assert table_rows(spark, cfg, cols=["id", "name", "dept"]) == [(1, "ANN", None),
                                                                   (6, "X", 10)]


def test_bad_handler_path_applies_nothing(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg("""
        applies:
          - {name: ap, queue: strmadmin.apply_q@site2,
             handlers: {dml: [{table: hr.emp, handler: "no_such_module_xyz:fn"}]}}
    """)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"))])
    with pytest.raises(HandlerError, match="'no_such_module_xyz' cannot be imported"):
        apply_once(spark, cfg, "ap")
    rt, q = queue_site(cfg, QUEUE)
    assert rt.catalog.position(q, "apply:ap") == 0
    assert targets_of(cfg, cfg.applies[0]).get(spark, "hr.emp") is None


def test_iceberg_ddl_create_truncate_rename_drop(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg("applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2}]")
    enqueue(cfg, [
        ddl("CREATE TABLE hr.dept (id int PRIMARY KEY, name varchar(20))", "CREATE TABLE",
            table="HR.DEPT", txn="c", scn=10),
        row("INSERT", new=vals(id=1, name="a"), table="HR.DEPT", txn="i1", scn=11),
        # in one transaction: rows, TRUNCATE, a row after it: only the last row survives
        row("INSERT", new=vals(id=2, name="b"), table="HR.DEPT", txn="tr", scn=12, pos=1),
        ddl('TRUNCATE TABLE "HR"."DEPT"', "TRUNCATE TABLE", table="HR.DEPT", txn="tr",
            scn=12, pos=2),
        row("INSERT", new=vals(id=3, name="c"), table="HR.DEPT", txn="tr", scn=12, pos=3),
        ddl("ALTER TABLE hr.dept RENAME COLUMN name TO title", "ALTER TABLE", table="HR.DEPT",
            txn="rn", scn=13),
    ])
    res = apply_once(spark, cfg, "ap")
    assert table_rows(spark, cfg, "hr.dept") == [(3, "c")]
    assert res.errors == 0  # RENAME COLUMN is Iceberg schema evolution
    targets = targets_of(cfg, cfg.applies[0])
    dept = targets.get(spark, "hr.dept")
    assert dept is not None and dept.column_names == ["id", "title"]
    # A column added by new rows, one dropped; a type Iceberg cannot change fails its
    # transaction into the error queue with the reason.
    enqueue(cfg, [
        row("INSERT", new=vals(id=5, title="e", floor=3), table="HR.DEPT", txn="f", scn=14),
        ddl("ALTER TABLE hr.dept DROP COLUMN floor", "ALTER TABLE", table="HR.DEPT",
            txn="dc", scn=15),
        row("INSERT", new=vals(id=6, title=7), table="HR.DEPT", txn="ty", scn=16)])
    apply_once(spark, cfg, "ap")
    apply_once(spark, cfg, "ap")
    dept = targets.get(spark, "hr.dept")
    assert dept is not None and dept.column_names == ["id", "title"]
    assert table_rows(spark, cfg, "hr.dept") == [(3, "c"), (5, "e")]
    [(txn, kind, text)] = _errors(cfg)
    assert (txn, kind) == ("ty", "table") and "column 'title' is VARCHAR2" in text
    enqueue(cfg, [ddl("DROP TABLE hr.dept", "DROP TABLE", table="HR.DEPT", txn="dr", scn=20),
                  row("INSERT", new=vals(id=4, name="d"), table="HR.DEPT", txn="late",
                      scn=21)])
    apply_once(spark, cfg, "ap")
    assert targets_of(cfg, cfg.applies[0]).get(spark, "hr.dept") is None
    late = [e for e in _errors(cfg) if e[0] == "late"]
    assert late and late[0][1] == "table" and "was dropped" in late[0][2]


def test_enqueue_destination_instead_and_besides(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg("""
        applies:
          - name: ap
            queue: strmadmin.apply_q@site2
            buckets: 2
            enqueue:
              - {queue: strmadmin.other_q@site2, condition: ":dml.get_object_name() = 'JOBS'"}
              - {queue: strmadmin.other_q@site2,
                 condition: ":dml.get_value('NEW', 'ID').AccessNumber() = 2", execute: true}
    """)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a")),
                  row("INSERT", new=vals(id=2, name="b"), pos=2),
                  row("INSERT", new=vals(id=9, name="j"), table="HR.JOBS", pos=3)])
    res = apply_once(spark, cfg, "ap")
    assert res.enqueued == 2
    assert table_rows(spark, cfg) == [(1, "a"), (2, "b")]  # JOBS was enqueued instead
    assert targets_of(cfg, cfg.applies[0]).get(spark, "hr.jobs") is None
    rt, q = queue_site(cfg, "strmadmin.other_q@site2")
    got = qio.read_batches(spark, _all_batches(rt, q)).collect()
    assert sorted((r.object_name, r.origin) for r in got) == [("EMP", "USER"), ("JOBS", "USER")]


def _all_batches(rt, q):  # type: ignore[no-untyped-def]
    rt.catalog.add_consumer(q, "probe")
    return rt.catalog.pending(q, "probe")
