"""Enqueue and dequeue on real stores (SQLite and PostgreSQL): order, visibility, modes."""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import time

import pytest

from changeflow.messaging import admin, connect
from changeflow.messaging.constants import State
from changeflow.messaging.errors import EndOfGroupError
from changeflow.state import StateStore

from .conftest import make_queue


def drain(s, queue: str, **kw) -> list:
    out = []
    while (m := s.dequeue(queue, wait=0, **kw)) is not None:
        out.append(m)
    return out


def test_priority_order_smaller_is_more_urgent(store: StateStore) -> None:
    make_queue(store, sort="priority,enq_time")
    s = connect(store)
    for prio, body in [(5, b"e"), (1, b"a"), (3, b"c"), (1, b"b"), (-2, b"z")]:
        s.enqueue("app.q", body, priority=prio)
    s.commit()
    got = drain(s, "app.q")
    s.commit()
    assert [(m.priority, m.payload) for m in got] == [
        (-2, b"z"), (1, b"a"), (1, b"b"), (3, b"c"), (5, b"e")]


def test_enqueue_time_order_ignores_priority(store: StateStore) -> None:
    make_queue(store, sort="enq_time")
    s = connect(store)
    for prio in (9, 1, 5):
        s.enqueue("app.q", bytes([prio]), priority=prio, commit=True)
    assert [m.priority for m in drain(s, "app.q")] == [9, 1, 5]


def test_commit_time_order_follows_commits_not_enqueues(store: StateStore) -> None:
    make_queue(store, sort="commit_time")
    a, b = connect(store), connect(store)
    a.enqueue("app.q", b"a1")  # enqueued first ...
    b.enqueue("app.q", b"b1")
    b.enqueue("app.q", b"b2")
    b.commit()  # ... but committed last
    a.enqueue("app.q", b"a2")
    a.commit()
    got = [m.payload for m in drain(connect(store), "app.q")]
    assert got == [b"b1", b"b2", b"a1", b"a2"]


def test_on_commit_visibility_and_immediate(store: StateStore) -> None:
    make_queue(store)
    producer, consumer = connect(store), connect(store)
    producer.enqueue("app.q", b"later")
    producer.enqueue("app.q", b"now", visibility="IMMEDIATE")
    assert [m.payload for m in drain(consumer, "app.q")] == [b"now"]
    consumer.commit()
    producer.rollback()  # the ON_COMMIT message is gone; the IMMEDIATE one was consumed
    assert drain(consumer, "app.q") == []


