"""Enqueue: checking a message, choosing its recipients, and writing it at commit.

:func:`prepare` does every check an enqueue needs (queue started, payload type, size,
properties, privilege, recipients) when the application calls ``enqueue``, so a bad
message is refused at once and changes nothing. The prepared message is kept by the
session and written by :func:`write` inside the commit's transaction: messages of
one transaction become visible together (ON_COMMIT), and a commit-time queue takes its
commit sequence under the queue's counter lock, so a message committed later always
sorts later (seed 001, commit-time queues).

Recipients, on a multi-consumer queue: the recipient list when one is given, else
every subscriber whose rule is TRUE for the message (remote subscribers included:
their deliveries wait for the propagation to their address) and every messaging
client of the queue (its rule sets are applied when it dequeues).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, cast, exists, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection

from changeflow.errors import PayloadTypeError, QueueDroppedError, QueueNotFoundError
from changeflow.messaging import conditions as C
from changeflow.messaging import dictionary as D
from changeflow.messaging import privileges
from changeflow.messaging import types as T
from changeflow.messaging.constants import State
from changeflow.messaging.errors import (
    MessagePropertyError,
    MessageTooLargeError,
    NoRecipientsError,
    QueueStoppedError,
)
from changeflow.messaging.model import MessageProperties
from changeflow.state import StateStore, schema
from changeflow.state import schema_messaging as S

M = S.messages
#: Checks a privilege: (queue properties, user, privilege, agent); raises SecurityError.
PrivilegeCheck = Callable[[D.QueueProps, str | None, str, str | None], None]
Q = schema.queues
RECEIVED = S.received
#: Receipts of producer-chosen message ids, so that a replay is recognised.
REPLAY_PRODUCER = "enqueue"


@dataclass(frozen=True)
class Pending:
    """A checked message waiting for its transaction's commit."""

    queue: str
    msg_id: str
    type_name: str
    payload: str | None
    payload_raw: bytes | None
    size: int
    properties: MessageProperties
    recipients: tuple[tuple[str, str], ...]  # (consumer, address)
    enq_time: dt.datetime
    replay_key: bool  # the producer chose the id: recognise a replay


def message_type_for(conn: Connection, url: str, props: D.QueueProps, payload: Any,
                     type_name: str | None) -> T.TypeDef:
    """The type a payload is checked against on this queue.

    Raises:
        UnknownTypeError, PayloadTypeError: an unknown type, or one the queue cannot hold.
    """
    queue_type = D.message_type(conn, url, props.payload_type)
    if queue_type.kind != T.ANYDATA:
        if type_name and T.canonical_type_name(type_name) != queue_type.name:
            raise PayloadTypeError(
                f"queue {props.name} holds {queue_type.name} messages, not "
                f"{T.canonical_type_name(type_name)}")
        return queue_type
    if type_name:
        return D.message_type(conn, url, type_name)
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return T.TypeDef("RAW", T.RAW)
    jms = T.jms_kind_of(payload)
    if jms:
        return D.message_type(conn, url, jms)
    return queue_type


def check_queue(props: D.QueueProps) -> None:
    if props.is_exception:
        raise QueueStoppedError(
            f"queue {props.name} is an exception queue: messages arrive there when they "
            "expire or cannot be delivered, never by enqueue")
    if not props.enqueue_enabled:
        raise QueueStoppedError(
            f"queue {props.name} is stopped for enqueue; start it with "
            f"`changeflow aq start-queue {props.name}` (DBMS_AQADM.START_QUEUE)")


