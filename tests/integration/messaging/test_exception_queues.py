"""Exception queues as applications use them (issue 32, items 2 and 4; seed 003).

Applications consume their exception queues with ordinary dequeues; a message moved to
the queue table's default exception queue reports ``exception_queue`` NULL; user
exception queues are declared as ``DBMS_AQADM.CREATE_QUEUE(queue_type =>
EXCEPTION_QUEUE)`` and only such queues may be named as a message's exception queue.
"""

from __future__ import annotations

import time

import pytest

from changeflow.messaging import admin, connect, views
from changeflow.messaging.constants import State
from changeflow.messaging.errors import MessagePropertyError, QueueStoppedError
from changeflow.messaging.timemanager import run_once
from changeflow.state import StateStore

from .conftest import make_queue, rows

EXQ = "app.aq$_q_qt_e"


def expired(store: StateStore, n: int = 1, **props: object) -> list[str]:
    """Enqueue ``n`` messages that expire at once, and run the time manager."""
    s = connect(store)
    ids = [s.enqueue("app.q", f"m{i}".encode(), expiration=0.05, **props)  # type: ignore[arg-type]
           for i in range(n)]
    s.commit()
    time.sleep(0.1)
    assert run_once(store).expired == n
    return ids


@pytest.mark.parametrize("how", ["commit", "on_commit", "wait"])
def test_an_application_removes_messages_from_the_exception_queue(
        store: StateStore, how: str) -> None:
    make_queue(store)
    ids = expired(store, 2)
    admin.start_queue(store, EXQ)
    s = connect(store)
    got = []
    for _ in ids:
        if how == "commit":
            m = s.dequeue(EXQ, wait=0, commit=True)
        elif how == "wait":
            m = s.dequeue(EXQ, wait=2)
        else:
            m = s.dequeue(EXQ, wait=0)
        assert m is not None
        assert (m.state, m.original_queue, m.reason) == (State.EXPIRED, "app.q", "expired")
        got.append(m.msg_id)
    assert s.dequeue(EXQ, wait=0) is None
    s.commit()
    assert got == ids
    assert rows(store) == []  # consumed


def test_a_multi_consumer_exception_queue_is_dequeued_by_the_original_consumer(
        store: StateStore) -> None:
    make_queue(store, multi=True)
    admin.add_subscriber(store, "app.q", "clerk")
    (mid,) = expired(store)
    admin.start_queue(store, EXQ)
    s = connect(store)
    m = s.dequeue(EXQ, consumer="clerk", wait=0, commit=True)
    assert m is not None and (m.msg_id, m.consumer) == (mid, "CLERK")
    assert rows(store) == []


def test_the_default_exception_queue_reports_null(store: StateStore) -> None:
    make_queue(store)
    expired(store)  # no exception_queue given
    expired(store, exception_queue="app.nowhere")  # names a queue that does not exist
    admin.start_queue(store, EXQ)
    s = connect(store)
    first, second = s.dequeue(EXQ, wait=0), s.dequeue(EXQ, wait=0)
    s.commit()
    assert (first.queue, second.queue) == (EXQ, EXQ)
    assert first.exception_queue is None and second.exception_queue is None  # seed 003
    assert first.as_dict()["exception_queue"] is None


def test_a_user_exception_queue_receives_and_reports_its_name(store: StateStore) -> None:
    make_queue(store)
    admin.create_queue(store, "app.q_errors", "app.q_qt", queue_type="EXCEPTION_QUEUE")
    (mid,) = expired(store, exception_queue="app.q_errors")
    props = admin.queue_properties(store, "app.q_errors")
    assert props.is_exception and not props.enqueue_enabled
    admin.start_queue(store, "app.q_errors")  # dequeue only, as for the default one
    assert not admin.queue_properties(store, "app.q_errors").enqueue_enabled
    s = connect(store)
    m = s.dequeue("app.q_errors", wait=0, commit=True)
    assert m is not None and m.msg_id == mid
    assert (m.queue, m.exception_queue, m.original_queue) == ("app.q_errors", "app.q_errors",
                                                              "app.q")
    with pytest.raises(QueueStoppedError):
        s.enqueue("app.q_errors", b"direct", commit=True)
    assert rows(store) == []


def test_an_ordinary_queue_cannot_be_a_messages_exception_queue(store: StateStore) -> None:
    make_queue(store)
    make_queue(store, "app.other")
    s = connect(store)
    with pytest.raises(MessagePropertyError, match="app.other is not an exception queue"):
        s.enqueue("app.q", b"x", exception_queue="app.other", commit=True)
    with pytest.raises(MessagePropertyError, match="EXCEPTION_QUEUE"):
        s.enqueue("app.q", b"x", exception_queue="app.other")
    assert rows(store) == []


def test_a_user_exception_queue_must_hold_the_queues_payload_type(store: StateStore) -> None:
    make_queue(store)
    admin.create_type(store, "app.t", {"id": "INTEGER"})
    admin.create_queue_table(store, "app.t_qt", "app.t")
    admin.create_queue(store, "app.t_errors", "app.t_qt", queue_type="exception_queue")
    with pytest.raises(MessagePropertyError, match="payload type"):
        connect(store).enqueue("app.q", b"x", exception_queue="app.t_errors", commit=True)
    assert rows(store) == []


def test_create_queue_refuses_an_unknown_queue_type(store: StateStore) -> None:
    make_queue(store)
    with pytest.raises(MessagePropertyError, match="queue_type"):
        admin.create_queue(store, "app.bad", "app.q_qt", queue_type="DEAD_LETTER")
    assert not any(q["queue"] == "app.bad" for q in views.queues(store))
    admin.create_queue(store, "app.errs", "app.q_qt", queue_type="EXCEPTION_QUEUE", start=True)
    (row,) = views.queues(store, "app.errs")
    assert (row["queue_type"], row["enqueue_enabled"], row["dequeue_enabled"]) == (
        "exception", False, True)
