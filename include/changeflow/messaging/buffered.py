"""Buffered messages: kept in the memory of a running process, spilled under pressure.

Seed 001 (buffered queues) and SPEC §3. An enqueue with ``delivery_mode="BUFFERED"``
is checked as a persistent one (queue started, payload type, size, privilege,
recipients) and then kept in this process's memory instead of the queue table: no
write to the store, no fsync. A dequeue with ``delivery_mode`` BUFFERED takes buffered
messages only, PERSISTENT_OR_BUFFERED either kind (buffered first); the default,
PERSISTENT, never sees them.

As in Oracle, buffered messages are not transactional: an enqueue or a REMOVE dequeue
takes effect at once, whatever the visibility, and a rollback does not bring one back;
LOCKED, delays, expiration, array enqueues and queues with transactional grouping are
refused for them. They are not propagated.

The memory of a process (the IDAP service, an application) holds its buffered
messages, shared by every session of that process on the same store. They *spill* to
``cf_aq_spilled`` (Oracle's ``AQ$_<queue_table>_p``), where any process's buffered
dequeue finds them:

* under memory pressure: when a store's buffered messages pass ``buffer_max_bytes``, the
  oldest are spilled until they take three quarters of it;
* after a time: a message buffered longer than ``buffer_spill_after`` seconds spills at
  the next buffered call of the process, or at the service's time-manager pass;
* when ``changeflow serve`` stops cleanly.

What is still in memory when the process dies is lost, by design (seed 001: "some of
the information in a buffered queue can be lost if the instance ... shuts down").
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, func, insert, select

from changeflow.messaging import conditions as C
from changeflow.messaging import dictionary as D
from changeflow.messaging.cache import LazyRead
from changeflow.messaging.constants import DeliveryMode, DequeueMode, Navigation, State
from changeflow.messaging.enqueue import rule_props
from changeflow.messaging.errors import MessagePropertyError
from changeflow.messaging.model import Agent, Message, MessageProperties
from changeflow.state import schema_messaging as S
from changeflow.state import utcnow

if TYPE_CHECKING:
    from changeflow.messaging.receive import Spec
    from changeflow.messaging.session import Session
    from changeflow.state import StateStore

SP = S.spilled
#: A buffered key: (k1: priority or 0, k2: enqueue time in µs, tiebreak).
Key = tuple[int, int, str]


@dataclass(eq=False)
class Entry:
    """One buffered message for one recipient (compared by identity)."""

    queue: str
    consumer: str
    msg_id: str
    type_name: str
    payload: str | None
    raw: bytes | None
    size: int
    props: MessageProperties
    enq_time: dt.datetime
    k1: int
    k2: int
    at: float = field(default_factory=time.monotonic)

    @property
    def key(self) -> Key:
        return (self.k1, self.k2, self.msg_id)


class Buffer:
    """The buffered messages of one store in this process."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.entries: dict[str, list[Entry]] = {}
        self.bytes = 0

    def add(self, entries: list[Entry]) -> None:
        with self.cond:
            for e in entries:
                q = self.entries.setdefault(e.queue, [])
                q.append(e)
                q.sort(key=lambda x: x.key)
                self.bytes += e.size
            self.cond.notify_all()

    def remove(self, entry: Entry) -> bool:
        """Take an entry out; False when another session took it first."""
        with self.cond:
            q = self.entries.get(entry.queue, [])
            if entry not in q:
                return False
            q.remove(entry)
            self.bytes -= entry.size
            return True

    def oldest(self, *, over_bytes: int | None = None, before: float | None = None
               ) -> list[Entry]:
        """Remove and return what must spill: the oldest entries while the buffer is over
        ``over_bytes``, and every entry buffered before ``before`` (monotonic time)."""
        with self.cond:
            every = sorted((e for q in self.entries.values() for e in q), key=lambda e: e.at)
            out = [e for e in every if before is not None and e.at < before]
            left = self.bytes - sum(e.size for e in out)
            if over_bytes is not None:
                for e in every:
                    if left <= over_bytes:
                        break
                    if e not in out:
                        out.append(e)
                        left -= e.size
            for e in out:
                self.entries[e.queue].remove(e)
                self.bytes -= e.size
            return out

    def forget(self, queue: str) -> None:
        with self.cond:
            for e in self.entries.pop(queue, []):
                self.bytes -= e.size