def check_exception_queue(conn: Connection, props: D.QueueProps, name: str) -> None:
    """A message's ``exception_queue``, when it exists, must be an exception queue for it.

    A name that does not exist is accepted: as in Oracle, the message then goes to the
    queue table's default exception queue if the queue still does not exist when the
    message is moved (seed 003).

    Raises:
        MessagePropertyError: an ordinary queue, or one of another payload type.
    """
    try:
        target = D.queue(conn, name)
    except (QueueNotFoundError, QueueDroppedError):
        return
    if not target.is_exception:
        raise MessagePropertyError(
            f"exception_queue {target.name} is not an exception queue (nobody could dequeue "
            "the messages moved there): name one created with queue_type EXCEPTION_QUEUE "
            f"(`changeflow aq create-queue NAME --queue-table {props.queue_table} "
            "--queue-type exception`), or leave exception_queue out for the default "
            f"{props.exception_queue}")
    if target.payload_type != props.payload_type:
        raise MessagePropertyError(
            f"exception_queue {target.name} holds {target.payload_type} messages: its payload "
            f"type is not that of queue {props.name} ({props.payload_type})")


def prepare(conn: Connection, store: StateStore, props: D.QueueProps, payload: Any,
            properties: MessageProperties, *, type_name: str | None, user: str | None,
            max_size: int, now: dt.datetime,
            subscribers: Sequence[D.Subscriber] | None = None,
            check: PrivilegeCheck | None = None) -> Pending:
    """Check one message for enqueue and choose its recipients.

    ``subscribers`` and ``check`` are a session's cached dictionary (default: read
    through ``conn``).

    Raises:
        QueueStoppedError, PayloadTypeError, UnknownTypeError, MessageTooLargeError,
        MessagePropertyError, SecurityError, NoRecipientsError: nothing is written.
    """
    check_queue(props)
    if properties.exception_queue:
        check_exception_queue(conn, props, properties.exception_queue)
    mtype = message_type_for(conn, store.url, props, payload, type_name)
    text, raw, size = mtype.encode(payload)
    if size > max_size:
        raise MessageTooLargeError(
            f"message for queue {props.name} is {size} bytes encoded; the limit is {max_size} "
            "(messaging.max_message_size)")
    sender = properties.sender.name if properties.sender else None
    (check or functools.partial(privileges.check, conn))(props, user, "ENQUEUE", sender)
    recipients = choose_recipients(conn, store, props, properties, mtype, text, raw,
                                   subscribers)
    return Pending(props.name, properties.msg_id or uuid.uuid4().hex, mtype.name, text, raw,
                   size, properties, recipients, now, properties.msg_id is not None)


def choose_recipients(conn: Connection, store: StateStore, props: D.QueueProps,
                      properties: MessageProperties, mtype: T.TypeDef, text: str | None,
                      raw: bytes | None, subscribers: Sequence[D.Subscriber] | None = None,
                      ) -> tuple[tuple[str, str], ...]:
    """The (consumer, address) deliveries of a message (see the module docstring).

    Raises:
        MessagePropertyError: a recipient list on a single-consumer queue.
        NoRecipientsError: a multi-consumer queue, no recipient list, no subscriber
            accepting the message.
    """
    if not props.multiple_consumers:
        if properties.recipients:
            raise MessagePropertyError(
                f"queue {props.name} has a single consumer: a recipient list is only for "
                "multi-consumer queues")
        return (("", ""),)
    if properties.recipients:
        return tuple(dict.fromkeys((r.name, r.address) for r in properties.recipients))
    subs = list(subscribers) if subscribers is not None else D.subscribers(conn, props.name)
    decoded: list[Any] = []
    out = []
    for sub in subs:
        if sub.rule and sub.kind != "messaging_client":
            if not decoded:
                decoded.append(mtype.decode(text, raw))
            fields = mtype.field_names if mtype.kind == T.OBJECT else None
            cond = C.compile_condition(sub.rule, fields)
            if not C.matches(cond, mtype.rule_fields(decoded[0]),
                             rule_props(properties, mtype.name), mtype.name):
                continue
        out.append((sub.name, sub.address))
    if not out:
        raise NoRecipientsError(
            f"no recipient for this message on multi-consumer queue {props.name}: give a "
            f"recipient list, or add a subscriber whose rule accepts it ({len(subs)} "
            "subscribers, none matched)" if subs else
            f"no recipient for this message: multi-consumer queue {props.name} has no "
            "subscriber; add one (`changeflow aq subscribers add`) or give a recipient list")
    return tuple(out)


