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
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Select,
    and_,
    bindparam,
    delete,
    exists,
    literal_column,
    not_,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.elements import ColumnElement

from changeflow.messaging import conditions as C
from changeflow.messaging import dictionary as D
from changeflow.messaging import types as T
from changeflow.messaging.constants import EXCEPTION_STATES, DequeueMode, Navigation, State
from changeflow.messaging.errors import EndOfGroupError
from changeflow.messaging.model import Agent, Message, Selector
from changeflow.state import schema
from changeflow.state import schema_messaging as S

M = S.messages
Q = schema.queues
CHUNK = 64
#: Groups a cursor remembers having left (the oldest are forgotten first).
MAX_LEFT = 1000
#: A messaging client's rule sets: (passes, message to deliver) for a message view.
ClientRules = Callable[[dict[str, Any]], tuple[bool, dict[str, Any]]]


@dataclass
class Cursor:
    """A session's position in one queue for one consumer.

    ``group`` is the transaction group being read; ``left`` the groups NEXT_TRANSACTION
    moved away from since the last FIRST_MESSAGE, so that a REMOVE or LOCKED dequeue (which
    has no key position: what it took is gone or locked) does not come back to what it
    skipped (seed 003: NEXT_TRANSACTION "skips the remainder of the current transaction
    group").
    """

    key: tuple[int, int, int] | None = None
    group: str | None = None
    left: list[str] = field(default_factory=list)

    def reset(self) -> None:
        """Back to the beginning of the queue (FIRST_MESSAGE)."""
        self.key = self.group = None
        self.left.clear()

    def next_transaction(self) -> None:
        """Leave the current group (NEXT_TRANSACTION)."""
        if self.group is not None and self.group not in self.left:
            self.left.append(self.group)
            del self.left[:-MAX_LEFT]


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
    mtype: T.TypeDef | None = None  # to decode the payload after the transaction


def exception_state() -> ColumnElement[bool]:
    """``state IN ('EXPIRED', 'UNDELIVERABLE')`` with literals, not an expanding bind.

    The hot path compiles its statements once and runs them on the driver, where an
    expanding ``IN`` parameter would stay unexpanded (issue 32).
    """
    return M.c.state.in_([literal_column(f"'{s}'") for s in EXCEPTION_STATES])


def _shape(req: Request, cursor: Cursor, postgres: bool) -> tuple[Any, ...]:
    """What the candidate query of a request looks like (its cache key)."""
    sel = req.selector
    corr = ""
    if sel is not None and sel.correlation:
        corr = "like" if C.like_pattern(sel.correlation) else "eq"
    group = ""
    if (req.navigation is not Navigation.FIRST_MESSAGE and cursor.group is not None
            and req.props.message_grouping == "transactional"):
        group = "other" if req.navigation is Navigation.NEXT_TRANSACTION else "same"
    browse = req.mode is DequeueMode.BROWSE
    after = browse and req.navigation is not Navigation.FIRST_MESSAGE and cursor.key is not None
    return (req.props.is_exception, browse, bool(sel and sel.msg_id), corr, group, after,
            postgres and not browse)


@functools.lru_cache(maxsize=256)
def _candidates(exception: bool, browse: bool, by_id: bool, corr: str, group: str,
                after: bool, lock_rows: bool) -> Select[Any]:
    """The candidate query of one shape, with bind parameters (built once)."""
    now: Any = bindparam("p_now")
    txn: Any = bindparam("p_txn")
    state: ColumnElement[bool]
    if exception:
        state = exception_state()
    elif browse:  # a read: delayed messages now due count as READY
        state = or_(M.c.state == State.READY.value,
                    and_(M.c.state == State.WAITING.value, M.c.visible_at <= now))
    else:
        state = M.c.state == State.READY.value
    stmt = select(M).where(M.c.queue == bindparam("p_queue"),
                           M.c.consumer == bindparam("p_consumer"), M.c.address == "", state)
    if not exception:
        stmt = stmt.where(or_(M.c.expire_at.is_(None), M.c.expire_at > now))
    mine = M.c.lock_txn == txn
    if browse:
        stmt = stmt.where(or_(M.c.lock_txn.is_(None), not_(and_(mine, M.c.lock_mode == "R"))))
    elif by_id:
        stmt = stmt.where(or_(M.c.lock_txn.is_(None), and_(mine, M.c.lock_mode == "L")))
    else:
        stmt = stmt.where(M.c.lock_txn.is_(None))
    if by_id:
        stmt = stmt.where(M.c.msg_id == bindparam("p_msg_id"))
    if corr:
        value: Any = bindparam("p_corr")
        stmt = stmt.where(M.c.correlation.is_not(None), M.c.correlation.like(value)
                          if corr == "like" else M.c.correlation == value)
    if group:
        stmt = stmt.where(M.c.txn_id.not_in(bindparam("p_groups", expanding=True))
                          if group == "other" else M.c.txn_id == bindparam("p_group"))
    if after:
        stmt = stmt.where(tuple_(M.c.k1, M.c.k2, M.c.id) > tuple_(
            bindparam("p_k1"), bindparam("p_k2"), bindparam("p_kid")))
    stmt = stmt.order_by(M.c.k1, M.c.k2, M.c.id)
    if lock_rows:
        stmt = stmt.with_for_update(skip_locked=True)
    return stmt