_buffers: dict[str, Buffer] = {}
_lock = threading.Lock()


def buffer(store: StateStore) -> Buffer:
    """This process's buffer for a store."""
    with _lock:
        return _buffers.setdefault(store.url, Buffer())


def counts(store: StateStore) -> dict[str, int]:
    """Buffered messages (deliveries) per queue in this process's memory."""
    buf = buffer(store)
    with buf.cond:
        return {q: len(es) for q, es in buf.entries.items() if es}


def forget(store: StateStore, queue: str) -> None:
    """Drop a queue's buffered messages from memory (the queue was dropped)."""
    buffer(store).forget(queue)


# -- enqueue ------------------------------------------------------------------------------
def enqueue(session: Session, queue: str, payload: Any, props: MessageProperties,
            type_name: str | None) -> str:
    """Check a message and keep it in this process's memory; returns its id.

    Raises:
        MessagePropertyError: a delay, an expiration, a queue with transactional
            grouping or a remote recipient (not supported for buffered messages);
            and every refusal of a persistent enqueue.
    """
    for name, bad in (("delay", props.delay > 0), ("expiration", props.expiration is not None)):
        if bad:
            raise MessagePropertyError(f"{name} is not supported for buffered messages "
                                       "(delivery_mode BUFFERED); enqueue it as PERSISTENT")
    with session.store.read() as conn:
        qp = D.queue(conn, queue)
    if qp.message_grouping == "transactional":
        raise MessagePropertyError(f"queue {qp.name} groups messages by transaction: "
                                   "buffered messages are not transactional; enqueue it "
                                   "as PERSISTENT")
    (msg,), _ = session._sender.send(queue, [payload], [props], type_name, None)
    if any(address for _, address in msg.recipients):
        raise MessagePropertyError(f"buffered messages are not propagated: a recipient of "
                                   f"this message on {qp.name} is remote; enqueue it as "
                                   "PERSISTENT")
    k1 = msg.properties.priority if qp.by_priority else 0
    k2 = int(msg.enq_time.timestamp() * 1_000_000)
    buffer(session.store).add([Entry(
        qp.name, consumer, msg.msg_id, msg.type_name, msg.payload, msg.payload_raw, msg.size,
        msg.properties, msg.enq_time, k1, k2) for consumer, _ in msg.recipients])
    spill_due(session.store, session.settings.buffer_max_bytes,
              session.settings.buffer_spill_after)
    return msg.msg_id


