"""How a session enqueues: checking messages against its cached dictionary, and writing.

Each message is checked when ``enqueue`` is called (:func:`changeflow.messaging.enqueue.prepare`)
against the session's cached dictionary (:mod:`changeflow.messaging.cache`): queue
properties, subscribers and their rules, privilege verdicts. A message the session
keeps for its transaction (ON_COMMIT) is checked against an entry whose version was
confirmed in the same read, so its recipients are those of the dictionary at enqueue
time, in every process.

An enqueue that commits at once (``commit=True`` on an idle session, or IMMEDIATE)
of one message to one recipient is *one* statement: ``INSERT ... SELECT <row> WHERE
<queue active and started> AND <dictionary version unchanged>``, run on the driver's
connection (:mod:`changeflow.messaging.wire`). If it writes nothing, the session finds
out why: a stopped or dropped queue raises; a moved version drops the cached entry
and the message is checked again (new subscribers, rules, grants) and written.
On PostgreSQL, several messages (an ``enqueue_array``, or one message to several
recipients) are likewise one statement (:func:`changeflow.messaging.enqueue.guarded_many`:
one array per column, spread by ``unnest``). Anything else (SQLite's several rows,
commit-time ordering, producer-chosen message ids) is written through
:func:`changeflow.messaging.enqueue.write` in one transaction that confirms the version
first.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from changeflow.errors import StateStoreError
from changeflow.messaging import cache, wire
from changeflow.messaging import dictionary as D
from changeflow.messaging import enqueue as EQ
from changeflow.messaging.model import MessageProperties
from changeflow.state import schema_messaging as S
from changeflow.state import utcnow

if TYPE_CHECKING:
    from changeflow.messaging.session import Session

#: Attempts of an enqueue whose dictionary version moved under it, before giving up.
RETRIES = 5


class _Stale(Exception):
    """The dictionary version moved since the message was checked."""


class Sender:
    """The enqueue side of one session."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.dictionary = cache.Dictionary()

    def send(self, name: str, payloads: Sequence[Any], plist: list[MessageProperties],
             type_name: str | None, alone: str | None) -> tuple[list[EQ.Pending],
                                                                dict[str, list[str]]]:
        """Check the messages; write them now as transaction ``alone`` if given.

        Without ``alone`` the caller keeps them for its transaction's commit.

        Returns the checked messages and, when written, the ids written by queue.
        """
        for _ in range(RETRIES):
            with cache.LazyRead(self.s.store) as conn:
                view = self.dictionary.view(conn, name) if alone \
                    else self.dictionary.current(conn, name)
                prepared, now = self._prepare(conn, view, payloads, plist, type_name)
            if not alone:
                return prepared, {}
            try:
                return prepared, self._write(view, prepared, now, alone)
            except _Stale:
                self.dictionary.forget(name)
        raise StateStoreError(
            f"queue {name}: its subscribers or privileges kept changing during the enqueue "
            f"({RETRIES} attempts); nothing was written, try again")

    def _prepare(self, conn: cache.LazyRead, view: cache.QueueView, payloads: Sequence[Any],
                 plist: list[MessageProperties], type_name: str | None
                 ) -> tuple[list[EQ.Pending], dt.datetime]:
        now = utcnow()
        store, settings = self.s.store, self.s.settings

        def check(props: D.QueueProps, user: str | None, privilege: str,
                  agent: str | None) -> None:
            self.dictionary.check(conn, view, user, privilege, agent)

        prepared = [EQ.prepare(conn, store, view.props, p, pr,  # type: ignore[arg-type]
                               type_name=type_name, user=self.s.user,
                               max_size=settings.max_message_size, now=now,
                               subscribers=view.subscribers, check=check)
                    for p, pr in zip(payloads, plist, strict=True)]
        return prepared, now

    def _write(self, view: cache.QueueView, prepared: list[EQ.Pending],
               now: dt.datetime, txn: str) -> dict[str, list[str]]:
        props = view.props
        one = prepared[0]
        if (len(prepared) == 1 and len(one.recipients) == 1 and not one.replay_key
                and not props.commit_ordered):
            row = EQ.message_rows(props, one, txn, None, now)[0]
            params = {f"v_{k}": v for k, v in row.items()}
            params["p_dver"] = view.version
            stmt = wire.compiled(self.s.store.engine, "aq:enqueue:one",
                                 lambda: EQ.guarded(True, versioned=True), [S.messages.c.id])
            done = stmt.run(self.s.store, params)
            if not done:
                self._why_not(props.name)
            return {props.name: [one.msg_id]}
        if (self.s.store.dialect == "postgresql" and not props.commit_ordered
                and not any(m.replay_key for m in prepared)):
            rows = [r for m in prepared for r in EQ.message_rows(props, m, txn, None, now)]
            stmt = wire.compiled(self.s.store.engine, "aq:enqueue:many", EQ.guarded_many,
                                 [S.messages.c.id])
            done = stmt.run(self.s.store, EQ.many_params(rows, props.name, view.version))
            if len(done) != len(rows):  # nothing written: the statement is all or nothing
                self._why_not(props.name)
            return {props.name: [m.msg_id for m in prepared]}
        with self.s.store.begin() as conn:
            if D.version(conn) != view.version:
                raise _Stale
            return EQ.write(conn, self.s.store, prepared, txn, now, {props.name: props},
                            started=True)

    def _why_not(self, name: str) -> None:
        """The guarded insert wrote nothing: raise if the queue refuses, else stale."""
        self.dictionary.forget(name)
        with self.s.store.read() as conn:
            EQ.check_queue(D.queue(conn, name))
        raise _Stale
