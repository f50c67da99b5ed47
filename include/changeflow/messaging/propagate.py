"""Remote subscribers: a propagation also carries the user messages addressed to its destination.

A subscriber with an address ``owner.queue@site`` (seed 002), or a recipient with one,
makes the messages it selects wait in the source queue as deliveries to that address.
The propagation whose destination is that queue carries them, in the same pass that
moves its LCR batches, with the same schedule, backoff, statistics and alerts. Exactly
once, across crashes:

1. *lock*: the pending deliveries (up to the pass limit) are locked at the source
   under this run (mode ``P``; a crashed run's locks are released first: the run holds
   the propagation's lease, so no other run can be at work);
2. *destination commit*: each message is enqueued at the destination, keyed by its
   message id: ``cf_aq_received`` there records ``(propagation, msg_id)`` in the same
   transaction, so a message the destination already took is skipped; the lease is
   checked in that transaction;
3. *acknowledge*: the source deliveries are removed.

A crash after 2 re-sends at the next pass and the destination skips what it holds; a
crash before 2 sends again. At the destination, a message for a named remote agent
goes to that recipient only (case 2); a message for the remote queue itself (no name)
goes to that queue's own subscribers (case 1). A destination that does not exist or
was dropped marks the messages UNDELIVERABLE (the source queue table's exception
queue) and fails the pass with the error, which the schedule handles as
undeliverable (no retry burnt); so does a message whose type the destination queue
cannot hold, alone.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, literal_column, select, update
from sqlalchemy.engine import Connection, Row

from changeflow import faults
from changeflow.errors import (
    ChangeflowError,
    DestinationUnavailableError,
    PayloadTypeError,
    QueueNotFoundError,
)
from changeflow.messaging import dictionary as D
from changeflow.messaging import enqueue as EQ
from changeflow.messaging import locks
from changeflow.messaging import types as T
from changeflow.messaging.constants import State
from changeflow.messaging.dequeue import from_row
from changeflow.messaging.model import MessageProperties
from changeflow.pipeline import Pipeline, resolve
from changeflow.propagation.transports import Carrier
from changeflow.state import StateStore, utcnow
from changeflow.state import schema_messaging as S

if TYPE_CHECKING:
    from changeflow.config import PipelineConfig, PropagationSpec
    from changeflow.propagation import PropagationResult
    from changeflow.state.leases import Lease

log = logging.getLogger(__name__)
M = S.messages
RECEIVED = S.received
#: The most deliveries one pass carries (a backlog drains in passes).
MAX_PER_PASS = 5000


@dataclass
class _Outcome:
    sent: list[str]
    skipped: list[str]
    undeliverable: dict[str, str]  # msg_id -> why
    bytes: int = 0


def propagate_user_messages(cfg: PipelineConfig | Pipeline, spec: PropagationSpec,
                            lease: Lease, result: PropagationResult) -> PropagationResult:
    """Carry the user messages addressed to a propagation's destination (one pass).

    Adds what it did to ``result`` (one "batch" when anything was read) and returns it.

    Raises:
        QueueNotFoundError, QueueDroppedError: the destination queue is missing or was
            dropped; the messages were marked UNDELIVERABLE first.
        DestinationUnavailableError: the destination is stopped for enqueue (transient).
        LeaseLostError: the run lost its lease; nothing was committed at the destination.
    """
    from changeflow.messaging.declare import setup

    pipe = resolve(cfg)
    setup(pipe)
    src, dst = pipe.queue(spec.source_queue), pipe.queue(spec.destination_queue)
    src_rt, src_q, dst_rt, dst_q = src.site, src.name, dst.site, dst.name
    address = pipe.cfg.qualify(spec.destination_queue)
    producer = f"propagation:{spec.name}"
    run = f"{producer}:{uuid.uuid4().hex[:12]}"
    limit = min(MAX_PER_PASS, spec.limits.max_messages)
    if not _any_addressed(src_rt.store, src_q, address):
        return result
    rows = _lock(src_rt.store, src_q, address, producer, run, limit)
    if not rows:
        return result
    try:
        outcome = _deliver(dst_rt.store, dst_q, rows, producer, lease,
                           same_store=dst_rt.store.url == src_rt.store.url)
    except QueueNotFoundError as exc:
        n = _undeliverable(src_rt.store, run, f"propagation {spec.name}: {exc}")
        log.error("propagation %s: %d user messages marked UNDELIVERABLE: %s", spec.name, n,
                  exc)
        raise type(exc)(f"{exc} ({n} user messages marked UNDELIVERABLE)") from exc
    except BaseException:
        _unlock(src_rt.store, run)
        raise
    faults.point("propagation.user_messages.after_destination_commit")
    _acknowledge(src_rt.store, run, outcome, spec.name)
    result.batches_read += 1
    result.messages_read += len({r.msg_id for r in rows})
    result.messages_propagated += len(outcome.sent)
    result.bytes_propagated += outcome.bytes
    result.more_pending = result.more_pending or len(rows) >= limit
    log.info("propagation %s: %d user messages to %s (%d already there, %d undeliverable)",
             spec.name, len(outcome.sent), address, len(outcome.skipped),
             len(outcome.undeliverable))
    return result


def _any_addressed(store: StateStore, queue: str, address: str) -> bool:
    """Whether any delivery to this address is in the queue (a read; no write lock)."""
    with store.read() as conn:
        return conn.execute(select(M.c.id).where(M.c.address == address, M.c.queue == queue,
                                                 M.c.address != literal_column("''"))
                            .limit(1)).first() is not None


def _lock(store: StateStore, queue: str, address: str, producer: str, run: str,
          limit: int) -> list[Row[Any]]:
    """Lock this propagation's pending deliveries at the source (releasing a crashed run's)."""
    with store.begin() as conn:
        now = utcnow()
        conn.execute(update(M).where(M.c.lock_txn.like(f"{producer}:%"), M.c.lock_mode == "P")
                     .values(lock_txn=None, lock_mode=None, lock_expires=None))
        locks.promote(conn, now, queue)
        stmt = (select(M).where(M.c.queue == queue, M.c.address == address,
                                M.c.address != literal_column("''"),
                                M.c.state == State.READY.value, M.c.lock_txn.is_(None))
                .order_by(M.c.k1, M.c.k2, M.c.id).limit(limit))
        if store.dialect == "postgresql":
            stmt = stmt.with_for_update(skip_locked=True)
        rows = list(conn.execute(stmt).all())
        if rows:
            conn.execute(update(M).where(M.c.id.in_([r.id for r in rows])).values(
                lock_txn=run, lock_mode="P", lock_expires=now + dt.timedelta(days=1)))
    return rows


def _deliver(store: StateStore, queue: str, rows: list[Row[Any]], producer: str,
             lease: Lease, *, same_store: bool) -> _Outcome:
    """Enqueue the messages at the destination, once each (one transaction)."""
    by_msg: dict[str, list[Row[Any]]] = {}
    for r in rows:
        by_msg.setdefault(r.msg_id, []).append(r)
    out = _Outcome([], [], {})
    with store.begin() as conn:
        lease.check(conn if same_store else None)
        props = D.queue(conn, queue)
        if not props.enqueue_enabled or props.is_exception:
            raise DestinationUnavailableError(
                f"destination queue {queue} is not enabled for enqueue (start it with "
                f"`changeflow aq start-queue {queue}`)")
        seen = _received(conn, producer, list(by_msg))
        now = utcnow()
        groups: dict[str, list[EQ.Pending]] = {}
        for msg_id, deliveries in by_msg.items():
            if msg_id in seen:
                out.skipped.append(msg_id)
                continue
            try:
                pending = _pending(conn, store, props, deliveries, now)
            except ChangeflowError as exc:
                out.undeliverable[msg_id] = f"{type(exc).__name__}: {exc}"
                continue
            groups.setdefault(deliveries[0].txn_id, []).append(pending)
            out.sent.append(msg_id)
            out.bytes += pending.size
        for txn, pendings in groups.items():
            EQ.write(conn, store, pendings, txn, now)
        if out.sent:
            conn.execute(RECEIVED.insert(), [{"producer": producer, "msg_id": m,
                                              "queue": queue, "received_at": now}
                                             for m in out.sent])
    return out


def _received(conn: Connection, producer: str, msg_ids: list[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(msg_ids), 500):
        chunk = msg_ids[i:i + 500]
        found.update(r[0] for r in conn.execute(select(RECEIVED.c.msg_id).where(
            RECEIVED.c.producer == producer, RECEIVED.c.msg_id.in_(chunk))))
    return found


def _pending(conn: Connection, store: StateStore, props: D.QueueProps,
             deliveries: list[Row[Any]], now: dt.datetime) -> EQ.Pending:
    """One source message as a destination enqueue (its id, properties, payload kept)."""
    first = deliveries[0]
    dtype = D.message_type(conn, store.url, props.payload_type)
    if dtype.kind != T.ANYDATA and first.msg_type != dtype.name:
        raise PayloadTypeError(
            f"destination queue {props.name} holds {dtype.name} messages, not "
            f"{first.msg_type}")
    msg = from_row(first, None)
    names = sorted({d.consumer for d in deliveries})
    recipients = tuple(n for n in names if n)
    base = MessageProperties(priority=msg.priority, delay=msg.delay, expiration=msg.expiration,
                             correlation=msg.correlation, sender=msg.sender, msg_id=msg.msg_id,
                             recipients=recipients if recipients and "" not in names else ())
    mtype = D.message_type(conn, store.url, first.msg_type)
    targets = EQ.choose_recipients(conn, store, props, base, mtype, first.payload,
                                   first.payload_raw)
    if recipients and "" in names:  # the remote queue's subscribers and named agents
        targets = tuple(dict.fromkeys([*targets, *((n, "") for n in recipients)]))
    return EQ.Pending(props.name, msg.msg_id, first.msg_type, first.payload,
                      first.payload_raw, first.size, base, targets, msg.enq_time, False)


def _acknowledge(store: StateStore, run: str, outcome: _Outcome, name: str) -> None:
    with store.begin() as conn:
        now = utcnow()
        if outcome.undeliverable:
            for msg_id, why in outcome.undeliverable.items():
                locks.to_exception(conn, and_(M.c.lock_txn == run, M.c.msg_id == msg_id),
                                   State.UNDELIVERABLE, f"propagation {name}: {why}", now)
        locks.finish(conn, run, now, mode="P")


def _undeliverable(store: StateStore, run: str, reason: str) -> int:
    with store.begin() as conn:
        return locks.to_exception(conn, M.c.lock_txn == run, State.UNDELIVERABLE, reason,
                                  utcnow())


def _unlock(store: StateStore, run: str) -> None:
    with store.begin() as conn:
        conn.execute(update(M).where(M.c.lock_txn == run).values(
            lock_txn=None, lock_mode=None, lock_expires=None))


#: What a destination reached another way reports: the :class:`_Outcome` of a delivery.
Outcome = _Outcome


def carry_user_messages(store: StateStore, queue: str, address: str, producer: str,
                        limit: int, name: str, result: PropagationResult,
                        deliver: Any) -> PropagationResult:
    """Carry addressed user messages with a ``deliver(rows) -> Outcome`` of the caller's.

    The same lock / deliver / acknowledge steps as :func:`propagate_user_messages`, for
    a destination that is not a site of this pipeline (HTTP propagation,
    :mod:`changeflow.idap.propagate`): ``deliver`` must make the destination commit
    each message once (recognising a message id it holds already).
    """
    if not _any_addressed(store, queue, address):
        return result
    run = f"{producer}:{uuid.uuid4().hex[:12]}"
    rows = _lock(store, queue, address, producer, run, limit)
    if not rows:
        return result
    try:
        outcome = deliver(rows)
    except QueueNotFoundError as exc:
        n = _undeliverable(store, run, f"propagation {name}: {exc}")
        raise type(exc)(f"{exc} ({n} user messages marked UNDELIVERABLE)") from exc
    except BaseException:
        _unlock(store, run)
        raise
    faults.point("propagation.user_messages.after_destination_commit")
    _acknowledge(store, run, outcome, name)
    result.batches_read += 1
    result.messages_read += len({r.msg_id for r in rows})
    result.messages_propagated += len(outcome.sent)
    result.bytes_propagated += outcome.bytes
    result.more_pending = result.more_pending or len(rows) >= limit
    return result


#: The user messages a local pass carries, an entry point of ``changeflow.propagation``.
CARRIER = Carrier("user_messages", carry=propagate_user_messages)
