"""Secure queues, messaging clients (rule sets, row migration), captured LCRs, exceptions."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from changeflow.config import load_config
from changeflow.errors import SecurityError
from changeflow.messaging import admin, connect, views
from changeflow.messaging.errors import CapturedMessageError
from changeflow.rules import admin as rules_admin
from changeflow.rules.config import save_rules
from changeflow.rules.registry import RuleRegistry
from changeflow.state import StateStore

from .conftest import make_queue


def test_secure_queue_grants_and_agents(store: StateStore) -> None:
    make_queue(store, "hr.sq", secure=True, multi=True)
    admin.add_subscriber(store, "hr.sq", "payroll")
    owner = connect(store, user="hr")  # the owner may do everything
    owner.enqueue("hr.sq", b"1", commit=True)
    app = connect(store, user="app")
    with pytest.raises(SecurityError, match="APP has no ENQUEUE"):
        app.enqueue("hr.sq", b"2")
    admin.grant_queue_privilege(store, "all", "hr.sq", "app")
    app.enqueue("hr.sq", b"2", commit=True)
    with pytest.raises(SecurityError, match="agent PAYROLL is not enabled for user APP"):
        app.dequeue("hr.sq", consumer="payroll", wait=0)
    admin.enable_db_access(store, "payroll", "app")
    assert app.dequeue("hr.sq", consumer="payroll", wait=0).payload == b"1"
    app.commit()
    with pytest.raises(SecurityError, match="agent INTRUDER"):
        app.enqueue("hr.sq", b"3", sender="intruder")
    assert admin.revoke_queue_privilege(store, "dequeue", "hr.sq", "app") == 1
    with pytest.raises(SecurityError, match="no DEQUEUE"):
        app.dequeue("hr.sq", consumer="payroll", wait=0)
    assert [m["payload"] if "payload" in m else m["msg_id"] for m in
            views.messages(store, "hr.sq")] and len(views.messages(store, "hr.sq")) == 1
    with pytest.raises(SecurityError, match="needs a user"):
        connect(store).enqueue("hr.sq", b"4")


PIPELINE = """
version: 1
sites:
  s1: {staging_root: st, target_root: t, state_url: "sqlite:///state.db", database: D1}
queues:
  - {name: strm.q, site: s1, queue_table: strm.q_qt}
captures:
  - name: cap
    queue: strm.q
    source: {type: snapshot, database: D1, root: src, tables: [{name: hr.regions, key: [id]}]}
applies:
  - {name: app1, queue: strm.q}
rules: rules.yaml
messaging:
  queue_tables:
    - {name: strm.q_qt, payload_type: SYS.ANYDATA, multiple_consumers: true, secure: true}
  client_users: {msgclient: clerk}
  grants:
    - {privilege: enqueue, queue: strm.q, grantee: producer}
