"""Logical transactions in the store: locks, commit, rollback, lapsed locks, exceptions.

A session's transaction is not a database connection held open: it is an id
(``host:pid:session:n``) written into the rows it holds. A dequeue in REMOVE mode
*locks* its message (``lock_txn``, mode ``R``, and ``lock_expires``); LOCKED mode
locks it as ``L``; a propagation locks what it sends as ``P``. Other sessions skip
locked rows. Then, each in one database transaction:

* commit: ``R`` rows are removed (or kept as PROCESSED for the queue's
  ``retention_time``), ``L`` rows are unlocked;
* rollback: ``R`` rows come back with ``retry_count + 1`` (WAITING for
  ``retry_delay`` when the queue has one), and those past ``max_retries`` move to the
  exception queue as EXPIRED; ``L`` and ``P`` rows are unlocked.

A lock that nobody renews lapses at ``lock_expires`` (a killed consumer, an IDAP
session idle past its timeout), and so does the lock of a process on this host that
no longer exists: :func:`reclaim` rolls such transactions back, as if their session
had called rollback.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
from collections.abc import Iterable
from typing import Any

from sqlalchemy import and_, delete, literal_column, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from changeflow.messaging import dictionary as D
from changeflow.messaging.constants import LIVE_STATES, State
from changeflow.state import insert_if_absent, schema
from changeflow.state import schema_messaging as S

log = logging.getLogger(__name__)
M = S.messages
Q = schema.queues
_UNLOCK = {"lock_txn": None, "lock_mode": None, "lock_expires": None}


def txn_prefix(session_id: str) -> str:
    """The prefix of a session's transaction ids: this host and process, and the session."""
    return f"{socket.gethostname()}:{os.getpid()}:{session_id}"


def process_alive(txn_id: str) -> bool | None:
    """Whether the process of a transaction id is alive (None: another host or unknown).

    >>> process_alive(txn_prefix("s1") + ":1")
    True
    """
    parts = txn_id.split(":")
    if len(parts) < 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return None
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def renew(conn: Connection, txn_id: str, expires: dt.datetime) -> int:
    """Push back the lapse time of every lock a transaction holds."""
    done = conn.execute(update(M).where(M.c.lock_txn == txn_id).values(lock_expires=expires))
    return int(done.rowcount or 0)


def finish(conn: Connection, txn_id: str, now: dt.datetime, *,
           mode: str = "R") -> dict[str, int]:
    """Commit a transaction's dequeues (or a propagation's sends, ``mode="P"``).

    Rows locked in ``mode`` are consumed (deleted, or PROCESSED while the queue retains
    them); the transaction's other locks are released. Returns the counts by mode
    (``{mode: consumed, "L": unlocked}``).
    """
    removed = 0
    queues = [r[0] for r in conn.execute(select(M.c.queue).where(
        M.c.lock_txn == txn_id, M.c.lock_mode == mode).distinct())]
    for queue in queues:
        props = D.queue(conn, queue, allow_dropped=True)
        mine = and_(M.c.lock_txn == txn_id, M.c.lock_mode == mode, M.c.queue == queue)
        if props.retention_time > 0:
            done = conn.execute(update(M).where(mine).values(
                state=State.PROCESSED.value, state_time=now, **_UNLOCK))
        else:
            done = conn.execute(delete(M).where(mine))
        removed += int(done.rowcount or 0)
    unlocked = conn.execute(update(M).where(M.c.lock_txn == txn_id).values(**_UNLOCK))
    return {mode: removed, "L": int(unlocked.rowcount or 0)}


def release(conn: Connection, where: ColumnElement[bool], now: dt.datetime) -> dict[str, int]:
    """Roll back the locks ``where`` selects: R rows come back, retried; others unlock.

    Returns counts: ``retried`` (R rows back in their queue), ``exceeded`` (moved to
    the exception queue past ``max_retries``) and ``unlocked`` (L and P rows).
    """
    out = {"retried": 0, "exceeded": 0, "unlocked": 0}
    removes = and_(where, M.c.lock_mode == "R")
    queues = [r[0] for r in conn.execute(select(M.c.queue).where(removes).distinct())]
    for queue in queues:
        props = D.queue(conn, queue, allow_dropped=True)
        ids = [r[0] for r in conn.execute(select(M.c.id).where(removes, M.c.queue == queue))]
        values: dict[str, Any] = {"retry_count": M.c.retry_count + 1, **_UNLOCK}
        if props.retry_delay > 0:
            values.update(state=State.WAITING.value, state_time=now,
                          visible_at=now + dt.timedelta(seconds=props.retry_delay))
        conn.execute(update(M).where(M.c.id.in_(ids)).values(**values))
        out["retried"] += len(ids)
        over = and_(M.c.id.in_(ids), M.c.retry_count > props.max_retries)
        out["exceeded"] += to_exception(
            conn, over, State.EXPIRED, f"dequeued and rolled back more than max_retries "
            f"({props.max_retries}) times", now)
    done = conn.execute(update(M).where(where, M.c.lock_txn.is_not(None)).values(**_UNLOCK))
    out["unlocked"] = int(done.rowcount or 0)
    return out


