"""Dequeue: finding the message a consumer gets, and taking it.

One attempt runs in one database transaction (a read transaction for BROWSE). The
candidates are the consumer's rows of the queue in the sort order of the queue table
(``k1``: priority or 0, ``k2``: enqueue time or commit sequence, then ``id``),
READY, not expired, not locked by another transaction; PostgreSQL reads them with
``FOR UPDATE SKIP LOCKED``, so two consumers never take the same row, and SQLite
serialises writers. Selectors by correlation and message id are SQL; a condition,
and a messaging client's rule sets, are evaluated in Python on each candidate, in
order, until one is TRUE.

Navigation (seed 003): FIRST_MESSAGE starts from the beginning; NEXT_MESSAGE goes on
from the session's position: BROWSE continues after the last message it returned,
REMOVE and LOCKED take the first message still available (what they took is gone or
locked). On a queue table with transactional message grouping, NEXT_MESSAGE stays in
the current transaction group (raising :class:`EndOfGroupError` when it is done) and
NEXT_TRANSACTION moves to the next group.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, delete, not_, or_, select, tuple_, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.elements import ColumnElement

from changeflow.messaging import conditions as C
from changeflow.messaging import dictionary as D
from changeflow.messaging import types as T
from changeflow.messaging.constants import EXCEPTION_STATES, DequeueMode, Navigation, State
from changeflow.messaging.errors import EndOfGroupError
from changeflow.messaging.model import Agent, Message, Selector
from changeflow.state import schema_messaging as S

M = S.messages
CHUNK = 64
#: A messaging client's rule sets: (passes, message to deliver) for a message view.
ClientRules = Callable[[dict[str, Any]], tuple[bool, dict[str, Any]]]


@dataclass
class Cursor:
    """A session's position in one queue for one consumer."""

    key: tuple[int, int, int] | None = None
    group: str | None = None


@dataclass(frozen=True)
class Request:
    """What one dequeue asks for."""

    props: D.QueueProps
    consumer: str
    mode: DequeueMode
    navigation: Navigation
    selector: Selector | None
    condition: C.Condition | None
    txn_id: str
    immediate: bool  # consume now (IMMEDIATE visibility, or commit in the same call)
    lock_expires: dt.datetime
    client: ClientRules | None = None


@dataclass
class Taken:
    """The row a dequeue returns, and the client-migrated LCR payload if any."""

    row: Row[Any]
    payload: Any = None
    decoded: bool = False


def _base(req: Request, cursor: Cursor, now: dt.datetime, postgres: bool) -> Select[Any]:
    p = req.props
    state: ColumnElement[bool]
    if p.is_exception:
        state = M.c.state.in_(EXCEPTION_STATES)
    elif req.mode is DequeueMode.BROWSE:  # a read: delayed messages now due count as READY
        state = or_(M.c.state == State.READY.value,
                    and_(M.c.state == State.WAITING.value, M.c.visible_at <= now))
    else:
        state = M.c.state == State.READY.value
    stmt = select(M).where(M.c.queue == p.name, M.c.consumer == req.consumer,
                           M.c.address == "", state)
    if not p.is_exception:
        stmt = stmt.where(or_(M.c.expire_at.is_(None), M.c.expire_at > now))
    mine = M.c.lock_txn == req.txn_id
    if req.mode is DequeueMode.BROWSE:
        stmt = stmt.where(or_(M.c.lock_txn.is_(None), not_(and_(mine, M.c.lock_mode == "R"))))
    elif req.selector is not None and req.selector.msg_id:
        stmt = stmt.where(or_(M.c.lock_txn.is_(None), and_(mine, M.c.lock_mode == "L")))
    else:
        stmt = stmt.where(M.c.lock_txn.is_(None))
    sel = req.selector
    if sel is not None and sel.msg_id:
        stmt = stmt.where(M.c.msg_id == sel.msg_id)
    if sel is not None and sel.correlation:
        stmt = stmt.where(M.c.correlation.like(sel.correlation)
                          if C.like_pattern(sel.correlation)
                          else M.c.correlation == sel.correlation)
    stmt = _navigate(stmt, req, cursor)
    stmt = stmt.order_by(M.c.k1, M.c.k2, M.c.id)
    if postgres and req.mode is not DequeueMode.BROWSE:
        stmt = stmt.with_for_update(skip_locked=True)
    return stmt


def _navigate(stmt: Select[Any], req: Request, cursor: Cursor) -> Select[Any]:
    nav, grouped = req.navigation, req.props.message_grouping == "transactional"
    browse = req.mode is DequeueMode.BROWSE
    if nav is Navigation.FIRST_MESSAGE:
        return stmt
    if grouped and cursor.group is not None:
        if nav is Navigation.NEXT_TRANSACTION:
            stmt = stmt.where(M.c.txn_id != cursor.group)
        else:
            stmt = stmt.where(M.c.txn_id == cursor.group)
    if browse and cursor.key is not None:
        stmt = stmt.where(tuple_(M.c.k1, M.c.k2, M.c.id) > tuple_(*cursor.key))
    return stmt


def message_view(row: Row[Any], mtype: T.TypeDef, payload: Any) -> dict[str, Any]:
    """A stored message as the rules engine reads it (user message or row LCR)."""
    if mtype.kind == T.LCR:
        return T.lcr_message(payload, mtype.name)
    return C.message_view(mtype.rule_fields(payload), row_props(row), mtype.name)


