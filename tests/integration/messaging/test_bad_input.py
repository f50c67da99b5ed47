"""Every kind of bad input gets a clear error, and nothing changes."""

from __future__ import annotations

import pytest

from changeflow.errors import PayloadTypeError, QueueNotFoundError, SecurityError
from changeflow.messaging import admin, connect
from changeflow.messaging.errors import (
    MessagePropertyError,
    MessageTooLargeError,
    NoRecipientsError,
    NotSubscribedError,
    QueueStoppedError,
    SelectorError,
    UnknownTypeError,
)
from changeflow.state import StateStore

from .conftest import make_queue, rows


@pytest.fixture()
def typed(store: StateStore) -> StateStore:
    admin.create_type(store, "app.order_t", {"id": "INTEGER", "region": "VARCHAR2(4)"})
    make_queue(store, payload="app.order_t", multi=True)
    admin.add_subscriber(store, "app.q", "shipping")
    connect(store).enqueue("app.q", {"id": 1, "region": "WEST"}, commit=True)
    return store


def refused(store: StateStore, exc: type[Exception], match: str, call) -> None:
    before = rows(store)
    with pytest.raises(exc, match=match):
        call()
    assert rows(store) == before


def test_unknown_queue(typed: StateStore) -> None:
    s = connect(typed)
    refused(typed, QueueNotFoundError, "app.nope", lambda: s.enqueue("app.nope", b"x"))
    refused(typed, QueueNotFoundError, "app.nope", lambda: s.dequeue("app.nope", wait=0))


def test_unknown_type(typed: StateStore) -> None:
    refused(typed, UnknownTypeError, "APP.MISSING_T",
            lambda: admin.create_queue_table(typed, "app.x_qt", "app.missing_t"))
    make_queue(typed, "app.any", payload="SYS.ANYDATA")
    s = connect(typed)
    refused(typed, UnknownTypeError, "APP.GHOST",
            lambda: s.enqueue("app.any", {"a": 1}, type_name="app.ghost", commit=True))


@pytest.mark.parametrize("payload, match", [
    ({"id": "seven"}, r"field id: 'seven' is not a valid INTEGER"),
    ({"id": 1, "region": "NORTHWEST"}, r"field region: .* VARCHAR2\(4\) holds at most 4"),
    ({"id": 1, "colour": "red"}, r"has no field 'colour'"),
    (b"raw bytes", r"must be a dict"),
])
def test_payload_not_matching_its_type(typed: StateStore, payload, match: str) -> None:
    s = connect(typed)
    refused(typed, PayloadTypeError, match, lambda: s.enqueue("app.q", payload, commit=True))


def test_selector_that_does_not_parse_names_the_position(typed: StateStore) -> None:
    s = connect(typed)
    with pytest.raises(SelectorError) as info:
        s.dequeue("app.q", consumer="shipping", wait=0,
                  condition="priority = 1 AND tab.user_data.region = = 'WEST'")
    assert (info.value.line, info.value.column) == (1, 41)
    assert "^" in str(info.value)
    with pytest.raises(SelectorError, match="column 15: the payload type has no field 'colour'"):
        s.dequeue("app.q", consumer="shipping", wait=0, condition="tab.user_data.colour = 1")
    assert connect(typed).dequeue("app.q", consumer="shipping", wait=0) is not None


def test_subscriber_rule_that_does_not_parse(typed: StateStore) -> None:
    from changeflow.messaging import views

    with pytest.raises(SelectorError, match="column 11: expected a value"):
        admin.add_subscriber(typed, "app.q", "bad", rule="priority >")
    assert [s["name"] for s in views.subscribers(typed, "app.q")] == ["SHIPPING"]


def test_dequeue_by_a_consumer_that_is_not_subscribed(typed: StateStore) -> None:
    s = connect(typed)
    refused(typed, NotSubscribedError, "NOBODY is not a subscriber of queue app.q",
            lambda: s.dequeue("app.q", consumer="nobody", wait=0))
    refused(typed, MessagePropertyError, "name the consumer",
            lambda: s.dequeue("app.q", wait=0))


def test_enqueue_to_a_stopped_queue(typed: StateStore) -> None:
    admin.stop_queue(typed, "app.q", dequeue=False)
    s = connect(typed)
    refused(typed, QueueStoppedError, "stopped for enqueue",
            lambda: s.enqueue("app.q", {"id": 2}, commit=True))
    assert s.dequeue("app.q", consumer="shipping", wait=0) is not None  # dequeue still works
    s.rollback()
    admin.stop_queue(typed, "app.q")
    refused(typed, QueueStoppedError, "stopped for dequeue",
            lambda: s.dequeue("app.q", consumer="shipping", wait=0))


