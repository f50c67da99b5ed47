"""How a session dequeues: checks, the waiting loop, and each attempt.

The first attempt of a ``dequeue`` call checks the request (queue, consumer,
subscription, privilege, condition) and remembers the verdict for a second, so a
consumer calling in a loop pays for it once a second, not once a message. Each
attempt is one write transaction; without a Python-side filter it is one statement
(``UPDATE/DELETE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``) that
also requires the queue to be started, so ``stop_queue`` still takes effect at once.

A waiting dequeue polls with a *read* first (is anything available?), with a pause
that grows from 2 ms to ``poll_max``; only then does it take the write lock, so idle
consumers never block producers. A commit in the same process wakes waiters at once;
on SQLite, a commit in another process too, within 2 ms (the file's ``data_version``,
:class:`changeflow.messaging.notify.FileWatch`). The housekeeping (delayed messages due,
lapsed locks) takes the write lock only when a read finds it has work.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.engine import Connection, Row

from changeflow.errors import QueueDroppedError, QueueNotFoundError
from changeflow.messaging import cache, locks, notify, privileges, wire
from changeflow.messaging import conditions as C
from changeflow.messaging import dequeue as DQ
from changeflow.messaging import dictionary as D
from changeflow.messaging import types as T
from changeflow.messaging.constants import DequeueMode, Navigation
from changeflow.messaging.errors import (
    CapturedMessageError,
    MessagePropertyError,
    NotSubscribedError,
    QueueStoppedError,
)
from changeflow.messaging.model import Message, Selector
from changeflow.state import schema, utcnow
from changeflow.state import schema_messaging as S

if TYPE_CHECKING:
    from changeflow.messaging.session import Session
    from changeflow.state import StateStore

#: Seconds a checked request (and the queue's properties) is trusted before re-checking.
CHECK_TTL = 1.0


@dataclass(frozen=True)
class Spec:
    """One dequeue call's options."""

    queue: str
    consumer: str
    mode: DequeueMode
    navigation: Navigation
    selector: Selector | None
    immediate: bool


@dataclass
class _Checked:
    props: D.QueueProps
    client: DQ.ClientRules | None
    condition: C.Condition | None
    at: float
    generation: int
    version: int  # the dictionary version it was checked under


class _Stale(Exception):
    """The dictionary version moved since the request was checked."""


_STALE = "stale"


