"""DBMS_AQADM on real stores: queue tables, queues, start/stop, drop, the configuration."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from changeflow.config import load_config
from changeflow.errors import ConfigError, QueueDroppedError, TerminalError
from changeflow.messaging import admin, connect, views
from changeflow.messaging.declare import setup
from changeflow.messaging.errors import AlreadyExistsError, MessagingError, QueueStoppedError
from changeflow.queues.catalog import QueueCatalog
from changeflow.state import StateStore


def test_queue_table_with_its_exception_queue_and_stopped_queues(store: StateStore) -> None:
    admin.create_queue_table(store, "hr.jobs_qt", "RAW", sort_list="priority,commit_time",
                             multiple_consumers=True, secure=True, comment="jobs")
    admin.create_queue(store, "hr.jobs", "hr.jobs_qt", max_retries=3, retry_delay=2,
                       retention_time=60)
    qs = {q["queue"]: q for q in views.queues(store)}
    assert set(qs) == {"hr.jobs", "hr.aq$_jobs_qt_e"}
    jobs, exq = qs["hr.jobs"], qs["hr.aq$_jobs_qt_e"]
    assert (jobs["sort_order"], jobs["multiple_consumers"], jobs["secure"]) == (
        "priority,commit_time", True, True)
    assert (jobs["max_retries"], jobs["retry_delay"], jobs["retention_time"]) == (3, 2.0, 60.0)
    assert (jobs["enqueue_enabled"], jobs["dequeue_enabled"]) == (False, False)  # as Oracle
    assert exq["queue_type"] == "exception"
    with pytest.raises(AlreadyExistsError):
        admin.create_queue_table(store, "hr.jobs_qt", "RAW")
    with pytest.raises(AlreadyExistsError):
        admin.create_queue(store, "hr.jobs", "hr.jobs_qt")


def test_start_stop_alter(store: StateStore) -> None:
    admin.create_queue_table(store, "hr.q_qt", "RAW")
    admin.create_queue(store, "hr.q", "hr.q_qt")
    s = connect(store)
    with pytest.raises(QueueStoppedError):
        s.enqueue("hr.q", b"x")
    admin.start_queue(store, "hr.q")
    s.enqueue("hr.q", b"x", commit=True)
    admin.stop_queue(store, "hr.q", enqueue=False)
    with pytest.raises(QueueStoppedError, match="dequeue"):
        s.dequeue("hr.q", wait=0)
    admin.start_queue(store, "hr.q", enqueue=False)
    admin.alter_queue(store, "hr.q", max_retries=0, comment="now")
    assert views.queues(store, "hr.q")[0]["max_retries"] == 0
    s.dequeue("hr.q", wait=0)
    s.rollback()  # one rollback > max_retries 0: to the exception queue
    assert views.queues(store, "hr.aq$_q_qt_e")[0]["EXPIRED"] == 1
    with pytest.raises(QueueStoppedError, match="exception queue"):
        s.enqueue("hr.aq$_q_qt_e", b"y")


def test_drop_queue_with_messages_needs_force_and_stays_dropped(store: StateStore) -> None:
    admin.create_queue_table(store, "hr.q_qt", "RAW")
    admin.create_queue(store, "hr.q", "hr.q_qt", start=True)
    connect(store).enqueue("hr.q", b"x", commit=True)
    with pytest.raises(TerminalError, match="still holds 1 messages in 0 batches and 1 user"):
        admin.drop_queue(store, "hr.q")
    # the catalog's own drop counts user messages too
    with pytest.raises(TerminalError, match="1 user messages"):
        QueueCatalog(store, "").drop_queue("hr.q")
    assert views.queues(store, "hr.q")[0]["READY"] == 1
    admin.drop_queue(store, "hr.q", force=True)
    assert views.messages(store, "hr.q") == []
    with pytest.raises(QueueDroppedError):
        connect(store).enqueue("hr.q", b"y")
    with pytest.raises(QueueDroppedError):
        admin.create_queue(store, "hr.q", "hr.q_qt", recreate_dropped=False)
    assert admin.create_queue(store, "hr.q", "hr.q_qt")  # an explicit create brings it back


def test_drop_queue_table(store: StateStore) -> None:
    admin.create_queue_table(store, "hr.q_qt", "RAW")
    admin.create_queue(store, "hr.q", "hr.q_qt", start=True)
    with pytest.raises(MessagingError, match="still has queues hr.q"):
        admin.drop_queue_table(store, "hr.q_qt")
    assert admin.drop_queue_table(store, "hr.q_qt", force=True) == ["hr.q"]
    assert views.queue_tables(store) == [] and views.queues(store) == []


def test_types(store: StateStore) -> None:
    t = admin.create_type(store, "hr.emp_t", {"id": "INTEGER", "name": "VARCHAR2(30)"})
    assert t.field_names == ("id", "name")
    admin.create_type(store, "hr.emp_t", {"id": "INTEGER", "name": "VARCHAR2(30)"},
                      if_not_exists=True)
    with pytest.raises(AlreadyExistsError, match="exists already with fields id INTEGER"):
        admin.create_type(store, "hr.emp_t", {"id": "NUMBER"})
    admin.create_queue_table(store, "hr.e_qt", "hr.emp_t")
    admin.create_queue(store, "hr.e", "hr.e_qt")
    with pytest.raises(MessagingError, match="in use by queues"):
        admin.drop_type(store, "hr.emp_t")
    assert views.types(store)[0]["fields"] == "id INTEGER, name VARCHAR2(30)"
    assert admin.message_type(store, "hr.emp_t").field_names == ("id", "name")
    assert admin.queue_properties(store, "hr.e").payload_type == "HR.EMP_T"


PIPELINE = """
version: 1
sites:
  s1: {{staging_root: s1/st, target_root: s1/t, state_url: "sqlite:///s1/state.db", database: D1}}
messaging:
  types:
    - {{name: oe.order_t, fields: {{id: INTEGER, region: VARCHAR2(8)}}}}
  queue_tables:
    - {{name: oe.orders_qt, payload_type: oe.order_t, multiple_consumers: true,
       sort_order: "PRIORITY, ENQ_TIME"}}
  queues:
    - {{name: oe.orders, queue_table: {table}, max_retries: 2}}
  subscribers:
    - {{queue: oe.orders, name: west, rule: "tab.user_data.region = 'WEST'"}}
"""


def _cfg(tmp_path: Path, table: str = "oe.orders_qt"):
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent(PIPELINE.format(table=table)))
    return load_config(path)


def test_configuration_creates_what_is_missing_and_never_recreates(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    s = connect(cfg)
    s.enqueue("oe.orders", {"id": 1, "region": "WEST"}, commit=True)
    store = s.store
    (q,) = views.queues(store, "oe.orders")
    assert (q["sort_order"], q["max_retries"], q["READY"], q["enqueue_enabled"]) == (
        "priority,enq_time", 2, 1, True)
    admin.stop_queue(store, "oe.orders")
    admin.drop_queue(store, "oe.orders", force=True)
    cfg2 = _cfg(tmp_path)  # a new process reading the same file
    setup(cfg2)
    assert views.queues(store, "oe.orders") == []  # dropped stays dropped


def test_configuration_errors_name_the_key(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, table="oe.missing_qt")
    with pytest.raises(ConfigError, match=r"p.yaml:messaging.queues.0.queue_table: queue table"):
        setup(cfg)
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent(PIPELINE.format(table="oe.orders_qt")).replace(
        '"PRIORITY, ENQ_TIME"', "fifo"))
    with pytest.raises(ConfigError, match="messaging.queue_tables.0.sort_order"):
        load_config(bad)
