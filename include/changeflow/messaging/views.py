"""Views of Advanced Queuing as plain rows, for the CLI, the Airflow UI plugin and scripts.

Each function takes a site's state store and returns a list of dicts of plain values
(text, numbers, booleans, aware datetimes), like Oracle's dictionary views:
``queues`` (``DBA_QUEUES`` with depth per state), ``queue_tables``, ``subscribers``
(``AQ$<table>_S``), ``messages`` and ``exception_messages`` (``AQ$<table>``),
``types``, ``privileges`` and ``agents``, ``registrations``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import case, func, select

from changeflow.messaging import dictionary as D
from changeflow.messaging import privileges as P
from changeflow.messaging.constants import EXCEPTION_STATES, LIVE_STATES, State
from changeflow.messaging.model import queue_name
from changeflow.state import StateStore, schema
from changeflow.state import schema_messaging as S

M = S.messages
STATES = tuple(s.value for s in State)


def _aware(t: dt.datetime | None) -> dt.datetime | None:
    if t is None:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def queues(store: StateStore, name: str | None = None) -> list[dict[str, Any]]:
    """Every queue (or one) with its properties and its depth per message state.

    Keys: ``queue``, ``queue_table``, ``queue_type``, ``payload_type``, ``sort_order``,
    ``multiple_consumers``, ``secure``, ``enqueue_enabled``, ``dequeue_enabled``,
    ``max_retries``, ``retry_delay``, ``retention_time``, one count per state
    (``READY``, ``WAITING``, ``PROCESSED``, ``EXPIRED``, ``UNDELIVERABLE``),
    ``depth`` (READY + WAITING), ``locked``, ``oldest`` (oldest waiting message),
    ``subscribers``, ``lcr_messages`` (LCRs in Parquet batches), ``buffered`` (buffered
    messages in this process's memory) and ``spilled`` (buffered messages spilled to the
    store; ``V$BUFFERED_QUEUES``).
    """
    from changeflow.messaging import buffered

    in_memory, spilled = buffered.counts(store), buffered.spilled_counts(store)
    with store.read() as conn:
        props = D.all_queues(conn)
        if name is not None:
            props = [p for p in props if p.name == queue_name(name)]
        counts = _counts(conn)
        subs: dict[str, int] = dict(conn.execute(select(S.subscribers.c.queue, func.count())
                                 .group_by(S.subscribers.c.queue)).all())
        B = schema.queue_batches
        lcrs: dict[str, int] = dict(conn.execute(select(B.c.queue, func.sum(B.c.n_messages)).where(
            B.c.path != "", B.c.state == "ready").group_by(B.c.queue)).all())
    out = []
    for p in props:
        c = counts.get(p.name, {})
        row: dict[str, Any] = {
            "queue": p.name, "queue_table": p.queue_table, "queue_type": p.queue_type,
            "payload_type": p.payload_type, "sort_order": p.sort_order,
            "multiple_consumers": p.multiple_consumers, "secure": p.secure,
            "enqueue_enabled": p.enqueue_enabled, "dequeue_enabled": p.dequeue_enabled,
            "max_retries": p.max_retries, "retry_delay": p.retry_delay,
            "retention_time": p.retention_time,
        }
        row.update({s: int(c.get(s, 0)) for s in STATES})
        row["depth"] = row["READY"] + row["WAITING"]
        row["locked"] = int(c.get("locked", 0))
        row["oldest"] = c.get("oldest")
        row["subscribers"] = int(subs.get(p.name, 0))
        row["buffered"], row["spilled"] = in_memory.get(p.name, 0), spilled.get(p.name, 0)
        row["lcr_messages"] = int(lcrs.get(p.name) or 0)
        out.append(row)
    return out


def _counts(conn: Any) -> dict[str, dict[str, Any]]:
    live = M.c.state.in_(LIVE_STATES)
    stmt = select(M.c.queue, M.c.state, func.count(),
                  func.sum(case((M.c.lock_txn.is_not(None), 1), else_=0)),
                  func.min(case((live, M.c.enq_time), else_=None))
                  ).group_by(M.c.queue, M.c.state)
    out: dict[str, dict[str, Any]] = {}
    for queue, state, n, locked, oldest in conn.execute(stmt):
        c = out.setdefault(queue, {"locked": 0, "oldest": None})
        c[state] = int(n)
        c["locked"] += int(locked or 0)
        oldest = _aware(oldest)
        if oldest is not None and (c["oldest"] is None or oldest < c["oldest"]):
            c["oldest"] = oldest
    return out


def queue_tables(store: StateStore) -> list[dict[str, Any]]:
    """Queue tables with their properties and exception queue."""
    t = S.queue_tables
    with store.read() as conn:
        rows = conn.execute(select(t).order_by(t.c.name)).all()
    return [{"queue_table": r.name, "payload_type": r.payload_type, "sort_order": r.sort_order,
             "multiple_consumers": bool(r.multiple_consumers),
             "message_grouping": r.message_grouping, "secure": bool(r.secure),
             "exception_queue": D.exception_queue_name(r.name), "comment": r.comment,
             "created_at": _aware(r.created_at)} for r in rows]


def subscribers(store: StateStore, queue: str | None = None) -> list[dict[str, Any]]:
    """Subscribers (local and remote), with the messages waiting for each."""
    t = S.subscribers
    stmt = select(t).order_by(t.c.queue, t.c.name, t.c.address)
    if queue is not None:
        stmt = stmt.where(t.c.queue == queue_name(queue))
    with store.read() as conn:
        rows = conn.execute(stmt).all()
        pending = {(q, c, a): int(n) for q, c, a, n in conn.execute(
            select(M.c.queue, M.c.consumer, M.c.address, func.count())
            .where(M.c.state.in_(LIVE_STATES))
            .group_by(M.c.queue, M.c.consumer, M.c.address))}
    return [{"queue": r.queue, "name": r.name, "address": r.address, "rule": r.rule,
             "kind": r.kind, "remote": bool(r.address),
             "pending": pending.get((r.queue, r.name, r.address), 0),
             "created_at": _aware(r.created_at)} for r in rows]


def _message_row(r: Any) -> dict[str, Any]:
    return {
        "msg_id": r.msg_id, "queue": r.queue, "consumer": r.consumer, "address": r.address,
        "state": r.state, "priority": r.priority, "correlation": r.correlation,
        "type": r.msg_type, "size": r.size, "enq_time": _aware(r.enq_time),
        "visible_at": _aware(r.visible_at), "expire_at": _aware(r.expire_at),
        "attempts": r.retry_count, "locked": r.lock_txn is not None, "sender": r.sender,
        "recipients": [f"{n}@{a}" if a else n for n, a in json.loads(r.recipients)]
        if r.recipients else [],
        "original_queue": r.original_queue, "reason": r.reason,
        "state_time": _aware(r.state_time),
    }


def messages(store: StateStore, queue: str, *, state: str | None = None,
             consumer: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """A queue's messages (one row per recipient), in the queue's order."""
    stmt = select(M).where(M.c.queue == queue_name(queue))
    if state is not None:
        stmt = stmt.where(M.c.state == State(str(state).upper()).value)
    if consumer is not None:
        stmt = stmt.where(M.c.consumer == consumer.upper())
    stmt = stmt.order_by(M.c.k1, M.c.k2, M.c.id).limit(limit)
    with store.read() as conn:
        return [_message_row(r) for r in conn.execute(stmt)]


def exception_messages(store: StateStore, queue: str, *, limit: int = 100
                       ) -> list[dict[str, Any]]:
    """The EXPIRED and UNDELIVERABLE messages of an exception queue.

    ``queue`` may also be a normal queue: its queue table's exception queue is shown (and
    messages that expired in place, if that exception queue was dropped).
    """
    name = queue_name(queue)
    with store.read() as conn:
        props = D.queue(conn, name)
        targets = {props.name} if props.is_exception else {props.name, props.exception_queue}
        rows = conn.execute(select(M).where(M.c.queue.in_(targets),
                                            M.c.state.in_(EXCEPTION_STATES))
                            .order_by(M.c.state_time, M.c.id).limit(limit)).all()
    return [_message_row(r) for r in rows]


def types(store: StateStore) -> list[dict[str, Any]]:
    """Declared object types (built-in types are listed in :mod:`.types`)."""
    t = S.message_types
    with store.read() as conn:
        rows = conn.execute(select(t).order_by(t.c.name)).all()
    return [{"type": r.name, "kind": r.kind,
             "fields": ", ".join(f"{n} {s}" for n, s in json.loads(r.fields_json)),
             "comment": r.comment} for r in rows]


def privileges(store: StateStore, queue: str | None = None) -> list[dict[str, Any]]:
    """Queue privileges."""
    with store.read() as conn:
        grants = P.grants(conn, queue_name(queue) if queue and queue != "*" else queue)
    return [{"queue": g.queue, "grantee": g.grantee, "privilege": g.privilege,
             "grant_option": g.grant_option, "granted_by": g.granted_by} for g in grants]


def agents(store: StateStore) -> list[dict[str, Any]]:
    """Agents and the users enabled to act as them."""
    with store.read() as conn:
        return [{"agent": a, "user": u} for a, u in P.agent_users(conn)]


def registrations(store: StateStore, queue: str | None = None) -> list[dict[str, Any]]:
    """Notification registrations."""
    from changeflow.messaging.notify import registrations as regs

    return [{"queue": r.queue, "consumer": r.consumer, "notify_url": r.notify_url,
             "user": r.db_user} for r in regs(store, queue_name(queue) if queue else None)]
