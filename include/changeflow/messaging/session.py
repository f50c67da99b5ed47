"""Sessions: enqueue, dequeue, commit and rollback, like ``DBMS_AQ`` in one database session.

A :class:`Session` belongs to one user and one state store (one site). Its
transaction is *logical*: it holds no database connection between calls, so an HTTP
service can keep one open across requests (IDAP, seed 003):

* ``enqueue`` checks the message at once and keeps it in the session; ``commit``
  writes the transaction's messages in one database transaction, so they become
  visible together (ON_COMMIT). IMMEDIATE visibility writes it at once, as a
  transaction of its own.
* ``dequeue`` in REMOVE or LOCKED mode locks the message in the store under the
  session's transaction id; other sessions skip it. ``commit`` removes (or retains)
  what was dequeued; ``rollback`` puts it back with its retry count raised (past
  ``max_retries``: the exception queue). Locks lapse after ``lock_timeout`` seconds
  without any call from the session (default 120 s, the IDAP idle timeout) or at once
  when the session's process dies; the next dequeue or the time manager then rolls
  them back, and a later ``commit`` of that session fails with
  :class:`~changeflow.messaging.errors.TransactionExpiredError`.

``commit=True`` on ``enqueue``/``dequeue`` commits in the same call (the IDAP
``<AQXmlCommit/>`` inside a request), in one database transaction when the session
had nothing else pending.

>>> from changeflow.state import StateStore
>>> from changeflow.messaging import admin, connect
>>> store = StateStore("sqlite://")
>>> _ = admin.create_queue_table(store, "app.jobs_qt", "RAW")
>>> _ = admin.create_queue(store, "app.jobs", "app.jobs_qt", start=True)
>>> s = connect(store, user="app")
>>> mid = s.enqueue("app.jobs", b"hello", priority=2)
>>> s.dequeue("app.jobs", wait=0) is None   # not committed yet: invisible
True
>>> s.commit()
>>> m = s.dequeue("app.jobs", wait=0)
>>> (m.msg_id == mid, m.payload, m.priority)
(True, b'hello', 2)
>>> s.commit()
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow.messaging import dequeue as DQ
from changeflow.messaging import dictionary as D
from changeflow.messaging import enqueue as EQ
from changeflow.messaging import locks, notify
from changeflow.messaging.constants import (
    FOREVER,
    DeliveryMode,
    DequeueMode,
    Navigation,
    Visibility,
    wait_seconds,
)
from changeflow.messaging.errors import (
    MessagePropertyError,
    TransactionExpiredError,
)
from changeflow.messaging.model import Message, MessageProperties, Selector, agent_name
from changeflow.messaging.receive import Receiver, Spec
from changeflow.messaging.sender import Sender
from changeflow.state import StateStore, utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection


log = logging.getLogger(__name__)
#: Finds a messaging client's rule sets by name (None: not a client of the rules file).
RulesLookup = Callable[[str], DQ.ClientRules | None]


@dataclass(frozen=True)
class Settings:
    """How a session behaves.

    Args:
        lock_timeout: seconds a dequeued-but-uncommitted message stays locked without
            any call from the session (the IDAP transaction idle timeout is 120 s).
        max_message_size: the largest encoded payload accepted, in bytes.
        poll_max: the longest pause between two polls of a waiting dequeue, seconds.
        housekeeping: seconds between a session's checks for delayed messages that
            became due and lapsed locks, per queue (always done before giving up).
        buffer_max_bytes: buffered messages a process keeps in memory per store before
            the oldest spill to the store (:mod:`changeflow.messaging.buffered`).
        buffer_spill_after: seconds a buffered message stays in memory before it spills
            (None: only under memory pressure).
    """

    lock_timeout: float = 120.0
    max_message_size: int = 1024 * 1024
    poll_max: float = 0.02
    housekeeping: float = 0.2
    buffer_max_bytes: int = 16 * 1024 * 1024
    buffer_spill_after: float | None = 300.0


class Session:
    """One user's session on one state store (see the module docstring).

    Create it with :func:`connect`. Not thread-safe: use one session per thread.
    """

    def __init__(self, store: StateStore, *, user: str | None = None, site: str | None = None,
                 rules: RulesLookup | None = None, settings: Settings | None = None) -> None:
        from changeflow.messaging.engines import session_store

        self.store = session_store(store)
        self.user = agent_name(user) or None
        self.site = site
        self.settings = settings or Settings()
        self.id = uuid.uuid4().hex[:16]
        self._rules = rules
        self._prefix = locks.txn_prefix(self.id)
        self._serial = itertools.count(1)
        self._txn: str | None = None
        self._pending: list[EQ.Pending] = []
        self.held: dict[int, str] = {}
        self._renewed = 0.0
        self.postgres = store.dialect == "postgresql"
        self._receiver = Receiver(self)
        self._sender = Sender(self)
        self._names: dict[str, str] = {}  # queue references as given -> as stored
        self.last_active = time.monotonic()
        self.closed = False

    # -- state ---------------------------------------------------------------------------
    @property
    def transaction_id(self) -> str:
        """The id of the session's current transaction (what its locks carry)."""
        if self._txn is None:
            self._txn = f"{self._prefix}:{next(self._serial)}"
        return self._txn

    @property
    def in_transaction(self) -> bool:
        """Whether the session has uncommitted enqueues or dequeues."""
        return bool(self._pending or self.held)

    @property
    def idle_seconds(self) -> float:
        """Seconds since the session's last call (the IDAP service rolls back at 120)."""
        return time.monotonic() - self.last_active

    def _touch(self) -> None:
        if self.closed:
            raise MessagePropertyError(f"session {self.id} is closed")
        self.last_active = time.monotonic()

    def _queue(self, queue: str) -> str:
        found = self._names.get(queue)
        if found is None:
            found = self._names[queue] = self._resolve(queue)
        return found

    def _resolve(self, queue: str) -> str:
        from changeflow.messaging.model import queue_name

        name = queue_name(queue)
        base, _, site = name.partition("@")
        if site and self.site and site != self.site:
            raise MessagePropertyError(
                f"queue {queue} is at site {site}; this session is connected to site "
                f"{self.site} (connect to {site} to use it)")
        return base

    # -- enqueue -------------------------------------------------------------------------
    def enqueue(self, queue: str, payload: Any,
                properties: MessageProperties | dict[str, Any] | None = None, *,
                type_name: str | None = None, visibility: str = Visibility.ON_COMMIT,
                commit: bool = False, delivery_mode: str = DeliveryMode.PERSISTENT,
                **props: Any) -> str:
        """Enqueue one message; returns its message id.

        Args:
            queue: ``owner.name`` (or ``owner.name@site`` of this session's site).
            payload: the payload, typed after the queue's payload type (see
                :mod:`changeflow.messaging.types`).
            properties: :class:`MessageProperties` or a dict of them; keywords
                (``priority=``, ``delay=``, ``expiration=``, ``correlation=``,
                ``recipients=``, ``exception_queue=``, ``sender=``, ``msg_id=``)
                override them.
            type_name: the payload's type on an ANYDATA queue (default: inferred).
            visibility: ON_COMMIT (with the session's transaction) or IMMEDIATE (now,
                as a transaction of its own).
            commit: commit the session's transaction in the same call.
            delivery_mode: PERSISTENT (the queue table) or BUFFERED (this process's
                memory, not transactional: :mod:`changeflow.messaging.buffered`).

        Raises:
            QueueNotFoundError, QueueStoppedError, UnknownTypeError, PayloadTypeError,
            MessagePropertyError, MessageTooLargeError, SecurityError,
            NoRecipientsError: the message is refused and nothing changes.
        """
        if DeliveryMode.parse(delivery_mode) is DeliveryMode.BUFFERED:
            from changeflow.messaging import buffered

            self._touch()
            msg_id = buffered.enqueue(self, self._queue(queue), payload,
                                      MessageProperties.of(properties, **props), type_name)
            if commit:
                self.commit()
            return msg_id
        if delivery_mode == DeliveryMode.PERSISTENT_OR_BUFFERED:
            raise MessagePropertyError("an enqueue's delivery_mode is PERSISTENT or BUFFERED")
        ids = self.enqueue_array(queue, [payload], [MessageProperties.of(properties, **props)],
                                 type_name=type_name, visibility=visibility, commit=commit)
        return ids[0]

    def enqueue_array(self, queue: str, payloads: Sequence[Any],
                      properties: MessageProperties | dict[str, Any] | None
                      | Sequence[MessageProperties | dict[str, Any] | None] = None, *,
                      type_name: str | None = None, visibility: str = Visibility.ON_COMMIT,
                      commit: bool = False) -> list[str]:
        """Enqueue several messages (``DBMS_AQ.ENQUEUE_ARRAY``); returns their ids.

        ``properties`` is one set for every message, or one per message. Every message
        is checked before any is kept: one bad message refuses the whole array.
        """
        self._touch()
        name = self._queue(queue)
        if properties is None or isinstance(properties, (MessageProperties, dict)):
            plist = [MessageProperties.of(properties)] * len(payloads)
        else:
            if len(properties) != len(payloads):
                raise MessagePropertyError(
                    f"{len(payloads)} payloads but {len(properties)} message properties")
            plist = [MessageProperties.of(p) for p in properties]
        vis = Visibility.parse(visibility)
        alone = vis is Visibility.IMMEDIATE or (commit and not self.in_transaction)
        txn = None
        if alone:  # a transaction of its own: the session's, when it commits it
            txn = self.transaction_id if commit else f"{self._prefix}:{next(self._serial)}"
        prepared, written = self._sender.send(name, payloads, plist, type_name, txn)
        if alone:
            if commit:
                self._reset()
            self._signal(written)
        else:
            self._pending.extend(prepared)
            if commit:
                self.commit()
        return [m.msg_id for m in prepared]

    # -- dequeue -------------------------------------------------------------------------
    def dequeue(self, queue: str, *, consumer: str | None = None,
                mode: str = DequeueMode.REMOVE, navigation: str = Navigation.NEXT_MESSAGE,
                wait: float | str | None = FOREVER,
                selector: Selector | str | dict[str, Any] | None = None,
                correlation: str | None = None, msg_id: str | None = None,
                condition: str | None = None, visibility: str = Visibility.ON_COMMIT,
                commit: bool = False, delivery_mode: str = DeliveryMode.PERSISTENT
                ) -> Message | None:
        """Dequeue (or browse) one message; ``None`` when none arrived within ``wait``.

        Args:
            consumer: the consumer (agent) name; required on multi-consumer queues,
                refused on single-consumer ones.
            mode: BROWSE, LOCKED, REMOVE (default) or REMOVE_NODATA.
            navigation: FIRST_MESSAGE, NEXT_MESSAGE (default) or NEXT_TRANSACTION.
            wait: FOREVER (default, -1 or None), NO_WAIT (0) or seconds; a waiting
                dequeue returns as soon as a message arrives.
            selector: a :class:`Selector`, a condition text, or a dict; or give
                ``correlation``, ``msg_id``, ``condition`` directly.
            visibility: ON_COMMIT (part of the session's transaction) or IMMEDIATE.
            commit: commit the session's transaction in the same call.
            delivery_mode: PERSISTENT (default), BUFFERED or PERSISTENT_OR_BUFFERED
                (buffered messages first); a buffered message is removed at once.

        Raises:
            QueueNotFoundError, QueueStoppedError, NotSubscribedError, SecurityError,
            SelectorError, MessagePropertyError, CapturedMessageError,
            EndOfGroupError: nothing is dequeued.
        """
        spec, seconds = self._spec(queue, consumer, mode, navigation, wait, selector,
                                   correlation, msg_id, condition, visibility, commit)
        delivery = DeliveryMode.parse(delivery_mode)
        if delivery is not DeliveryMode.PERSISTENT:
            from changeflow.messaging import buffered

            found = buffered.take(self, spec, seconds, delivery,
                                  lambda: self._receiver.receive(spec, 0.0, 1))
            self._finish_call(spec, commit)
            return found
        msgs = self._receiver.receive(spec, seconds, 1)
        self._finish_call(spec, commit)
        return msgs[0] if msgs else None

    def dequeue_array(self, queue: str, max_messages: int, *, consumer: str | None = None,
                      mode: str = DequeueMode.REMOVE,
                      navigation: str = Navigation.NEXT_MESSAGE,
                      wait: float | str | None = FOREVER,
                      selector: Selector | str | dict[str, Any] | None = None,
                      correlation: str | None = None, msg_id: str | None = None,
                      condition: str | None = None, visibility: str = Visibility.ON_COMMIT,
                      commit: bool = False) -> list[Message]:
        """Dequeue up to ``max_messages`` in one database transaction (``DEQUEUE_ARRAY``).

        Waits (``wait``) for the first message only; the options are :meth:`dequeue`'s.
        """
        spec, seconds = self._spec(queue, consumer, mode, navigation, wait, selector,
                                   correlation, msg_id, condition, visibility, commit)
        msgs = self._receiver.receive(spec, seconds, max(1, int(max_messages)))
        self._finish_call(spec, commit)
        return msgs

    def _spec(self, queue: str, consumer: str | None, mode: str, navigation: str,
              wait: float | str | None, selector: Selector | str | dict[str, Any] | None,
              correlation: str | None, msg_id: str | None, condition: str | None,
              visibility: str, commit: bool) -> tuple[Spec, float | None]:
        self._touch()
        name = self._queue(queue)
        mode_, nav = DequeueMode.parse(mode), Navigation.parse(navigation)
        vis = Visibility.parse(visibility)
        if mode_ is DequeueMode.LOCKED and vis is Visibility.IMMEDIATE:
            raise MessagePropertyError("LOCKED mode needs ON_COMMIT visibility: an IMMEDIATE "
                                       "lock would end with the call")
        sel = Selector.of(selector)
        if correlation or msg_id or condition:
            base = sel or Selector()
            sel = Selector(correlation or base.correlation, msg_id or base.msg_id,
                           condition or base.condition)
        seconds = wait_seconds(wait)
        immediate = vis is Visibility.IMMEDIATE or (commit and not self.in_transaction
                                                    and mode_ is not DequeueMode.LOCKED)
        return Spec(name, agent_name(consumer), mode_, nav, sel, immediate), seconds

    def _finish_call(self, spec: Spec, commit: bool) -> None:
        if commit and not spec.immediate:
            self.commit()
        elif commit:
            self._reset()

    # -- what the receiver uses ---------------------------------------------------------------
    def renew(self, conn: Connection, now: dt.datetime) -> None:
        """Push back the lapse time of the transaction's locks (at most every timeout/4)."""
        if self.held and time.monotonic() - self._renewed > self.settings.lock_timeout / 4:
            locks.renew(conn, self.transaction_id, self.lock_expiry(now))
            self._renewed = time.monotonic()

    def renewal_due(self) -> bool:
        """Whether the next attempt must push back the transaction's locks (:meth:`renew`)."""
        return bool(self.held) and \
            time.monotonic() - self._renewed > self.settings.lock_timeout / 4

    def lock_expiry(self, now: dt.datetime) -> dt.datetime:
        """When a lock taken now lapses if the session makes no further call."""
        if not self.held:
            self._renewed = time.monotonic()
        return now + dt.timedelta(seconds=self.settings.lock_timeout)

    def client_rules(self, consumer: str) -> DQ.ClientRules:
        """A messaging client's rule sets (from the pipeline's rules file)."""
        found = self._rules(consumer) if self._rules is not None else None
        if found is None:
            raise MessagePropertyError(
                f"{consumer} is a messaging client: its rule sets come from the pipeline's "
                "rules file; connect with the pipeline configuration "
                "(messaging.connect(cfg, ...))")
        return found

    # -- transaction -----------------------------------------------------------------------
    def commit(self) -> None:
        """Commit: make the enqueues visible and the dequeues final, together.

        Raises:
            TransactionExpiredError: the session's locks lapsed (it was idle longer than
                ``lock_timeout``) and another session may have taken its messages; the
                whole transaction is rolled back.
            QueueNotFoundError: a queue was dropped since the enqueue (nothing committed).
        """
        self._touch()
        if not self.in_transaction:
            self._reset()
            return
        txn = self.transaction_id
        want = {"R": sum(1 for m in self.held.values() if m == "R"),
                "L": sum(1 for m in self.held.values() if m == "L")}
        try:
            with self.store.begin() as conn:
                now = utcnow()
                written = EQ.write(conn, self.store, self._pending, txn, now) \
                    if self._pending else {}
                if self.held:
                    done = locks.finish(conn, txn, now)
                    if done != want:
                        raise _Lapsed(f"held {want}, still locked {done}")
        except _Lapsed as exc:
            self.rollback()
            raise TransactionExpiredError(
                f"transaction {txn} of session {self.id} lapsed (idle more than "
                f"{self.settings.lock_timeout:g} s, or rolled back by the time manager): its "
                f"locks were released ({exc}); nothing was committed") from None
        self._reset()
        self._signal(written)

    def rollback(self) -> None:
        """Roll back: drop the enqueues, put dequeued messages back (retry count + 1)."""
        self._touch()
        if self.held:
            with self.store.begin() as conn:
                locks.release(conn, locks.held_by(self.transaction_id), utcnow())
        self._reset()

    def _reset(self) -> None:
        self._pending = []
        self.held = {}
        self._txn = None

    def _signal(self, written: dict[str, list[str]]) -> None:
        for queue, ids in written.items():
            notify.signal(self.store.url, queue, ids)

    # -- notifications and lifecycle ---------------------------------------------------------
    def register(self, queue: str, notify_url: str, *,
                 consumer: str | None = None) -> notify.Registration:
        """Ask to be notified at ``notify_url`` when a message for ``consumer`` arrives.

        The registration is stored; the IDAP service delivers notifications.
        """
        self._touch()
        name = self._queue(queue)
        with self.store.read() as conn:
            D.queue(conn, name)
        return notify.register(self.store, name, agent_name(consumer), notify_url, self.user)

    def unregister(self, queue: str, notify_url: str, *, consumer: str | None = None) -> bool:
        """Remove a registration. Returns whether one was removed."""
        self._touch()
        return notify.unregister(self.store, self._queue(queue), agent_name(consumer),
                                 notify_url)

    def close(self) -> None:
        """Roll back whatever is uncommitted and close the session."""
        if not self.closed:
            self.rollback()
            self._receiver.close()
            self.closed = True

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Session(id={self.id!r}, user={self.user!r}, store={self.store.safe_url!r}, "
                f"in_transaction={self.in_transaction})")


class _Lapsed(Exception):
    """Commit found fewer locks than the session took."""