def lapsed(conn: Connection, now: dt.datetime, queue: str | None = None) -> list[str]:
    """Transactions holding locks that lapsed, or whose local process is gone."""
    held = select(M.c.lock_txn, M.c.lock_expires).where(M.c.lock_txn.is_not(None))
    if queue is not None:
        held = held.where(M.c.queue == queue)
    out: dict[str, None] = {}
    for txn, expires in conn.execute(held.distinct()):
        if expires is not None and _aware(expires) <= now or process_alive(txn) is False:
            out[txn] = None
    return list(out)


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def reclaim(conn: Connection, now: dt.datetime, queue: str | None = None) -> dict[str, int]:
    """Roll back every lapsed transaction (of one queue, or all)."""
    txns = lapsed(conn, now, queue)
    if not txns:
        return {"retried": 0, "exceeded": 0, "unlocked": 0, "transactions": 0}
    log.warning("rolling back %d lapsed messaging transactions: %s", len(txns),
                ", ".join(txns[:5]))
    out = release(conn, M.c.lock_txn.in_(txns), now)
    out["transactions"] = len(txns)
    return out


def promote(conn: Connection, now: dt.datetime, queue: str | None = None) -> int:
    """WAITING messages whose delay has passed become READY."""
    # a literal, so that PostgreSQL's generic plans can use the partial index too
    where = and_(M.c.state == literal_column("'WAITING'"), M.c.visible_at <= now)
    if queue is not None:
        where = and_(where, M.c.queue == queue)
    done = conn.execute(update(M).where(where).values(state=State.READY.value, state_time=now))
    return int(done.rowcount or 0)


def expire(conn: Connection, now: dt.datetime, queue: str | None = None) -> int:
    """Move unlocked messages past their expiration to the exception queue (EXPIRED)."""
    where = and_(M.c.state.in_(LIVE_STATES), M.c.expire_at.is_not(None),
                 M.c.expire_at <= now, M.c.lock_txn.is_(None))
    if queue is not None:
        where = and_(where, M.c.queue == queue)
    return to_exception(conn, where, State.EXPIRED, "expired", now)


def to_exception(conn: Connection, where: ColumnElement[bool], state: State, reason: str,
                 now: dt.datetime) -> int:
    """Move messages to their exception queue with ``state`` and ``reason``.

    The message's own ``exception_queue`` is used when it exists; otherwise the queue
    table's ``aq$_<table>_e`` (seed 003), created when missing. Returns rows moved.
    """
    rows = conn.execute(select(M.c.id, M.c.queue, M.c.exception_queue).where(where)).all()
    targets: dict[tuple[str, str | None], list[int]] = {}
    cache: dict[tuple[str, str | None], str] = {}
    for rid, queue, own in rows:
        key = (queue, own)
        if key not in cache:
            cache[key] = _target(conn, queue, own)
        # seed 003: a message in the default exception queue reports exception_queue NULL
        kept = own if cache[key] == own else None
        targets.setdefault((cache[key], kept), []).append(rid)
    for (target, kept), ids in targets.items():
        for chunk in _chunks(ids, 500):
            conn.execute(update(M).where(M.c.id.in_(chunk)).values(
                queue=target, original_queue=M.c.queue, state=state.value, reason=reason,
                exception_queue=kept, state_time=now, **_UNLOCK))
    return len(rows)


def _target(conn: Connection, queue: str, own: str | None) -> str:
    if own:
        row = conn.execute(select(Q.c.status, Q.c.queue_type).where(Q.c.name == own)).first()
        if row is not None and row.status != "dropped" and row.queue_type == "exception":
            return own
        log.warning("exception queue %s of a message in %s does not exist (or is no "
                    "exception queue); using the queue table's default", own, queue)
    props = D.queue(conn, queue, allow_dropped=True)
    if props.is_exception:
        return props.name
    row = conn.execute(select(Q.c.status).where(Q.c.name == props.exception_queue)).first()
    if row is not None and row.status == "dropped":  # stays dropped: keep it where it is
        log.warning("exception queue %s was dropped; expired messages stay in %s",
                    props.exception_queue, queue)
        return queue
    return ensure_exception_queue(conn, props)


def ensure_exception_queue(conn: Connection, props: D.QueueProps) -> str:
    """The queue table's exception queue, created in the catalog when missing."""
    name = props.exception_queue
    row = conn.execute(select(Q.c.status).where(Q.c.name == name)).first()
    if row is None:  # several processes may expire messages of the queue table at once
        base = props.storage_path.rstrip("/").rsplit("/", 1)[0] if "/" in props.storage_path \
            else ""
        insert_if_absent(conn, Q, dict(
            name=name, queue_table=props.queue_table, sort_order=props.sort_order,
            multiple_consumers=props.multiple_consumers,
            storage_path=f"{base}/{name.split('.', 1)[1]}" if base else name.replace(".", "/"),
            created_at=schema.utcnow(), queue_type="exception",
            payload_type=props.payload_type, max_retries=0, retry_delay=0.0,
            retention_time=0.0, secure=props.secure, enqueue_enabled=False,
            dequeue_enabled=False, status="active",
            comment=f"exception queue of queue table {props.queue_table}"))
    return name


def _chunks(items: list[int], n: int) -> Iterable[list[int]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def held_by(txn_id: str) -> ColumnElement[bool]:
    """The rows a transaction holds."""
    return M.c.lock_txn == txn_id