class Receiver:
    """The dequeue side of one session."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.checked: dict[Spec, _Checked] = {}
        self.cursors: dict[tuple[str, str], DQ.Cursor] = {}
        self.housekept: dict[str, float] = {}
        self.watch: notify.FileWatch | None = None

    # -- the loop ------------------------------------------------------------------------
    def receive(self, spec: Spec, seconds: float | None, limit: int = 1) -> list[Message]:
        """Up to ``limit`` messages, waiting up to ``seconds`` (None: forever) for the first."""
        url = self.s.store.url
        deadline = None if seconds is None else time.monotonic() + seconds
        pause, first = 0.002, True
        watch = self._watch() if seconds is None or seconds > 0 else None
        while True:
            seen = notify.generation(url, spec.queue)
            mark = watch.mark() if watch is not None else None
            msgs = self.attempt(spec, first, limit)
            if msgs:
                return msgs
            first = False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return []
            notify.wait(url, spec.queue, seen, pause if left is None else min(pause, left),
                        watch, mark)
            pause = min(pause * 2, self.s.settings.poll_max)

    def _watch(self) -> notify.FileWatch | None:
        """The session's watch of its SQLite file (None on PostgreSQL or in memory)."""
        if self.watch is None and not self.s.postgres:
            path = self.s.store.engine.url.database
            if path and path != ":memory:" and not path.startswith("file:"):
                self.watch = notify.FileWatch(path)
        return self.watch

    def close(self) -> None:
        """Close the file watch, if one was opened."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def attempt(self, spec: Spec, first: bool, limit: int) -> list[Message]:
        """One attempt (a read first when polling, then one write transaction).

        The common request (no Python-side filter, nothing due for housekeeping) is
        one statement on the driver's connection (:meth:`_fast`); when that takes
        nothing, the full attempt runs (housekeeping, group ends, explanations).
        """
        checked = self.check(spec, fresh=first)
        if spec.mode is DequeueMode.BROWSE:
            return self._browse(spec, checked, limit)
        if not first:
            available = self._available(spec, checked)
            if not available:
                return []
            if available == _STALE:
                checked = self._recheck(spec)
        fast = self._fast_ok(spec, checked)
        if fast and self._housekeeping_due(spec.queue) and self._housework(spec, checked):
            fast = False
        if fast:
            msgs = self._fast(spec, checked, limit)
            if msgs:
                return msgs
            # the full attempt could take nothing more unless the housekeeping has work
            if not self._force_due(spec.queue) or not self._housework(spec, checked):
                if not first or self._explain_empty(spec, checked, first) != _STALE:
                    return []
                checked = self._recheck(spec)
        try:
            return self._attempt(spec, checked, first, limit, verify=True)
        except _Stale:
            return self._attempt(spec, self._recheck(spec), first, limit, verify=False)

    def _recheck(self, spec: Spec) -> _Checked:
        self.checked.pop(spec, None)
        return self.check(spec, fresh=True)

    def _force_due(self, queue: str) -> bool:
        """Whether an empty attempt would run the housekeeping now (see :meth:`_housekeep`)."""
        last = self.housekept.get(queue, 0.0)
        return time.monotonic() - last >= self.s.settings.housekeeping / 4

    def _housekeeping_due(self, queue: str) -> bool:
        """Whether an attempt would run the (throttled) housekeeping now."""
        return time.monotonic() - self.housekept.get(queue, 0.0) >= max(
            self.s.settings.housekeeping, 1.0)

    def _housework(self, spec: Spec, checked: _Checked) -> bool:
        """A read: whether the housekeeping has work (a delayed message due, a lock held).

        When it has none, the housekeeping counts as done now: an empty queue is never
        written to (no write lock, no commit) just to find that out.
        """
        row = self._peek(spec, checked)
        _raise_unless_started(spec.queue, row)
        if row.due or row.locked:
            return True
        self.housekept[spec.queue] = time.monotonic()
        return False

    def _peek(self, spec: Spec, checked: _Checked) -> Any:
        """:func:`changeflow.messaging.dequeue.peek`'s row, one precompiled read."""
        exception = checked.props.is_exception
        stmt = wire.compiled(self.s.store.engine, f"aq:peek:{exception}",
                             lambda: DQ.peek_statement(exception),
                             list(DQ.peek_statement(exception).selected_columns))
        rows = stmt.read(self.s.store, {"p_queue": spec.queue, "p_consumer": spec.consumer,
                                        "p_now": utcnow()})
        return rows[0] if rows else None

    def _fast_ok(self, spec: Spec, checked: _Checked) -> bool:
        return (checked.condition is None and checked.client is None
                and checked.props.message_grouping != "transactional"
                and not self.s.renewal_due())

    def _fast(self, spec: Spec, checked: _Checked, limit: int) -> list[Message]:
        """Take up to ``limit`` messages in one statement guarded by the checked version."""
        store = self.s.store
        now = utcnow()
        req = self._request(spec, checked, now)
        cursor = self._cursor(spec)
        shape, params = DQ.take_params(req, cursor, now, self.s.postgres, limit)
        kind = DQ.take_kind(req)
        params["p_dver"] = checked.version
        if kind == "D" and not self.s.postgres:
            rows = _pick_and_drop(store, shape, params)
        else:
            stmt = wire.compiled(store.engine, f"aq:take:{shape}:{kind}",
                                 lambda: DQ.take_statement(shape, kind, versioned=True),
                                 list(S.messages.c))
            rows = stmt.run(store, params)
        if not rows:
            return []
        if len(rows) > 1:
            rows.sort(key=lambda r: (r.k1, r.k2, r.id))
        for r in rows:
            self._track(req, r)
        DQ.advance(cursor, req, rows[-1])
        with cache.LazyRead(store) as conn:
            return [DQ.to_message(None, store.url, req, DQ.Taken(
                r, mtype=D.message_type(conn, store.url, r.msg_type)))  # type: ignore[arg-type]
                for r in rows]

    def _attempt(self, spec: Spec, checked: _Checked, first: bool, limit: int, *,
                 verify: bool) -> list[Message]:
        with self.s.store.begin() as conn:
            if verify and D.version(conn) != checked.version:
                raise _Stale
            now = utcnow()
            self.s.renew(conn, now)
            req = self._request(spec, checked, now)
            cursor = self._cursor(spec)
            self._housekeep(conn, spec.queue, now, force=False)
            taken = self._take(conn, req, cursor, now, limit)
            if not taken and self._housekeep(conn, spec.queue, now, force=True):
                taken = self._take(conn, req, cursor, now, limit)
        if not taken:
            self._explain_empty(spec, checked, first)
        # decoded after the commit: the write lock is held for the statements only
        return [DQ.to_message(None, self.s.store.url, req, t) for t in taken]

    # -- checks ----------------------------------------------------------------------------
    def check(self, spec: Spec, *, fresh: bool) -> _Checked:
        """The checked request, re-checked when older than :data:`CHECK_TTL` seconds."""
        found = self.checked.get(spec)
        if (found is not None and time.monotonic() - found.at < CHECK_TTL
                and found.generation == D.generation()):
            return found
        with self.s.store.read() as conn:
            version = D.version(conn)
            props = D.queue(conn, spec.queue)
            if not props.dequeue_enabled:
                raise _stopped(props.name)
            if (spec.navigation is Navigation.NEXT_TRANSACTION
                    and props.message_grouping != "transactional"):
                raise MessagePropertyError(
                    f"navigation NEXT_TRANSACTION can only be used if message grouping is "
                    f"enabled: queue table {props.queue_table} of {props.name} has "
                    "message_grouping none (seed 003); use NEXT_MESSAGE or FIRST_MESSAGE")
            client = self._consumer(conn, props, spec.consumer)
            privileges.check(conn, props, self.s.user, "DEQUEUE",
                             spec.consumer if props.multiple_consumers else None)
            condition = None
            if spec.selector is not None and spec.selector.condition:
                qtype = D.message_type(conn, self.s.store.url, props.payload_type)
                fields = qtype.field_names if qtype.kind == T.OBJECT else None
                condition = C.compile_condition(spec.selector.condition, fields)
        found = _Checked(props, client, condition, time.monotonic(), D.generation(), version)
        self.checked[spec] = found
        return found

    def _consumer(self, conn: Connection, props: D.QueueProps,
                  consumer: str) -> DQ.ClientRules | None:
        if not props.multiple_consumers:
            if consumer:
                raise MessagePropertyError(f"queue {props.name} has a single consumer: "
                                           "dequeue without a consumer name")
            return None
        if not consumer:
            raise MessagePropertyError(f"queue {props.name} has multiple consumers: name the "
                                       "consumer (consumer=...)")
        if props.is_exception:
            return None
        subs = D.subscribers(conn, props.name)
        mine = [s for s in subs if s.name == consumer and not s.address]
        if mine:
            return self.s.client_rules(consumer) if mine[0].kind == "messaging_client" else None
        M = S.messages
        addressed = conn.execute(select(M.c.id).where(
            M.c.queue == props.name, M.c.consumer == consumer, M.c.address == "").limit(1))
        if addressed.first() is None:
            names = ", ".join(s.name for s in subs if not s.address)
            raise NotSubscribedError(
                f"{consumer} is not a subscriber of queue {props.name} (subscribers: "
                f"{names or 'none'}) and no message is addressed to it")
        return None

    def _request(self, spec: Spec, checked: _Checked, now: dt.datetime) -> DQ.Request:
        return DQ.Request(checked.props, spec.consumer, spec.mode, spec.navigation,
                          spec.selector, checked.condition, self.s.transaction_id,
                          spec.immediate, self.s.lock_expiry(now), checked.client)

    def _cursor(self, spec: Spec) -> DQ.Cursor:
        cursor = self.cursors.setdefault((spec.queue, spec.consumer), DQ.Cursor())
        if spec.navigation is Navigation.FIRST_MESSAGE:
            cursor.reset()
        elif spec.navigation is Navigation.NEXT_TRANSACTION:
            cursor.next_transaction()
        return cursor

    # -- attempts ---------------------------------------------------------------------------
    def _take(self, conn: Connection, req: DQ.Request, cursor: DQ.Cursor, now: dt.datetime,
              limit: int) -> list[DQ.Taken]:
        url, postgres = self.s.store.url, self.s.postgres
        if DQ.fast(req):
            rows = DQ.take_first(conn, req, cursor, now, postgres, limit)
            out = [DQ.Taken(r, mtype=D.message_type(conn, url, r.msg_type)) for r in rows]
            for r in rows:
                self._track(req, r)
            if rows:
                DQ.advance(cursor, req, rows[-1])
            elif (req.props.message_grouping == "transactional" and cursor.group is not None
                  and req.navigation is Navigation.NEXT_MESSAGE):
                DQ.find(conn, url, req, cursor, now, postgres)  # raises EndOfGroupError
            return out
        found: list[DQ.Taken] = []
        while len(found) < limit:
            taken, discard = DQ.find(conn, url, req, cursor, now, postgres)
            if taken is None:
                DQ.take_discards(conn, discard)
                break
            DQ.take(conn, req, taken, discard, now)
            if not taken.decoded:
                taken.mtype = D.message_type(conn, url, taken.row.msg_type)
            found.append(taken)
            DQ.advance(cursor, req, taken.row)
            self._track(req, taken.row)
        return found

    def _track(self, req: DQ.Request, row: Row[Any]) -> None:
        """Remember the locks the session's transaction now holds."""
        held = self.s.held
        if req.mode is DequeueMode.LOCKED:
            held[row.id] = "L"
        elif not req.immediate:
            held[row.id] = "R"
        else:
            held.pop(row.id, None)  # a LOCKED message of this session, removed now

    def _browse(self, spec: Spec, checked: _Checked, limit: int) -> list[Message]:
        url = self.s.store.url
        out: list[Message] = []
        with self.s.store.read() as conn:
            now = utcnow()
            req = self._request(spec, checked, now)
            cursor = self._cursor(spec)
            while len(out) < limit:
                taken, _ = DQ.find(conn, url, req, cursor, now, False)
                if taken is None:
                    break
                out.append(DQ.to_message(conn, url, req, taken))
                DQ.advance(cursor, req, taken.row)
        if not out:
            _refuse_captured(self.s.store, spec.queue)
        return out

    def _available(self, spec: Spec, checked: _Checked) -> bool | str:
        """A read: whether the write attempt can find anything (raises if stopped/gone).

        :data:`_STALE` when the dictionary version moved since the request's check.
        """
        row = self._peek(spec, checked)
        _raise_unless_started(spec.queue, row)
        if row.dver != checked.version:
            return _STALE
        if row.maybe:
            return True
        if not self._housekeeping_due(spec.queue):
            return False
        if row.due or row.locked:  # a dead process's lock shows only to the housekeeping
            return True
        self.housekept[spec.queue] = time.monotonic()
        return False

    def _explain_empty(self, spec: Spec, checked: _Checked, first: bool) -> str | None:
        """Raise why a first attempt found nothing, if the queue refuses; :data:`_STALE`
        when the dictionary version moved since the request's check."""
        if not first:
            return None
        row = self._peek(spec, checked)
        _raise_unless_started(spec.queue, row)
        if not checked.props.is_exception:
            _refuse_captured(self.s.store, spec.queue)
        return _STALE if row.dver != checked.version else None

    def _housekeep(self, conn: Connection, queue: str, now: dt.datetime, *, force: bool) -> bool:
        """Make due delayed messages READY and roll lapsed locks back (throttled)."""
        last = self.housekept.get(queue, 0.0)
        if not force and time.monotonic() - last < max(self.s.settings.housekeeping, 1.0):
            return False
        if force and time.monotonic() - last < self.s.settings.housekeeping / 4:
            return False
        self.housekept[queue] = time.monotonic()
        changed = locks.promote(conn, now, queue)
        back = locks.reclaim(conn, now, queue)
        return changed + back["retried"] + back["unlocked"] > 0