"""


@pytest.fixture()
def client_cfg(tmp_path: Path):
    reg = RuleRegistry()
    rules_admin.add_subset_rules(reg, "hr.employees", "department_id = 50", "dequeue",
                                 "msgclient", "strm.q")
    rules_admin.add_message_rule(reg, "strm.order_t", ":msg.region = 'WEST'", "dequeue",
                                 "msgclient", "strm.q")
    save_rules(reg, tmp_path / "rules.yaml")
    (tmp_path / "p.yaml").write_text(textwrap.dedent(PIPELINE))
    return load_config(tmp_path / "p.yaml")


def lcr(command: str, old: dict | None, new: dict | None) -> dict:
    return {"source_database_name": "D1", "command_type": command, "object_owner": "HR",
            "object_name": "EMPLOYEES", "transaction_id": "t1", "commit_scn": 7,
            "old_values": old, "new_values": new}


def test_clients_become_secure_queue_users_automatically(client_cfg) -> None:
    s = connect(client_cfg, user="producer")
    store = s.store
    privs = {(p["grantee"], p["privilege"]) for p in views.privileges(store, "strm.q")}
    assert {("CAP", "ENQUEUE"), ("APP1", "DEQUEUE"), ("CLERK", "DEQUEUE"),
            ("PRODUCER", "ENQUEUE")} <= privs
    assert ("MSGCLIENT", "CLERK") in {(a["agent"], a["user"]) for a in views.agents(store)}
    subs = {(x["name"], x["kind"]) for x in views.subscribers(store, "strm.q")}
    assert subs == {("MSGCLIENT", "messaging_client")}


def test_messaging_client_dequeues_what_its_rules_select_with_row_migration(client_cfg) -> None:
    admin.create_type(connect(client_cfg).store, "strm.order_t", {"region": "VARCHAR2(8)"})
    p = connect(client_cfg, user="producer")
    into = p.enqueue("strm.q", lcr("UPDATE", {"ID": 1, "DEPARTMENT_ID": 10, "NAME": "Ann"},
                                   {"ID": 1, "DEPARTMENT_ID": 50}), type_name="SYS.LCR$_ROW_RECORD")
    p.enqueue("strm.q", lcr("INSERT", None, {"ID": 2, "DEPARTMENT_ID": 20}),
              type_name="SYS.LCR$_ROW_RECORD")
    west = p.enqueue("strm.q", {"region": "WEST"}, type_name="strm.order_t")
    p.enqueue("strm.q", {"region": "EAST"}, type_name="strm.order_t")
    p.commit()
    clerk = connect(client_cfg, user="clerk")
    first = clerk.dequeue("strm.q", consumer="msgclient", wait=0)
    assert first.msg_id == into
    assert first.payload["command_type"] == "INSERT"  # moved into the subset: row migration
    assert first.payload["new_values"] == {"ID": 1, "DEPARTMENT_ID": 50, "NAME": "Ann"}
    second = clerk.dequeue("strm.q", consumer="msgclient", wait=0)
    assert (second.msg_id, second.payload) == (west, {"region": "WEST"})
    assert clerk.dequeue("strm.q", consumer="msgclient", wait=0) is None
    clerk.commit()
    assert views.messages(clerk.store, "strm.q") == []  # what the rules rejected is consumed
    with pytest.raises(SecurityError, match="MALLORY"):
        connect(client_cfg, user="mallory").dequeue("strm.q", consumer="msgclient", wait=0)


def test_user_dequeue_of_captured_messages_is_refused(client_cfg, tmp_path: Path) -> None:
    from changeflow import lcr as L
    from changeflow.queues.arrow_io import write_arrow_batch
    from changeflow.sites import site

    clerk = connect(client_cfg, user="clerk")  # sets the pipeline up
    rt = site(client_cfg, "s1")
    row = {f: None for f in L.FIELD_NAMES}
    row.update(schema_version=1, msg_id="m1", kind="ROW", origin="CAPTURED",
               source_database_name="D1", command_type="INSERT", object_owner="HR",
               object_name="REGIONS", transaction_id="t", commit_scn=1,
               commit_time=dt.datetime(2024, 1, 1, tzinfo=dt.UTC), position=1)
    batch = write_arrow_batch(rt.catalog, "strm.q", pa.Table.from_pylist([row], L.arrow_schema()),
                        producer="capture:cap")
    rt.catalog.commit_batch("strm.q", batch)
    with pytest.raises(CapturedMessageError, match="only by an apply process"):
        clerk.dequeue("strm.q", consumer="msgclient", wait=5)


def test_exception_queue_requeue_and_delete(store: StateStore) -> None:
    make_queue(store, max_retries=0)
    s = connect(store)
    a = s.enqueue("app.q", b"a", commit=True)
    b = s.enqueue("app.q", b"b", commit=True)
    for _ in range(2):
        s.dequeue("app.q", wait=0)
        s.rollback()
    exq = "app.aq$_q_qt_e"
    assert {r["msg_id"] for r in views.exception_messages(store, exq)} == {a, b}
    assert admin.requeue(store, exq, [a]) == 1
    m = s.dequeue("app.q", wait=0, commit=True)
    assert (m.msg_id, m.attempts) == (a, 0)
    assert admin.delete_exceptions(store, exq, [b]) == 1
    assert views.exception_messages(store, exq) == []
    with pytest.raises(Exception, match="no EXPIRED or UNDELIVERABLE message zzz"):
        admin.requeue(store, exq, ["zzz"])