def test_uncommitted_dequeue_is_invisible_to_other_sessions_and_rollback_returns_it(
        store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    s.enqueue("app.q", b"x", commit=True)
    first, second = connect(store), connect(store)
    m = first.dequeue("app.q", wait=0)
    assert m is not None and m.attempts == 0
    assert second.dequeue("app.q", wait=0) is None
    first.rollback()
    again = second.dequeue("app.q", wait=0)
    assert again is not None and again.msg_id == m.msg_id and again.attempts == 1
    second.commit()
    assert connect(store).dequeue("app.q", wait=0) is None


def test_past_max_retries_goes_to_exception_queue(store: StateStore) -> None:
    make_queue(store, max_retries=1)
    s = connect(store)
    mid = s.enqueue("app.q", b"poison", commit=True)
    for _ in range(2):
        assert s.dequeue("app.q", wait=0).msg_id == mid
        s.rollback()
    assert s.dequeue("app.q", wait=0) is None
    admin.start_queue(store, "app.aq$_q_qt_e", enqueue=False)
    exc = s.dequeue("app.aq$_q_qt_e", wait=0, mode="BROWSE")
    assert (exc.msg_id, exc.state, exc.original_queue, exc.attempts) == (
        mid, State.EXPIRED, "app.q", 2)
    assert "max_retries (1)" in exc.reason


def test_retry_delay_keeps_a_rolled_back_message_waiting(store: StateStore) -> None:
    make_queue(store, retry_delay=3)  # long enough for a loaded CI machine
    s = connect(store)
    s.enqueue("app.q", b"x", commit=True)
    s.dequeue("app.q", wait=0)
    started = time.monotonic()
    s.rollback()
    assert s.dequeue("app.q", wait=0) is None
    m = s.dequeue("app.q", wait=15)
    assert m is not None and m.attempts == 1
    assert 2.9 < time.monotonic() - started < 10


def test_modes_browse_locked_remove_nodata(store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    ids = [s.enqueue("app.q", bytes([i])) for i in range(3)]
    s.commit()
    browsed = [s.dequeue("app.q", mode="BROWSE", wait=0) for _ in range(4)]
    assert [m.msg_id if m else None for m in browsed] == [*ids, None]
    first = s.dequeue("app.q", mode="BROWSE", navigation="FIRST_MESSAGE", wait=0)
    assert first.msg_id == ids[0]
    locked = s.dequeue("app.q", mode="LOCKED", wait=0)
    assert locked.msg_id == ids[0]
    other = connect(store)
    assert other.dequeue("app.q", wait=0).msg_id == ids[1]  # the locked one is skipped
    gone = s.dequeue("app.q", mode="REMOVE_NODATA", msg_id=ids[0], wait=0)
    assert gone.msg_id == ids[0] and gone.payload is None
    s.commit()
    other.rollback()
    left = drain(connect(store), "app.q", mode="BROWSE")
    assert [m.msg_id for m in left] == ids[1:]


def test_locked_without_remove_is_unlocked_at_commit(store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    mid = s.enqueue("app.q", b"x", commit=True)
    assert s.dequeue("app.q", mode="LOCKED", wait=0).msg_id == mid
    s.commit()
    m = connect(store).dequeue("app.q", wait=0)
    assert m.msg_id == mid and m.attempts == 0


def test_selectors_correlation_msg_id_condition(store: StateStore) -> None:
    admin.create_type(store, "app.order_t", {"id": "INTEGER", "region": "VARCHAR2(8)"})
    make_queue(store, payload="app.order_t")
    s = connect(store)
    a = s.enqueue("app.q", {"id": 1, "region": "EAST"}, correlation="job-1", priority=2)
    b = s.enqueue("app.q", {"id": 2, "region": "WEST"}, correlation="job-2", priority=7)
    c = s.enqueue("app.q", {"id": 3, "region": "WEST"}, correlation="other", priority=1)
    s.commit()
    browse = {"mode": "BROWSE", "navigation": "FIRST_MESSAGE", "wait": 0}
    assert s.dequeue("app.q", correlation="job-2", **browse).msg_id == b
    assert s.dequeue("app.q", correlation="job-%", **browse).msg_id == a
    assert s.dequeue("app.q", msg_id=c, **browse).payload == {"id": 3, "region": "WEST"}
    got = s.dequeue("app.q", condition="tab.user_data.region = 'WEST' AND priority > 5",
                    **browse)
    assert got.msg_id == b
    assert s.dequeue("app.q", selector={"condition": "priority > 99"}, **browse) is None


def test_wait_returns_as_soon_as_a_message_arrives(store: StateStore) -> None:
    make_queue(store)

    def later() -> None:
        time.sleep(0.5)
        connect(store).enqueue("app.q", b"late", commit=True)

    t = threading.Thread(target=later)
    started = time.monotonic()
    t.start()
    m = connect(store).dequeue("app.q", wait=30)
    elapsed = time.monotonic() - started
    t.join()
    assert m is not None and m.payload == b"late"
    assert 0.4 < elapsed < 10, elapsed  # woken by the enqueue, not the 30 s wait


def test_no_wait_and_timed_wait_return_none(store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    assert s.dequeue("app.q", wait="NO_WAIT") is None
    started = time.monotonic()
    assert s.dequeue("app.q", wait=0.4) is None
    assert 0.35 < time.monotonic() - started < 5


def test_retention_keeps_processed_messages(store: StateStore) -> None:
    make_queue(store, retention_time=3600)
    s = connect(store)
    mid = s.enqueue("app.q", b"keep", commit=True)
    assert s.dequeue("app.q", wait=0, commit=True).msg_id == mid
    from changeflow.messaging import views

    row = views.messages(store, "app.q")[0]
    assert (row["msg_id"], row["state"]) == (mid, "PROCESSED")
    assert views.queues(store, "app.q")[0]["PROCESSED"] == 1


def test_replayed_msg_id_is_recognised(store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    assert s.enqueue("app.q", b"1", msg_id="order-42", commit=True) == "order-42"
    assert s.dequeue("app.q", wait=0, commit=True).msg_id == "order-42"
    s.enqueue("app.q", b"1", msg_id="order-42", commit=True)  # a replay, after consumption
    assert s.dequeue("app.q", wait=0) is None


def test_message_grouping_next_transaction(store: StateStore) -> None:
    make_queue(store, sort="commit_time", grouping="transactional")
    s = connect(store)
    for group in ("a", "b"):
        for i in range(2):
            s.enqueue("app.q", f"{group}{i}".encode())
        s.commit()
    c = connect(store)
    assert c.dequeue("app.q", wait=0, navigation="FIRST_MESSAGE").payload == b"a0"
    assert c.dequeue("app.q", wait=0).payload == b"a1"
    with pytest.raises(EndOfGroupError, match="NEXT_TRANSACTION"):
        c.dequeue("app.q", wait=0)
    assert c.dequeue("app.q", wait=0, navigation="NEXT_TRANSACTION").payload == b"b0"
    c.commit()


def test_typed_payload_keeps_field_types(store: StateStore) -> None:
    admin.create_type(store, "app.t", {"n": "NUMBER", "d": "DATE", "ts": "TIMESTAMP",
                                       "r": "RAW(4)", "f": "BINARY_DOUBLE", "b": "BOOLEAN"})
    make_queue(store, payload="app.t")
    s = connect(store)
    s.enqueue("app.q", {"n": "12.50", "d": "2024-02-01", "ts": "2024-02-01T10:00:00",
                        "r": "00ff", "f": 1.5, "b": True}, commit=True)
    p = s.dequeue("app.q", wait=0, commit=True).payload
    assert p == {"n": decimal.Decimal("12.50"), "d": dt.date(2024, 2, 1),
                 "ts": dt.datetime(2024, 2, 1, 10), "r": b"\x00\xff", "f": 1.5, "b": True}


def test_multi_consumer_subscribers_with_rules(store: StateStore) -> None:
    admin.create_type(store, "app.o", {"region": "VARCHAR2(8)"})
    make_queue(store, payload="app.o", multi=True)
    admin.add_subscriber(store, "app.q", "west", rule="tab.user_data.region = 'WEST'")
    admin.add_subscriber(store, "app.q", "urgent", rule="priority = 1")
    s = connect(store)
    s.enqueue("app.q", {"region": "WEST"}, priority=5)
    s.enqueue("app.q", {"region": "EAST"}, priority=1)
    s.enqueue("app.q", {"region": "EAST"}, recipients=["west"])  # overrides subscribers
    s.commit()
    west = [m.payload["region"] for m in drain(s, "app.q", consumer="west")]
    urgent = [m.payload["region"] for m in drain(s, "app.q", consumer="URGENT")]
    s.commit()
    assert west == ["WEST", "EAST"] and urgent == ["EAST"]