def _pick_and_drop(store: StateStore, shape: tuple[Any, ...], params: dict[str, Any]
                   ) -> list[Any]:
    """SQLite, REMOVE now: select the rows and delete them by id, in one write transaction."""
    pick = wire.compiled(store.engine, f"aq:pick:{shape}", lambda: DQ.pick_statement(shape),
                         list(S.messages.c))
    drop = wire.compiled(store.engine, "aq:drop", DQ.drop_statement)
    parameters = pick.parameters(params)

    def job(cursor: Any) -> list[Any]:
        fetched = pick.fetch(cursor, parameters)
        if fetched:
            cursor.executemany(drop.sql, [drop.parameters({"p_id": r[0]}) for r in fetched])
        return fetched

    return pick.convert_rows(wire.write(store, job))


@functools.lru_cache(maxsize=1)
def _captured_statement() -> Any:
    """Captured batches (LCRs) ready in a queue, and their messages: ``p_queue``."""
    B = schema.queue_batches
    return select(func.count().label("n"),
                  func.coalesce(func.sum(B.c.n_messages), 0).label("msgs")).where(
        B.c.queue == bindparam("p_queue", type_=B.c.queue.type), B.c.path != "",
        B.c.state == "ready", B.c.n_messages > 0)


def _stopped(queue: str) -> QueueStoppedError:
    return QueueStoppedError(f"queue {queue} is stopped for dequeue; start it with "
                             f"`changeflow aq start-queue {queue}`")


def _raise_unless_started(queue: str, row: Any) -> None:
    if row is None:
        raise QueueNotFoundError(f"queue {queue!r} does not exist")
    if row.status == "dropped":
        raise QueueDroppedError(f"queue {queue!r} was dropped; it is not re-created "
                                "automatically")
    if not row.dequeue_enabled:
        raise _stopped(queue)


def _refuse_captured(store: StateStore, queue: str) -> None:
    stmt = wire.compiled(store.engine, "aq:captured", _captured_statement,
                         list(_captured_statement().selected_columns))
    n, msgs = stmt.read(store, {"p_queue": queue})[0]
    if n:
        raise CapturedMessageError(
            f"queue {queue} holds {msgs} captured messages (LCRs in {n} batches) and no user "
            "message for this consumer: captured messages can be dequeued only by an apply "
            "process (seed 001)")