# -- spilling -----------------------------------------------------------------------------
def spill_due(store: StateStore, max_bytes: int, after: float | None) -> int:
    """Spill what memory pressure or age says must go; returns the deliveries spilled."""
    buf = buffer(store)
    before = time.monotonic() - after if after is not None else None
    if buf.bytes <= max_bytes and (before is None or not _any_before(buf, before)):
        return 0
    return _write(store, buf, buf.oldest(over_bytes=max_bytes * 3 // 4, before=before))


def spill_all(store: StateStore) -> int:
    """Spill every buffered message of a store (a clean stop of the service)."""
    buf = buffer(store)
    return _write(store, buf, buf.oldest(over_bytes=0))


def _any_before(buf: Buffer, before: float) -> bool:
    with buf.cond:
        return any(e.at < before for q in buf.entries.values() for e in q)


def _write(store: StateStore, buf: Buffer, entries: list[Entry]) -> int:
    if not entries:
        return 0
    now = utcnow()
    rows = [{"queue": e.queue, "consumer": e.consumer, "msg_id": e.msg_id,
             "msg_type": e.type_name, "payload": e.payload, "payload_raw": e.raw,
             "size": e.size, "properties": _props_json(e.props), "k1": e.k1, "k2": e.k2,
             "enq_time": e.enq_time, "spilled_at": now} for e in entries]
    try:
        with store.begin() as conn:
            conn.execute(insert(SP), rows)
    except BaseException:
        buf.add(entries)  # still in memory: nothing lost by a failed spill
        raise
    return len(rows)


def _props_json(p: MessageProperties) -> str:
    return json.dumps({"priority": p.priority, "correlation": p.correlation,
                       "sender": str(p.sender) if p.sender else None,
                       "recipients": [str(r) for r in p.recipients],
                       "exception_queue": p.exception_queue})


def spilled_counts(store: StateStore) -> dict[str, int]:
    """Spilled buffered messages (deliveries) per queue."""
    with store.read() as conn:
        return {q: int(n) for q, n in conn.execute(
            select(SP.c.queue, func.count()).group_by(SP.c.queue))}


# -- dequeue ------------------------------------------------------------------------------
def take(session: Session, spec: Spec, seconds: float | None, mode: DeliveryMode,
         persistent: Callable[[], list[Message]]) -> Message | None:
    """A dequeue with ``delivery_mode`` BUFFERED or PERSISTENT_OR_BUFFERED.

    Waits up to ``seconds`` (None: forever). ``persistent`` makes one attempt on the
    queue table without waiting (PERSISTENT_OR_BUFFERED).

    Raises:
        MessagePropertyError: LOCKED, or a messaging client (not for buffered messages).
    """
    if spec.mode is DequeueMode.LOCKED:
        raise MessagePropertyError("LOCKED is not supported for buffered messages: use "
                                   "BROWSE or REMOVE")
    deadline = None if seconds is None else time.monotonic() + seconds
    buf, first = buffer(session.store), True
    while True:
        checked = session._receiver.check(spec, fresh=first)
        if checked.client is not None:
            raise MessagePropertyError(f"{spec.consumer} is a messaging client: messaging "
                                       "clients dequeue persistent messages only (seed 001)")
        first = False
        found = _take_buffered(session, spec, checked.condition)
        if found is not None:
            return found
        if mode is DeliveryMode.PERSISTENT_OR_BUFFERED:
            msgs = persistent()
            if msgs:
                return msgs[0]
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        with buf.cond:
            buf.cond.wait(0.05 if left is None else min(0.05, left))


def _cursor(session: Session, spec: Spec) -> dict[str, Any]:
    cursors = session.__dict__.setdefault("_buffered_cursors", {})
    cursor = cursors.setdefault((spec.queue, spec.consumer), {"key": None})
    if spec.navigation is Navigation.FIRST_MESSAGE:
        cursor["key"] = None
    return cursor


def _take_buffered(session: Session, spec: Spec, condition: C.Condition | None
                   ) -> Message | None:
    store, buf = session.store, buffer(session.store)
    browse = spec.mode is DequeueMode.BROWSE
    cursor = _cursor(session, spec)
    after = cursor["key"] if browse else None
    for _ in range(20):  # another session may take the one found first: look again
        mem = _first_in_memory(session, spec, condition, after)
        spilled = _first_spilled(session, spec, condition, after)
        if mem is None and spilled is None:
            return None
        use_mem = spilled is None or (mem is not None and mem.key <= spilled[1])
        if use_mem:
            assert mem is not None
            if not browse and not buf.remove(mem):
                continue
            msg = _message(session, mem.queue, mem.consumer, mem.msg_id, mem.type_name,
                           mem.payload, mem.raw, mem.size, mem.props, mem.enq_time, spec)
            key = mem.key
        else:
            assert spilled is not None
            row, key = spilled
            if not browse:
                with store.begin() as conn:
                    if not conn.execute(delete(SP).where(SP.c.id == row.id)).rowcount:
                        continue
            msg = _message(session, row.queue, row.consumer, row.msg_id, row.msg_type,
                           row.payload, row.payload_raw, row.size,
                           _props_of(row.properties), _aware(row.enq_time), spec)
        if browse:
            cursor["key"] = key
        return msg
    return None


def _matches(session: Session, spec: Spec, condition: C.Condition | None, msg_id: str,
             correlation: str | None, type_name: str, payload: str | None,
             raw: bytes | None, props: MessageProperties) -> bool:
    sel = spec.selector
    if sel is not None and sel.msg_id and sel.msg_id != msg_id:
        return False
    if sel is not None and sel.correlation and (
            correlation is None or not _like(sel.correlation).fullmatch(correlation)):
        return False
    if condition is None:
        return True
    with LazyRead(session.store) as conn:
        mtype = D.message_type(conn, session.store.url, type_name)  # type: ignore[arg-type]
    return C.matches(condition, mtype.rule_fields(mtype.decode(payload, raw)),
                     rule_props(props, mtype.name), mtype.name)


def _like(pattern: str) -> re.Pattern[str]:
    if not C.like_pattern(pattern):
        return re.compile(re.escape(pattern))
    return re.compile("".join(".*" if c == "%" else "." if c == "_" else re.escape(c)
                              for c in pattern), re.S)


def _first_in_memory(session: Session, spec: Spec, condition: C.Condition | None,
                     after: Key | None) -> Entry | None:
    buf = buffer(session.store)
    with buf.cond:
        candidates = [e for e in buf.entries.get(spec.queue, [])
                      if e.consumer == spec.consumer and (after is None or e.key > after)]
    for e in candidates:
        if _matches(session, spec, condition, e.msg_id, e.props.correlation, e.type_name,
                    e.payload, e.raw, e.props):
            return e
    return None


def _first_spilled(session: Session, spec: Spec, condition: C.Condition | None,
                   after: Key | None) -> tuple[Any, Key] | None:
    stmt = select(SP).where(SP.c.queue == spec.queue, SP.c.consumer == spec.consumer)
    if spec.selector is not None and spec.selector.msg_id:
        stmt = stmt.where(SP.c.msg_id == spec.selector.msg_id)
    if after is not None:
        stmt = stmt.where(and_(SP.c.k1 >= after[0]))
    stmt = stmt.order_by(SP.c.k1, SP.c.k2, SP.c.msg_id)
    with session.store.read() as conn:
        rows = conn.execute(stmt.limit(500)).all()
    for row in rows:
        key = (int(row.k1), int(row.k2), row.msg_id)
        if after is not None and key <= after:
            continue
        props = _props_of(row.properties)
        if _matches(session, spec, condition, row.msg_id, props.correlation, row.msg_type,
                    row.payload, row.payload_raw, props):
            return row, key
    return None


def _props_of(text: str) -> MessageProperties:
    data = json.loads(text)
    return MessageProperties(priority=data["priority"], correlation=data["correlation"],
                             sender=Agent.parse(data["sender"]) if data["sender"] else None,
                             recipients=tuple(data["recipients"]),
                             exception_queue=data["exception_queue"])


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _message(session: Session, queue: str, consumer: str, msg_id: str, type_name: str,
             payload: str | None, raw: bytes | None, size: int, props: MessageProperties,
             enq_time: dt.datetime, spec: Spec) -> Message:
    value = None
    if spec.mode is not DequeueMode.REMOVE_NODATA:
        with LazyRead(session.store) as conn:
            mtype = D.message_type(conn, session.store.url, type_name)  # type: ignore[arg-type]
            value = mtype.decode(payload, raw)
    return Message(msg_id=msg_id, queue=queue, consumer=consumer, type_name=type_name,
                   payload=value, priority=props.priority, delay=0.0, expiration=None,
                   correlation=props.correlation, sender=props.sender,
                   recipients=props.recipients, exception_queue=props.exception_queue,
                   enq_time=enq_time, state=State.READY, attempts=0, size=size,
                   delivery_mode=DeliveryMode.BUFFERED.value)