def test_missing_privilege(store: StateStore) -> None:
    make_queue(store, "app.sq", secure=True)
    s = connect(store, user="mallory")
    refused(store, SecurityError, "MALLORY has no ENQUEUE privilege on secure queue app.sq",
            lambda: s.enqueue("app.sq", b"x", commit=True))
    refused(store, SecurityError, "has no DEQUEUE privilege",
            lambda: s.dequeue("app.sq", wait=0))


@pytest.mark.parametrize("props, match", [
    ({"delay": -1}, "delay must be >= 0"),
    ({"expiration": -5}, "expiration must be >= 0"),
    ({"priority": "high"}, "priority must be an integer"),
    ({"correlation": "x" * 200}, "at most 128"),
    ({"recipients": ["a"]}, "single consumer"),
])
def test_bad_message_properties(store: StateStore, props: dict, match: str) -> None:
    make_queue(store)
    s = connect(store)
    refused(store, MessagePropertyError, match, lambda: s.enqueue("app.q", b"x", commit=True,
                                                                  **props))


def test_message_over_the_size_limit(store: StateStore) -> None:
    make_queue(store)
    s = connect(store, max_message_size=1000)
    refused(store, MessageTooLargeError, "1001 bytes encoded; the limit is 1000",
            lambda: s.enqueue("app.q", b"x" * 1001, commit=True))
    s.enqueue("app.q", b"x" * 1000, commit=True)
    assert len(rows(store)) == 1


def test_no_recipient_on_a_topic(store: StateStore) -> None:
    make_queue(store, multi=True)
    s = connect(store)
    refused(store, NoRecipientsError, "has no subscriber",
            lambda: s.enqueue("app.q", b"x", commit=True))


def test_an_array_with_one_bad_message_enqueues_nothing(typed: StateStore) -> None:
    s = connect(typed)
    refused(typed, PayloadTypeError, "'x'", lambda: s.enqueue_array(
        "app.q", [{"id": 2}, {"id": "x"}], commit=True))
    assert not s.in_transaction


def test_bad_dequeue_options(typed: StateStore) -> None:
    s = connect(typed)
    for kw, match in [({"mode": "DESTROY"}, "unknown dequeue mode"),
                      ({"navigation": "LAST"}, "unknown navigation"),
                      ({"wait": "-3"}, "FOREVER, NO_WAIT or >= 0"),
                      ({"mode": "LOCKED", "visibility": "IMMEDIATE"}, "ON_COMMIT")]:
        refused(typed, MessagePropertyError, match,
                lambda kw=kw: s.dequeue("app.q", consumer="shipping", **{"wait": 0, **kw}))


def test_a_refusal_is_never_taken_from_the_cache(store: StateStore) -> None:
    """A session that read a queue as stopped reads it again before refusing: another
    process may have started it (the enqueue succeeds) or dropped it (it says so)."""
    import time

    from sqlalchemy import update

    from changeflow.messaging.cache import MAX_AGE
    from changeflow.state import schema

    make_queue(store)
    s = connect(store)
    s.enqueue("app.q", b"1", commit=True)

    def set_queue(**values: object) -> None:  # what another process's admin call does
        with store.begin() as conn:
            conn.execute(update(schema.queues).where(schema.queues.c.name == "app.q")
                         .values(**values))

    set_queue(enqueue_enabled=False)
    time.sleep(MAX_AGE + 0.1)  # the next enqueue reads the entry again: stopped
    refused(store, QueueStoppedError, "stopped for enqueue",
            lambda: s.enqueue("app.q", b"2", commit=True))
    set_queue(enqueue_enabled=True)
    assert s.enqueue("app.q", b"3", commit=True)
    set_queue(enqueue_enabled=False)
    time.sleep(MAX_AGE + 0.1)
    refused(store, QueueStoppedError, "stopped for enqueue",
            lambda: s.enqueue("app.q", b"4", commit=True))
    set_queue(status="dropped")
    refused(store, QueueNotFoundError, "dropped", lambda: s.enqueue("app.q", b"5", commit=True))


def test_a_stop_by_another_process_is_seen_at_once(store: StateStore) -> None:
    from sqlalchemy import update

    from changeflow.state import schema

    make_queue(store)
    s = connect(store)
    s.enqueue("app.q", b"1", commit=True)  # the session now knows the queue's properties
    with store.begin() as conn:  # what stop_queue in another process does
        conn.execute(update(schema.queues).where(schema.queues.c.name == "app.q")
                     .values(enqueue_enabled=False))
    refused(store, QueueStoppedError, "stopped for enqueue",
            lambda: s.enqueue("app.q", b"2", commit=True))
    with store.begin() as conn:
        conn.execute(update(schema.queues).where(schema.queues.c.name == "app.q")
                     .values(status="dropped"))
    refused(store, QueueNotFoundError, "dropped", lambda: s.enqueue("app.q", b"3", commit=True))
