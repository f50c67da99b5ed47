"""Consuming changes: ``get_changes``, ``ack_change`` and ``put_back`` (seed Figure 1).

A :class:`Worker` is one consumer process (or thread) of a listener. ``get_changes``
hands it the listener's next entry, in ``entry_number`` order, real-time entries
before bulk ones, skipping entries held until a later time; at the end of the queue
it returns a record whose ``change_type`` is ``None``.

Handing an entry out *claims* it in the same statement: ``claimed_by`` is set to the
worker and ``hold_until`` to now plus the listener's claim timeout, so a second worker
of the same listener skips it (on PostgreSQL the row is picked with ``FOR UPDATE SKIP
LOCKED``, so concurrent workers do not even wait for each other; on SQLite writers
take turns; the claim and the ack are each one prepared statement on a held
autocommit connection, one round trip each: see :mod:`changeflow.mcq.conn`). A
worker that dies before its ack leaves the entry held until the claim
times out, then it is handed out again: nothing is lost, and listeners are
idempotent by contract. ``ack_change`` clears ``queue_name`` (the entry leaves the
pending index) and sets ``proc_date``; ``put_back`` raises ``retry_count`` and holds
the entry until a given time. Both check that the entry is still this worker's.

When an entry got but not acknowledged comes back depends on the listener's
``redeliver``: ``immediate`` (the default for a listener run by one worker) makes the
claim no hold, so the next ``get_changes`` returns it again, as the seed's Get_Changes
does for a listener that calls it again before Ack_Change (a restarted listener starts
where it stopped); ``claim_timeout`` (the default for several workers) hands it out
again only when the claim times out, so workers never share an entry.

A listener with a ``role`` is consumed only by a database user that has it: checked
on PostgreSQL (``pg_has_role``) at a worker's first call and again every
:data:`ROLE_RECHECK` seconds; SQLite has no roles (the role is not enforced there).

Every ``get_changes`` also marks the listener alive for the process monitor, at most
once per mark interval (the seed's throttled ``Mark_Process``).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, or_, select, text, update
from sqlalchemy.engine import Connection

from changeflow.mcq.conn import compiled, driver, statement
from changeflow.mcq.model import (
    AlreadyAckedError,
    BadChangeError,
    ChangeRec,
    McqError,
    NotYourEntryError,
    RoleRequiredError,
    aware,
    end_of_queue,
    rec_from_row,
    redelivery,
)
from changeflow.mcq.origin import call_stack
from changeflow.mcq.registry import require_listener
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import listeners, queue

if TYPE_CHECKING:
    from changeflow.mcq.monitor import Marker
    from changeflow.state import StateStore

Q, L = queue, listeners


def _claim_statement(by_table: bool, immediate: bool = False) -> Any:
    free = [Q.c.hold_until.is_(None), Q.c.hold_until <= bindparam("now")]
    if immediate:  # a claim is no hold: what was got and not acked comes back at once
        free.append(Q.c.claimed_by.isnot(None))
    cond = [Q.c.queue_name == bindparam("listener"), or_(*free)]
    if by_table:
        cond.append(Q.c.tname == bindparam("b_tname"))
    nxt = (select(Q.c.entry_number).where(*cond).order_by(Q.c.lane, Q.c.entry_number)
           .limit(1).with_for_update(skip_locked=True).scalar_subquery())
    return (update(Q).where(Q.c.entry_number == nxt)
            .values(hold_until=bindparam("until"), claimed_by=bindparam("worker"))
            .returning(*Q.c))


_CLAIM = {(t, i): _claim_statement(t, i) for t in (False, True) for i in (False, True)}
#: Seconds a worker trusts a role check (a revoked role is refused within this time).
ROLE_RECHECK = 60.0
_MINE = [Q.c.entry_number == bindparam("n"), Q.c.proc_name == bindparam("listener"),
         Q.c.queue_name.isnot(None), Q.c.claimed_by == bindparam("worker")]
_ACK = update(Q).where(*_MINE).values(queue_name=None, proc_date=bindparam("now"),
                                      hold_until=None)
_COLUMNS = [c.name for c in Q.c]  # the claim's RETURNING, in order
_PUT_BACK = update(Q).where(*_MINE).values(retry_count=Q.c.retry_count + 1,
                                           hold_until=bindparam("hold"), claimed_by=None)


class Worker:
    """One worker of a listener: gets, acks and puts back that listener's changes.

    Args:
        store: the state store holding the MCQ.
        listener: the listener's ``proc_name``.
        marker: the throttled process-monitor mark (None: do not mark).
        worker_id: a name for this worker (default: a random one per worker).
    """

    def __init__(self, store: StateStore, listener: str, *, marker: Marker | None = None,
                 worker_id: str | None = None):
        self.store = store
        self.listener = listener
        self.marker = marker
        self.id = worker_id or f"w-{uuid.uuid4().hex[:16]}"
        self.claim_timeout: float | None = None
        self.immediate = False
        self.role: str | None = None
        self._role_checked = -ROLE_RECHECK
        self._compiled: dict[int, tuple[str, dict[str, Any]]] = {}

    def _first_call(self, conn: Connection) -> None:
        row = require_listener(conn, self.listener)
        self.claim_timeout = float(row["claim_timeout"])
        self.immediate = redelivery(row["redeliver"], int(row["workers"])) == "immediate"
        self.role = row["role"] or None
        if row["stack_date"] is None:
            conn.execute(update(L).where(L.c.proc_name == self.listener).values(
                call_stack=call_stack(label=f"listener {self.listener}"), stack_date=utcnow()))

    def _ready(self) -> None:
        """Read the listener once, and check its role (see :func:`check_role`)."""
        if self.claim_timeout is None:
            with self.store.begin() as first:
                self._first_call(first)
        if self.role and time.monotonic() - self._role_checked >= ROLE_RECHECK:
            check_role(self.store, self.listener, self.role)
            self._role_checked = time.monotonic()

    def get_changes(self, tname: str | None = None) -> ChangeRec:
        """The listener's next change (claimed by this worker), or the end-of-queue record.

        Raises:
            UnknownListenerError: the listener is not registered.
            RoleRequiredError: the store's database user lacks the listener's role.
        """
        self._ready()
        assert self.claim_timeout is not None
        now = utcnow()
        params = {"listener": self.listener, "now": now, "worker": self.id,
                  "until": now + dt.timedelta(seconds=self.claim_timeout)}
        if tname is not None:
            params["b_tname"] = tname.upper()
        if self.store.dialect == "postgresql":
            sql, fixed = self._sql(_CLAIM[tname is not None, self.immediate])
            with driver(self.store) as raw:
                values = raw.execute(sql, {**fixed, **params}).fetchone()
            row: Mapping[Any, Any] | None = (
                None if values is None else dict(zip(_COLUMNS, values, strict=True)))
        else:
            with statement(self.store) as conn:
                found = conn.execute(_CLAIM[tname is not None, self.immediate], params).first()
            row = None if found is None else found._mapping
        if self.marker is not None:
            self.marker.mark()
        return end_of_queue(self.listener) if row is None else rec_from_row(row)

    def _sql(self, stmt: Any) -> tuple[str, dict[str, Any]]:
        """A hot statement compiled once per worker (PostgreSQL's driver path)."""
        if id(stmt) not in self._compiled:
            self._compiled[id(stmt)] = compiled(stmt, self.store)
        return self._compiled[id(stmt)]

    def _check(self, rec: ChangeRec, action: str) -> int:
        if rec.is_end or rec.entry_number is None:
            raise McqError(f"{action}: the end-of-queue record of {rec.proc_name!r} is not an "
                           "entry (loop until change_type is None, then stop)")
        if rec.proc_name != self.listener:
            raise NotYourEntryError(
                f"{action} of entry {rec.entry_number}: it belongs to listener "
                f"{rec.proc_name!r}, not to {self.listener!r}; nothing was changed")
        return rec.entry_number

    def _refused(self, conn: Connection, n: int, action: str) -> McqError:
        row = conn.execute(select(Q.c.proc_name, Q.c.queue_name, Q.c.claimed_by,
                                  Q.c.proc_date).where(Q.c.entry_number == n)).first()
        what = f"{action} of entry {n} by listener {self.listener!r} (worker {self.id})"
        if row is None:
            return McqError(f"{what}: there is no such entry (purged?); nothing was changed")
        if row.proc_name != self.listener:
            return NotYourEntryError(f"{what}: it belongs to listener {row.proc_name!r}; "
                                     "nothing was changed")
        if row.queue_name is None:
            return AlreadyAckedError(f"{what}: it was already processed at "
                                     f"{aware(row.proc_date)}; nothing was changed")
        holder = row.claimed_by or "nobody (it was put back)"
        return NotYourEntryError(f"{what}: it is held by {holder}, not by this worker (its "
                                 "claim timed out and it was handed out again, or this worker "
                                 "never got it); nothing was changed")

    def ack_change(self, rec: ChangeRec) -> None:
        """Mark an entry this worker got as processed.

        Raises:
            NotYourEntryError: another listener's or worker's entry.
            AlreadyAckedError: it was already processed.
            RoleRequiredError: the store's database user lacks the listener's role.
        """
        n = self._check(rec, "ack")
        self._ready()
        params = {"n": n, "listener": self.listener, "worker": self.id, "now": utcnow()}
        if self.store.dialect == "postgresql":
            sql, fixed = self._sql(_ACK)
            with driver(self.store) as raw:
                done = raw.execute(sql, {**fixed, **params}).rowcount
        else:
            with statement(self.store) as conn:
                done = conn.execute(_ACK, params).rowcount
                if not done:
                    raise self._refused(conn, n, "ack")
        if not done:  # PostgreSQL: the ack changed nothing, so nothing is left to undo
            with statement(self.store) as conn:
                raise self._refused(conn, n, "ack")

    def put_back(self, rec: ChangeRec, hold_until: dt.datetime | None = None, *,
                 delay: float | None = None) -> dt.datetime | None:
        """Give an entry back: its ``retry_count`` rises and it waits until ``hold_until``
        (or ``delay`` seconds from now; neither: available at once).

        Returns:
            the time it is held until.

        Raises:
            BadChangeError: ``hold_until`` is in the past, or both or a negative delay given.
            NotYourEntryError, AlreadyAckedError: as for :meth:`ack_change`.
        """
        n = self._check(rec, "put-back")
        self._ready()
        now = utcnow()
        if hold_until is not None and delay is not None:
            raise BadChangeError("put-back: give hold_until or delay, not both")
        if delay is not None:
            if delay < 0:
                raise BadChangeError(f"put-back of entry {n}: delay {delay} is negative")
            hold_until = now + dt.timedelta(seconds=delay)
        if hold_until is not None:
            hold_until = aware(hold_until)
            assert hold_until is not None
            if hold_until < now - dt.timedelta(seconds=1):
                raise BadChangeError(
                    f"put-back of entry {n}: hold_until {hold_until.isoformat()} is in the "
                    f"past (now {now.isoformat(timespec='seconds')}); nothing was changed")
        with statement(self.store) as conn:
            done = conn.execute(_PUT_BACK, {"n": n, "listener": self.listener,
                                            "worker": self.id, "hold": hold_until}).rowcount
            if not done:
                raise self._refused(conn, n, "put-back")
        return hold_until


def check_role(store: StateStore, listener: str, role: str) -> None:
    """Refuse a consumer whose database user lacks the listener's role (seed Table 4).

    On PostgreSQL the store's user (``current_user``) must be a member of the role
    (``pg_has_role(..., 'MEMBER')``; superusers are members of every role). SQLite has
    no users or roles: there the role is recorded and not enforced.

    Raises:
        RoleRequiredError: not a member, or no such role in the database.
    """
    if store.dialect != "postgresql":
        return
    with store.read() as conn:
        exists = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"),
                              {"r": role}).first()
        user = conn.execute(text("SELECT current_user")).scalar_one()
        member = exists is not None and bool(conn.execute(
            text("SELECT pg_has_role(current_user, :r, 'MEMBER')"), {"r": role}).scalar_one())
    if exists is None:
        raise RoleRequiredError(f"listener {listener!r} needs role {role!r}, which does not "
                                f"exist in the database; create it (CREATE ROLE {role}) and "
                                f"grant it to {user}, or change the listener's role")
    if not member:
        raise RoleRequiredError(f"database user {user} may not consume listener {listener!r}: "
                                f"it needs role {role!r} (GRANT {role} TO {user}); nothing "
                                "was changed")
