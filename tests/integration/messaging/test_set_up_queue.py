"""``DBMS_STREAMS_ADM.SET_UP_QUEUE`` (issue 32, item 8; seed 001): secure, transactional,
commit-time queues, from Python, the configuration and the CLI."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from changeflow.cli import main
from changeflow.config import load_config
from changeflow.errors import SecurityError
from changeflow.messaging import admin, connect, views
from changeflow.messaging.errors import EndOfGroupError
from changeflow.sites import site
from changeflow.state import StateStore


def table_of(store: StateStore, name: str) -> dict:
    (row,) = [t for t in views.queue_tables(store) if t["queue_table"] == name]
    return row


def test_set_up_queue_makes_a_secure_transactional_commit_time_queue(store: StateStore) -> None:
    done = admin.set_up_queue(store, "strmadmin.streams_queue", queue_users=("hr",))
    assert done == {"queue": "strmadmin.streams_queue",
                    "queue_table": "strmadmin.streams_queue_table", "queue_table_created": True,
                    "queue_created": True, "queue_users": ["HR"]}
    qt = table_of(store, "strmadmin.streams_queue_table")
    assert (qt["payload_type"], qt["sort_order"], qt["multiple_consumers"],
            qt["message_grouping"], qt["secure"]) == (
        "SYS.ANYDATA", "commit_time", True, "transactional", True)
    (q,) = views.queues(store, "strmadmin.streams_queue")
    assert (q["secure"], q["enqueue_enabled"], q["dequeue_enabled"]) == (True, True, True)
    # HR is a secure-queue user: an agent of its own name, ENQUEUE and DEQUEUE
    hr = connect(store, user="hr")
    hr.enqueue("strmadmin.streams_queue", b"a", recipients=["hr"])
    hr.enqueue("strmadmin.streams_queue", b"b", recipients=["hr"])
    hr.commit()
    assert hr.dequeue("strmadmin.streams_queue", consumer="hr", wait=0).payload == b"a"
    assert hr.dequeue("strmadmin.streams_queue", consumer="hr", wait=0).payload == b"b"
    with pytest.raises(EndOfGroupError):  # transactional: one group per transaction
        hr.dequeue("strmadmin.streams_queue", consumer="hr", wait=0)
    hr.commit()
    with pytest.raises(SecurityError, match="OE has no ENQUEUE"):
        connect(store, user="oe").enqueue("strmadmin.streams_queue", b"x", recipients=["oe"])


def test_set_up_queue_again_only_adds_the_user(store: StateStore) -> None:
    admin.create_queue_table(store, "strmadmin.qt", "SYS.ANYDATA", sort_list="enq_time",
                             multiple_consumers=True)
    first = admin.set_up_queue(store, "strmadmin.q", "strmadmin.qt")
    again = admin.set_up_queue(store, "strmadmin.q", "strmadmin.qt", queue_users=("oe",))
    assert (first["queue_table_created"], first["queue_created"]) == (False, True)
    assert (again["queue_table_created"], again["queue_created"]) == (False, False)
    # an existing queue table keeps its ordering (seed 001)
    assert table_of(store, "strmadmin.qt")["sort_order"] == "enq_time"
    privs = {(p["grantee"], p["privilege"]) for p in views.privileges(store, "strmadmin.q")}
    assert privs == {("OE", "ENQUEUE"), ("OE", "DEQUEUE")}
    assert ("OE", "OE") in {(a["agent"], a["user"]) for a in views.agents(store)}


PIPELINE = """
version: 1
sites:
  s1: {staging_root: st, target_root: t, state_url: "sqlite:///state.db", database: D1}
queues:
  - {name: strmadmin.streams_queue, site: s1}
captures:
  - name: cap
    queue: strmadmin.streams_queue
    source: {type: snapshot, database: D1, root: src, tables: [{name: hr.regions, key: [id]}]}
applies:
  - {name: app1, queue: strmadmin.streams_queue}
messaging:
  set_up_queues:
    - {queue: hr.events, site: s1, queue_users: [hr, oe]}
"""


@pytest.fixture()
def cfg_path(tmp_path: Path) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent(PIPELINE))
    return path


def test_pipeline_queues_come_out_as_set_up_queue_makes_them(cfg_path: Path) -> None:
    cfg = load_config(cfg_path)
    store = connect(cfg, user="strmadmin").store
    (q,) = views.queues(store, "strmadmin.streams_queue")
    assert (q["secure"], q["sort_order"], q["multiple_consumers"]) == (True, "commit_time", True)
    qt = table_of(store, q["queue_table"])
    assert (qt["message_grouping"], qt["secure"]) == ("transactional", True)
    privs = {(p["grantee"], p["privilege"]) for p in
             views.privileges(store, "strmadmin.streams_queue")}
    assert {("CAP", "ENQUEUE"), ("APP1", "DEQUEUE")} <= privs  # clients: secure users
    with pytest.raises(SecurityError):
        connect(cfg, user="mallory").enqueue("strmadmin.streams_queue", b"x",
                                              recipients=["x"])
    (ev,) = views.queues(store, "hr.events")
    assert ev["secure"] and {("HR", "ENQUEUE"), ("OE", "DEQUEUE")} <= {
        (p["grantee"], p["privilege"]) for p in views.privileges(store, "hr.events")}


def test_set_up_queue_from_the_cli(cfg_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["aq", "set-up-queue", "app.inbox", "--queue-user", "clerk",
                               "--config", str(cfg_path), "-o", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["queue_users"] == ["CLERK"]
    res = runner.invoke(main, ["aq", "set-up-queue", "app.inbox", "--config", str(cfg_path)])
    assert res.exit_code == 0, res.output
    assert "queue app.inbox exists in queue table app.inbox_table (secure" in res.output
    store = site(load_config(cfg_path), "s1").store
    assert views.queues(store, "app.inbox")[0]["secure"] is True
