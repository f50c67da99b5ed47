"""Remote subscribers: user messages carried to another site by a propagation, exactly once."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from changeflow.config import load_config
from changeflow.errors import QueueDroppedError
from changeflow.messaging import admin, connect, views
from changeflow.messaging.propagate import propagate_user_messages
from changeflow.propagation import PropagationResult
from changeflow.sites import site
from changeflow.state.leases import Lease

PIPELINE = """
version: 1
sites:
  db1: {staging_root: s1/st, target_root: s1/t, state_url: "sqlite:///s1/state.db", database: DB1}
  db2: {staging_root: s2/st, target_root: s2/t, state_url: "sqlite:///s2/state.db", database: DB2}
queues:
  - {name: oe.booked, site: db1, queue_table: oe.orders_qt}
  - {name: ws.booked, site: db2, queue_table: ws.orders_qt}
propagations:
  - {name: oe_to_ws, source_queue: oe.booked@db1, destination_queue: ws.booked@db2}
messaging:
  types:
    - {name: oe.order_t, fields: {id: INTEGER, region: VARCHAR2(10)}}
  queue_tables:
    - {name: oe.orders_qt, site: db1, payload_type: oe.order_t, multiple_consumers: true}
    - {name: ws.orders_qt, site: db2, payload_type: oe.order_t, multiple_consumers: true}
  subscribers:
    - {queue: oe.booked@db1, name: local}
    - {queue: oe.booked@db1, address: ws.booked@db2, rule: "tab.user_data.region = 'WEST'"}
    - {queue: oe.booked@db1, name: priority, address: ws.booked@db2, rule: "priority = 1"}
    - {queue: ws.booked@db2, name: normal, rule: "priority > 1"}
    - {queue: ws.booked@db2, name: all_west}
"""


@pytest.fixture()
def cfg(tmp_path: Path):
    (tmp_path / "p.yaml").write_text(textwrap.dedent(PIPELINE))
    return load_config(tmp_path / "p.yaml")


def run(cfg, crash: bool = False) -> PropagationResult:
    spec = cfg.component("propagation", "oe_to_ws")
    with Lease(site(cfg, "db1").store, "propagation:oe_to_ws") as lease:
        return propagate_user_messages(cfg, spec, lease, PropagationResult("oe_to_ws"))


def ids(msgs) -> list:
    return [m.msg_id for m in msgs]


def drain(s, queue: str, consumer: str) -> list:
    out = []
    while (m := s.dequeue(queue, consumer=consumer, wait=0)) is not None:
        out.append(m)
    s.commit()
    return out


def test_remote_subscribers_case_1_and_case_2(cfg) -> None:
    src = connect(cfg, site="db1")
    west = src.enqueue("oe.booked", {"id": 1, "region": "WEST"}, priority=3)
    prio = src.enqueue("oe.booked", {"id": 2, "region": "EAST"}, priority=1)
    east = src.enqueue("oe.booked", {"id": 3, "region": "EAST"}, priority=3)
    src.commit()
    res = run(cfg)
    assert (res.messages_read, res.messages_propagated, res.batches_read) == (2, 2, 1)
    dst = connect(cfg, site="db2")
    # case 1: the remote topic's own subscribers decide; case 2: only PRIORITY gets it
    assert ids(drain(dst, "ws.booked", "normal")) == [west]
    assert ids(drain(dst, "ws.booked", "all_west")) == [west]
    assert ids(drain(dst, "ws.booked", "priority")) == [prio]
    assert ids(drain(src, "oe.booked", "local")) == [west, prio, east]
    assert views.messages(site(cfg, "db1").store, "oe.booked") == []  # acknowledged
    assert run(cfg).messages_read == 0


def test_exactly_once_when_the_run_dies_after_the_destination_commit(cfg, monkeypatch) -> None:
    src = connect(cfg, site="db1")
    mid = src.enqueue("oe.booked", {"id": 1, "region": "WEST"}, priority=5, commit=True)

    def die(name: str) -> None:
        if name == "propagation.user_messages.after_destination_commit":
            raise SystemExit("killed between the two commits")

    monkeypatch.setattr("changeflow.faults.point", die)
    with pytest.raises(SystemExit):
        run(cfg)
    monkeypatch.undo()
    again = run(cfg)  # the source still has it: sent again, recognised at the destination
    assert (again.messages_read, again.messages_propagated) == (1, 0)
    dst = connect(cfg, site="db2")
    assert ids(drain(dst, "ws.booked", "all_west")) == [mid]
    assert views.messages(site(cfg, "db1").store, "oe.booked", consumer="") == []


def test_dropped_destination_marks_the_messages_undeliverable(cfg) -> None:
    src = connect(cfg, site="db1")
    mid = src.enqueue("oe.booked", {"id": 1, "region": "WEST"}, priority=5, commit=True)
    admin.drop_queue(site(cfg, "db2"), "ws.booked", force=True)
    with pytest.raises(QueueDroppedError, match="1 user messages marked UNDELIVERABLE"):
        run(cfg)
    (row,) = views.exception_messages(site(cfg, "db1").store, "oe.booked")
    assert (row["msg_id"], row["state"], row["address"]) == (mid, "UNDELIVERABLE",
                                                             "ws.booked@db2")
    assert "dropped" in row["reason"]
    assert run(cfg).messages_read == 0  # nothing left to retry
    assert not site(cfg, "db2").catalog.exists("ws.booked")  # and nothing re-created it


def test_type_mismatch_is_undeliverable_alone(cfg) -> None:
    store2 = site(cfg, "db2").store
    connect(cfg, site="db2")  # applies the configuration
    admin.create_type(store2, "ws.other_t", {"x": "INTEGER"})
    admin.create_queue_table(store2, "ws.other_qt", "ws.other_t", multiple_consumers=True)
    admin.drop_queue(store2, "ws.booked", force=True)
    admin.create_queue(store2, "ws.booked", "ws.other_qt", start=True)
    connect(cfg, site="db1").enqueue("oe.booked", {"id": 1, "region": "WEST"}, priority=5,
                                     commit=True)
    res = run(cfg)
    assert (res.messages_read, res.messages_propagated) == (1, 0)
    (row,) = views.exception_messages(site(cfg, "db1").store, "oe.booked")
    assert row["state"] == "UNDELIVERABLE" and "holds WS.OTHER_T messages" in row["reason"]