def _base(req: Request, cursor: Cursor, now: dt.datetime,
          postgres: bool) -> tuple[Select[Any], dict[str, Any]]:
    """The candidate query of a request and its parameters."""
    sel = req.selector
    params: dict[str, Any] = {"p_queue": req.props.name, "p_consumer": req.consumer,
                              "p_now": now, "p_txn": req.txn_id}
    if sel is not None and sel.msg_id:
        params["p_msg_id"] = sel.msg_id
    if sel is not None and sel.correlation:
        params["p_corr"] = sel.correlation
    if cursor.group is not None:
        params["p_group"] = cursor.group
        params["p_groups"] = [cursor.group, *cursor.left]
    if cursor.key is not None:
        params.update(zip(("p_k1", "p_k2", "p_kid"), cursor.key, strict=True))
    return _candidates(*_shape(req, cursor, postgres)), params


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
    stmt, params = _base(req, cursor, now, postgres)
    python = req.condition is not None or req.client is not None
    discard: list[int] = []
    if not python:
        row = conn.execute(stmt.limit(1), params).first()
        found = Taken(row) if row is not None else None
    else:
        found = _scan(conn, url, req, stmt, params, discard)
    grouped = req.props.message_grouping == "transactional"
    if (found is None and grouped and cursor.group is not None
            and req.navigation is Navigation.NEXT_MESSAGE):
        raise EndOfGroupError(
            f"fetched all messages of transaction group {cursor.group} in queue "
            f"{req.props.name}; dequeue with navigation NEXT_TRANSACTION for the next group")
    return found, discard


def _scan(conn: Connection, url: str, req: Request, stmt: Select[Any],
          params: dict[str, Any], discard: list[int]) -> Taken | None:
    last: tuple[int, int, int] | None = None
    while True:
        page = stmt if last is None else stmt.where(tuple_(M.c.k1, M.c.k2, M.c.id) > last)
        rows = conn.execute(page.limit(CHUNK), params).all()
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


def to_message(conn: Connection | None, url: str, req: Request, taken: Taken) -> Message:
    """The :class:`Message` a dequeue returns (``conn`` may be None when ``taken.mtype``)."""
    row = taken.row
    payload: Any = None
    if req.mode is not DequeueMode.REMOVE_NODATA:
        if taken.decoded:
            payload = taken.payload
        else:
            mtype = taken.mtype
            if mtype is None:
                assert conn is not None
                mtype = D.message_type(conn, url, row.msg_type)
            payload = mtype.decode(row.payload, row.payload_raw)
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
        enq_time=_aware(row.enq_time), state=_state(row), attempts=row.retry_count,
        original_queue=row.original_queue, reason=row.reason, txn_id=row.txn_id,
        size=row.size)


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _state(row: Row[Any]) -> State:
    """The message's state now: a WAITING row whose delay has passed is READY.

    A BROWSE reads such a row without promoting it (a read changes nothing), so the
    stored state lags until the next housekeeping; the state reported does not.
    """
    state = State(row.state)
    if state is State.WAITING and row.visible_at is not None and \
            _aware(row.visible_at) <= dt.datetime.now(dt.UTC):
        return State.READY
    return state


def advance(cursor: Cursor, req: Request, row: Row[Any]) -> None:
    """Move the session's position past the message it returned."""
    cursor.key = (row.k1, row.k2, row.id)
    if req.props.message_grouping == "transactional":
        cursor.group = row.txn_id


def fast(req: Request) -> bool:
    """Whether a dequeue can take its messages in one statement (no Python filter)."""
    return (req.condition is None and req.client is None
            and req.mode is not DequeueMode.BROWSE)


def take_kind(req: Request) -> str:
    """What taking a message does: lock it (L, R), mark it PROCESSED (P) or delete it (D)."""
    p = req.props
    if req.mode is DequeueMode.LOCKED:
        return "L"
    if not req.immediate:
        return "R"
    return "P" if p.retention_time > 0 and not p.is_exception else "D"