def row_props(row: Row[Any]) -> dict[str, Any]:
    """A row's message properties by the pseudo-field names conditions use."""
    sender = Agent.parse(row.sender).name if row.sender else None
    return {"AQ$PRIORITY": row.priority, "AQ$CORRID": row.correlation, "AQ$MSGID": row.msg_id,
            "AQ$ENQ_TIME": _naive(row.enq_time), "AQ$DELAY": row.delay,
            "AQ$EXPIRATION": row.expiration, "AQ$RETRY_COUNT": row.retry_count,
            "AQ$SENDER": sender, "AQ$MSG_TYPE": row.msg_type}


def _naive(t: dt.datetime) -> dt.datetime:
    return t.astimezone(dt.UTC).replace(tzinfo=None) if t.tzinfo else t


def _filtered(conn: Connection, url: str, req: Request, row: Row[Any],
              discard: list[int]) -> Taken | None:
    mtype = D.message_type(conn, url, row.msg_type)
    payload = mtype.decode(row.payload, row.payload_raw)
    view = message_view(row, mtype, payload)
    if req.condition is not None and view.get("kind") == "USER":
        if not C.matches(req.condition, view["payload"], {}, mtype.name):
            return None
    elif req.condition is not None:
        return None
    if req.client is not None:
        passes, migrated = req.client(view)
        if not passes:
            discard.append(row.id)
            return None
        if mtype.kind == T.LCR:
            payload = {k: v for k, v in migrated.items() if k not in ("kind", "msg_type_name")}
    return Taken(row, payload, decoded=True)


def find(conn: Connection, url: str, req: Request, cursor: Cursor, now: dt.datetime,
         postgres: bool) -> tuple[Taken | None, list[int]]:
    """The message to return, and the rows a messaging client's rules discarded.

    Raises:
        EndOfGroupError: NEXT_MESSAGE found nothing more in the current group.
    """
    stmt = _base(req, cursor, now, postgres)
    python = req.condition is not None or req.client is not None
    discard: list[int] = []
    if not python:
        row = conn.execute(stmt.limit(1)).first()
        found = Taken(row) if row is not None else None
    else:
        found = _scan(conn, url, req, stmt, discard)
    grouped = req.props.message_grouping == "transactional"
    if (found is None and grouped and cursor.group is not None
            and req.navigation is Navigation.NEXT_MESSAGE):
        raise EndOfGroupError(
            f"fetched all messages of transaction group {cursor.group} in queue "
            f"{req.props.name}; dequeue with navigation NEXT_TRANSACTION for the next group")
    return found, discard


def _scan(conn: Connection, url: str, req: Request, stmt: Select[Any],
          discard: list[int]) -> Taken | None:
    last: tuple[int, int, int] | None = None
    while True:
        page = stmt if last is None else stmt.where(tuple_(M.c.k1, M.c.k2, M.c.id) > last)
        rows = conn.execute(page.limit(CHUNK)).all()
        for row in rows:
            taken = _filtered(conn, url, req, row, discard)
            if taken is not None:
                return taken
        if len(rows) < CHUNK:
            return None
        last = (rows[-1].k1, rows[-1].k2, rows[-1].id)


def take_discards(conn: Connection, discard: list[int]) -> None:
    """Remove the rows a messaging client's rule sets discarded (they are consumed)."""
    if discard:
        conn.execute(delete(M).where(M.c.id.in_(discard)))


def take(conn: Connection, req: Request, taken: Taken, discard: list[int],
         now: dt.datetime) -> None:
    """Consume or lock the found row (nothing for BROWSE); drop discarded rows."""
    if req.mode is not DequeueMode.BROWSE:
        take_discards(conn, discard)
    rid = taken.row.id
    if req.mode is DequeueMode.BROWSE:
        return
    if req.mode is DequeueMode.LOCKED:
        conn.execute(update(M).where(M.c.id == rid).values(
            lock_txn=req.txn_id, lock_mode="L", lock_expires=req.lock_expires))
    elif not req.immediate:
        conn.execute(update(M).where(M.c.id == rid).values(
            lock_txn=req.txn_id, lock_mode="R", lock_expires=req.lock_expires))
    elif req.props.retention_time > 0 and not req.props.is_exception:
        conn.execute(update(M).where(M.c.id == rid).values(
            state=State.PROCESSED.value, state_time=now, lock_txn=None, lock_mode=None,
            lock_expires=None))
    else:
        conn.execute(delete(M).where(M.c.id == rid))


def to_message(conn: Connection, url: str, req: Request, taken: Taken) -> Message:
    """The :class:`Message` a dequeue returns."""
    row = taken.row
    payload: Any = None
    if req.mode is not DequeueMode.REMOVE_NODATA:
        if taken.decoded:
            payload = taken.payload
        else:
            payload = D.message_type(conn, url, row.msg_type).decode(row.payload,
                                                                     row.payload_raw)
    return from_row(row, payload)


def from_row(row: Row[Any], payload: Any) -> Message:
    """A message built from its stored row and decoded payload."""
    recipients = tuple(Agent(n, a) for n, a in json.loads(row.recipients)) \
        if row.recipients else ()
    return Message(
        msg_id=row.msg_id, queue=row.queue, consumer=row.consumer, type_name=row.msg_type,
        payload=payload, priority=row.priority, delay=row.delay, expiration=row.expiration,
        correlation=row.correlation, sender=Agent.parse(row.sender) if row.sender else None,
        recipients=recipients, exception_queue=row.exception_queue,
        enq_time=_aware(row.enq_time), state=State(row.state), attempts=row.retry_count,
        original_queue=row.original_queue, reason=row.reason, txn_id=row.txn_id,
        size=row.size)


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def advance(cursor: Cursor, req: Request, row: Row[Any]) -> None:
    """Move the session's position past the message it returned."""
    cursor.key = (row.k1, row.k2, row.id)
    if req.props.message_grouping == "transactional":
        cursor.group = row.txn_id