def rule_props(p: MessageProperties, type_name: str) -> dict[str, Any]:
    """A message's properties as subscriber rules and conditions read them."""
    return {"AQ$PRIORITY": p.priority, "AQ$CORRID": p.correlation, "AQ$DELAY": p.delay,
            "AQ$EXPIRATION": p.expiration, "AQ$RETRY_COUNT": 0,
            "AQ$SENDER": p.sender.name if p.sender else None, "AQ$MSG_TYPE": type_name}


def _micros(t: dt.datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def message_rows(props: D.QueueProps, msg: Pending, txn_id: str,
          commit_seq: int | None, now: dt.datetime) -> list[dict[str, Any]]:
    p = msg.properties
    visible = msg.enq_time + dt.timedelta(seconds=p.delay)
    expire = visible + dt.timedelta(seconds=p.expiration) if p.expiration is not None else None
    recipients = json.dumps([[r.name, r.address] for r in p.recipients]) if p.recipients else None
    base = {
        "msg_id": msg.msg_id, "queue": props.name,
        "state": State.WAITING.value if p.delay > 0 else State.READY.value,
        "k1": p.priority if props.by_priority else 0,
        "k2": commit_seq if commit_seq is not None else _micros(msg.enq_time),
        "txn_id": txn_id, "commit_seq": commit_seq, "priority": p.priority,
        "enq_time": msg.enq_time, "visible_at": visible, "expire_at": expire,
        "delay": p.delay, "expiration": p.expiration, "correlation": p.correlation,
        "sender": str(p.sender) if p.sender else None, "recipients": recipients,
        "exception_queue": p.exception_queue, "msg_type": msg.type_name,
        "payload": msg.payload, "payload_raw": msg.payload_raw, "size": msg.size,
        "retry_count": 0, "lock_txn": None, "lock_mode": None, "lock_expires": None,
        "original_queue": None, "reason": None, "state_time": now,
    }
    return [{**base, "consumer": c, "address": a} for c, a in msg.recipients]


def write(conn: Connection, store: StateStore, pending: list[Pending], txn_id: str,
          now: dt.datetime, props: dict[str, D.QueueProps] | None = None, *,
          started: bool = False) -> dict[str, list[str]]:
    """Write a transaction's messages (inside the commit's transaction).

    A message whose producer-chosen id was enqueued into the queue before is a replay
    and is skipped. Returns the message ids written, by queue.

    Args:
        props: queues' properties known already (a row is then written only if its
            queue is still active, checked by the insert itself, or re-read first).
        started: also require the queue to be started for enqueue (an enqueue that
            commits at once).

    Raises:
        QueueNotFoundError, QueueDroppedError, QueueStoppedError: nothing is written.
    """
    by_queue: dict[str, list[Pending]] = {}
    for msg in pending:
        by_queue.setdefault(msg.queue, []).append(msg)
    written: dict[str, list[str]] = {}
    for queue, msgs in by_queue.items():
        known = (props or {}).get(queue)
        msgs = _without_replays(conn, queue, msgs, now)
        if not msgs:
            continue
        single = known is not None and len(msgs) == 1 and len(msgs[0].recipients) == 1
        qp = known if single else D.queue(conn, queue)
        assert qp is not None
        if not single and started:
            check_queue(qp)
        seq = store.next_counter(f"aq:commit:{queue}", conn) if qp.commit_ordered else None
        rows = [r for m in msgs for r in message_rows(qp, m, txn_id, seq, now)]
        if single:
            _guarded_insert(conn, rows[0], started)
        else:
            conn.execute(M.insert(), rows)
        written[queue] = [m.msg_id for m in msgs]
    return written


_COLUMNS = [c for c in M.c if c.name != "id"]


@functools.lru_cache(maxsize=4)
def guarded(started: bool, versioned: bool = False) -> Any:
    """``INSERT ... SELECT <row> WHERE <the queue is active [and started]>``.

    ``versioned``: also require the dictionary version ``:p_dver`` (what the message
    was prepared under: its recipients and privilege checks).
    """
    live = [Q.c.name == bindparam("v_queue"), Q.c.status == "active"]
    if started:
        live.append(Q.c.enqueue_enabled.is_(True))
    where = [exists(select(Q.c.name).where(*live))]
    if versioned:
        where.append(D.version_guard())
    values = select(*[bindparam(f"v_{c.name}", type_=c.type) for c in _COLUMNS]).where(
        *where)
    # RETURNING, not rowcount: drivers differ on the rowcount of INSERT ... SELECT
    return M.insert().from_select([c.name for c in _COLUMNS], values).returning(M.c.id)


@functools.lru_cache(maxsize=1)
def guarded_many() -> Any:
    """PostgreSQL: :func:`guarded` for any number of rows, as *one* statement.

    Each column comes as one array parameter ``a_<column>`` (cast to the column's type),
    spread by ``unnest`` into rows: ``INSERT ... SELECT * FROM unnest(...) WHERE <the queue
    :v_queue is active and started> AND <dictionary version :p_dver>``. One statement is
    one snapshot, so the batch is written whole or not at all, in one round trip
    whatever its size (an ``enqueue_array`` that commits at once). Rows are inserted in
    the arrays' order (``WITH ORDINALITY``), so their ids keep the batch's order.
    """
    names = [c.name for c in _COLUMNS]
    arrays = [cast(bindparam(f"a_{c.name}"), ARRAY(c.type)) for c in _COLUMNS]
    rows = func.unnest(*arrays).table_valued(*names, with_ordinality="n").render_derived()
    live = exists(select(Q.c.name).where(Q.c.name == bindparam("v_queue"),
                                         Q.c.status == "active",
                                         Q.c.enqueue_enabled.is_(True)))
    values = select(*[rows.c[n] for n in names]).where(live, D.version_guard()).order_by(
        rows.c.n)  # ids in the array's order: the batch keeps its order in the queue
    return M.insert().from_select(names, values).returning(M.c.id)


#: How a column's values are made uniform for their array (ints and floats mixed by
#: callers would otherwise give the driver a list of two types).
_UNIFORM: dict[str, Callable[[Any], Any]] = {"delay": float, "expiration": float}


def many_params(rows: list[dict[str, Any]], queue: str, version: int) -> dict[str, Any]:
    """The parameters of :func:`guarded_many` for ``rows`` (of :func:`message_rows`)."""
    params: dict[str, Any] = {"v_queue": queue, "p_dver": version}
    for c in _COLUMNS:
        conv = _UNIFORM.get(c.name)
        params[f"a_{c.name}"] = [r[c.name] if conv is None or r[c.name] is None
                                 else conv(r[c.name]) for r in rows]
    return params


def _guarded_insert(conn: Connection, row: dict[str, Any], started: bool) -> None:
    done = conn.execute(guarded(started), {f"v_{k}": v for k, v in row.items()}).first()
    if done is None:  # say why: unknown, dropped or stopped
        check_queue(D.queue(conn, row["queue"]))
        raise QueueStoppedError(f"queue {row['queue']} refused the message")


def _without_replays(conn: Connection, queue: str, msgs: list[Pending],
                     now: dt.datetime) -> list[Pending]:
    keyed = [m for m in msgs if m.replay_key]
    if not keyed:
        return msgs
    ids = [m.msg_id for m in keyed]
    seen = {r[0] for r in conn.execute(select(RECEIVED.c.msg_id).where(
        RECEIVED.c.producer == f"{REPLAY_PRODUCER}:{queue}", RECEIVED.c.msg_id.in_(ids)))}
    fresh, out = set(), []
    for m in msgs:
        if m.replay_key:
            if m.msg_id in seen or m.msg_id in fresh:
                continue
            fresh.add(m.msg_id)
        out.append(m)
    if fresh:
        conn.execute(RECEIVED.insert(), [
            {"producer": f"{REPLAY_PRODUCER}:{queue}", "msg_id": i, "queue": queue,
             "received_at": now} for i in sorted(fresh)])
    return out