def take_params(req: Request, cursor: Cursor, now: dt.datetime, postgres: bool,
                limit: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The shape of a request's take statement and its parameters."""
    _, params = _base(req, cursor, now, postgres)
    params.update(p_limit=limit, p_expires=req.lock_expires)
    return _shape(req, cursor, postgres), params


def take_first(conn: Connection, req: Request, cursor: Cursor, now: dt.datetime,
               postgres: bool, limit: int = 1) -> list[Row[Any]]:
    """Find and take up to ``limit`` messages in one statement (``... RETURNING``).

    The statement also requires the queue to be active and started for dequeue, so a
    ``stop_queue`` or ``drop_queue`` in another process takes effect at once.
    """
    shape, params = take_params(req, cursor, now, postgres, limit)
    rows = list(conn.execute(take_statement(shape, take_kind(req)), params).all())
    rows.sort(key=lambda r: (r.k1, r.k2, r.id))
    return rows


@functools.lru_cache(maxsize=256)
def take_statement(shape: tuple[Any, ...], kind: str, versioned: bool = False) -> Any:
    """The one-statement take of a request shape (see :func:`take_first`).

    ``versioned``: also require the dictionary version ``:p_dver`` the request was
    checked under (subscription, privileges).
    """
    ids = _candidates(*shape).with_only_columns(M.c.id).limit(bindparam("p_limit"))
    live = exists(select(Q.c.name).where(Q.c.name == bindparam("p_queue"), Q.c.status == "active",
                                         Q.c.dequeue_enabled.is_(True)))
    where = and_(M.c.id.in_(ids), live, D.version_guard()) if versioned \
        else and_(M.c.id.in_(ids), live)
    stmt: Any
    if kind in ("L", "R"):
        stmt = update(M).where(where).values(lock_txn=bindparam("p_txn"), lock_mode=kind,
                                             lock_expires=bindparam("p_expires"))
    elif kind == "P":
        stmt = update(M).where(where).values(state=State.PROCESSED.value,
                                             state_time=bindparam("p_now"))
    else:
        stmt = delete(M).where(where)
    return stmt.returning(*M.c)


@functools.lru_cache(maxsize=256)
def pick_statement(shape: tuple[Any, ...]) -> Any:
    """The rows a take would take, with its guards (queue started, dictionary version).

    For SQLite, inside the write transaction (one writer): selecting the rows and
    deleting them by id is cheaper there than ``DELETE ... RETURNING`` every column.
    """
    live = exists(select(Q.c.name).where(Q.c.name == bindparam("p_queue"), Q.c.status == "active",
                                         Q.c.dequeue_enabled.is_(True)))
    return _candidates(*shape).where(live, D.version_guard()).limit(bindparam("p_limit"))


def drop_statement() -> Any:
    """Delete one taken row by id (after :func:`pick_statement`)."""
    return delete(M).where(M.c.id == bindparam("p_id"))


def peek(conn: Connection, props: D.QueueProps, consumer: str,
         now: dt.datetime) -> tuple[Any, bool]:
    """The queue's row (status, enabled, ``dver``: the dictionary version) and whether a
    message might be available.

    "Might": a READY unlocked message, a delayed one now due, or a lapsed lock (a
    read; the write attempt then decides). The row also tells whether the queue's
    housekeeping has work (``due``: a delayed message of any consumer is due;
    ``locked``: some message is locked): see :func:`peek_statement`.
    """
    row = conn.execute(peek_statement(props.is_exception),
                       {"p_queue": props.name, "p_consumer": consumer, "p_now": now}).first()
    return row, bool(row is not None and row.maybe)


@functools.lru_cache(maxsize=2)
def peek_statement(exception: bool) -> Select[Any]:
    """:func:`peek`'s query, with bind parameters ``p_queue``, ``p_consumer``, ``p_now``.

    Columns: ``status``, ``dequeue_enabled``, ``maybe``, ``due``, ``locked``, ``dver``.
    Built once (and compiled once by :mod:`changeflow.messaging.wire` on the hot path).
    """
    now = bindparam("p_now", type_=M.c.visible_at.type)
    queue = bindparam("p_queue", type_=M.c.queue.type)
    mine = and_(M.c.queue == queue, M.c.consumer == bindparam("p_consumer",
                                                               type_=M.c.consumer.type),
                M.c.address == "")
    if exception:
        cand = and_(mine, exception_state(), M.c.lock_txn.is_(None))
    else:
        cand = and_(mine, or_(
            and_(M.c.state == State.READY.value, M.c.lock_txn.is_(None),
                 or_(M.c.expire_at.is_(None), M.c.expire_at > now)),
            and_(M.c.state == State.WAITING.value, M.c.visible_at <= now),
            and_(M.c.lock_txn.is_not(None), M.c.lock_expires <= now)))
    # literals, so that PostgreSQL's generic plans can use the partial indexes
    due = and_(M.c.state == literal_column("'WAITING'"), M.c.visible_at <= now,
               M.c.queue == queue)
    locked = and_(M.c.lock_txn.is_not(None), M.c.queue == queue)
    return select(Q.c.status, Q.c.dequeue_enabled,
                  exists(select(M.c.id).where(cand)).label("maybe"),
                  exists(select(M.c.id).where(due)).label("due"),
                  exists(select(M.c.id).where(locked)).label("locked"),
                  D.version_value().label("dver")).where(Q.c.name == queue)
