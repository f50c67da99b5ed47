"""The one-statement enqueue and dequeue (``messaging.wire``) keep every property and type.

A message written by the hot enqueue is read back by BROWSE (through SQLAlchemy) and by
the hot dequeue; both must return the same message, with the same Python types.
"""

from __future__ import annotations

import datetime as dt

import pytest

from changeflow.messaging import admin, connect, wire
from changeflow.messaging.constants import State
from changeflow.messaging.errors import QueueStoppedError
from changeflow.state import StateStore

from .conftest import make_queue

FIELDS = {"id": "INTEGER", "note": "VARCHAR2(100)", "amount": "NUMBER",
          "placed": "TIMESTAMP", "ok": "BOOLEAN"}


def _typed_queue(store: StateStore, **queue: object) -> None:
    admin.create_type(store, "app.order_t", FIELDS)
    make_queue(store, "app.orders", payload="app.order_t", **queue)


def _hot(store: StateStore, prefix: str) -> bool:
    """Whether a statement of that kind was compiled for a session store's driver path."""
    return any(k[1].startswith(prefix) and k[0] == id(store.engine.dialect)
               for k in wire._compiled)


def test_hot_enqueue_and_dequeue_keep_properties_and_types(store: StateStore) -> None:
    _typed_queue(store)
    s = connect(store)
    order = {"id": 7, "note": "n", "amount": "12.50", "placed": "2024-02-01T10:00:00",
             "ok": True}
    before = dt.datetime.now(dt.UTC)
    mid = s.enqueue("app.orders", order, priority=3, expiration=3600, correlation="c-7",
                    sender="shop", commit=True)
    assert _hot(s.store, "aq:enqueue:one")
    s.dequeue("app.orders", wait=0, commit=True, correlation="none")  # housekeeping done
    browsed = s.dequeue("app.orders", mode="BROWSE", wait=0)
    taken = s.dequeue("app.orders", wait=0, commit=True)
    assert _hot(s.store, "aq:pick:" if store.dialect == "sqlite" else "aq:take:")
    assert taken is not None and browsed is not None
    assert taken.msg_id == mid == browsed.msg_id
    assert taken.payload == browsed.payload
    assert taken.payload["amount"] == browsed.payload["amount"]
    assert type(taken.payload["placed"]) is type(browsed.payload["placed"])
    assert (taken.priority, taken.expiration, taken.correlation, str(taken.sender)) == \
        (3, 3600.0, "c-7", "SHOP")
    assert isinstance(taken.delay, float) and taken.delay == 0.0
    assert taken.enq_time.tzinfo is not None and taken.enq_time >= before.replace(
        microsecond=0) - dt.timedelta(seconds=1)
    assert taken.enq_time == browsed.enq_time
    assert taken == browsed  # every property (the take returns only the columns it needs)
    assert s.dequeue("app.orders", wait=0) is None  # it was removed


def test_hot_dequeue_with_retention_keeps_the_message_processed(store: StateStore) -> None:
    _typed_queue(store, retention_time=3600)
    s = connect(store)
    ids = s.enqueue_array("app.orders", [{"id": i} for i in range(3)], commit=True)
    got = [s.dequeue("app.orders", wait=0, commit=True) for _ in range(3)]
    assert [m.msg_id for m in got if m is not None] == ids
    assert s.dequeue("app.orders", wait=0) is None
    kept = connect(store).dequeue("app.orders", mode="BROWSE", wait=0)
    assert kept is None  # PROCESSED messages are not offered again
    from changeflow.messaging import views

    states = [m["state"] for m in views.messages(store, "app.orders")]
    assert states == [State.PROCESSED.value] * 3


def test_hot_locked_then_commit_and_rollback(store: StateStore) -> None:
    make_queue(store, max_retries=5)
    s = connect(store)
    s.enqueue_array("app.q", [b"a", b"b"], commit=True)
    first = s.dequeue("app.q", wait=0)  # REMOVE in the session's transaction: locked
    other = connect(store)
    second = other.dequeue("app.q", wait=0)
    assert first is not None and second is not None and first.payload != second.payload
    assert other.dequeue("app.q", wait=0) is None
    s.rollback()  # back, retry count raised
    other.commit()
    again = connect(store).dequeue("app.q", wait=0, commit=True)
    assert again is not None and again.payload == first.payload and again.attempts == 1


def test_hot_array_enqueue_keeps_order_properties_and_types(store: StateStore) -> None:
    """``enqueue_array(..., commit=True)``: one statement on PostgreSQL (every column an
    array); the messages come back in the array's order, each with its own properties."""
    _typed_queue(store)
    s = connect(store)
    orders = [{"id": i, "note": f"n{i}", "amount": f"{i}.50", "placed": "2024-02-01T10:00:00",
               "ok": i % 2 == 0} for i in range(50)]
    props = [{"priority": 1, "correlation": f"c-{i}", "delay": 0,  # an int delay
              **({"expiration": 3600} if i % 3 == 0 else {})} for i in range(50)]
    ids = s.enqueue_array("app.orders", orders, props, commit=True)
    if store.dialect == "postgresql":
        assert _hot(s.store, "aq:enqueue:many")
    browsed = [s.dequeue("app.orders", mode="BROWSE", wait=0) for _ in range(50)]
    taken = [s.dequeue("app.orders", wait=0, commit=True) for _ in range(50)]
    assert [m.msg_id for m in taken if m is not None] == ids
    assert taken == browsed
    assert [m.payload["id"] for m in taken if m is not None] == list(range(50))
    assert [(m.correlation, m.expiration) for m in taken if m is not None] == [
        (f"c-{i}", 3600.0 if i % 3 == 0 else None) for i in range(50)]
    assert s.dequeue("app.orders", wait=0) is None


def test_hot_array_enqueue_to_subscribers_and_to_a_stopped_queue(store: StateStore) -> None:
    """A message to two subscribers is two rows of the one statement; a stopped queue
    refuses the whole array (nothing is written)."""
    make_queue(store, "app.mq", multi=True)
    admin.add_subscriber(store, "app.mq", "a")
    admin.add_subscriber(store, "app.mq", "b")
    s = connect(store)
    ids = s.enqueue_array("app.mq", [b"1", b"2", b"3"], commit=True)
    for consumer in ("a", "b"):
        got = s.dequeue_array("app.mq", 10, consumer=consumer, wait=0, commit=True)
        assert [m.msg_id for m in got] == ids
        assert [m.payload for m in got] == [b"1", b"2", b"3"]
    admin.stop_queue(store, "app.mq", dequeue=False)
    with pytest.raises(QueueStoppedError, match="stopped for enqueue"):
        s.enqueue_array("app.mq", [b"4", b"5"], commit=True)
    admin.start_queue(store, "app.mq")
    assert s.dequeue_array("app.mq", 10, consumer="a", wait=0) == []
