"""Waking waiting consumers, and notification registrations (IDAP ``AQXmlRegister``).

A dequeue with a ``wait_time`` polls the store with a short backoff (a few ms, growing
to ``poll_max``), so it returns soon after a message commits in any process. Inside
one process a commit also *wakes* the waiters of its queues at once, through
:func:`signal`. On SQLite a commit in another process wakes them within
:data:`SLICE` seconds too: between polls a waiter watches the database file's
``PRAGMA data_version`` (:class:`FileWatch`, a read of shared memory, no lock), and
polls again as soon as it moves.

Registrations (``notify_url`` per queue and consumer) are stored here; delivering
them (HTTP POST of ``AQXmlNotification``, mail) is the IDAP service's job: it reads
:func:`registrations` and can follow commits in its own process with
:func:`add_listener`.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from changeflow.messaging.errors import MessagePropertyError
from changeflow.state import StateStore, utcnow
from changeflow.state import schema_messaging as S

log = logging.getLogger(__name__)

_lock = threading.Lock()
_conditions: dict[tuple[str, str], threading.Condition] = {}
_generation: dict[tuple[str, str], int] = {}
#: Called after a commit made messages visible: (store url, queue, msg ids).
Listener = Callable[[str, str, list[str]], None]
_listeners: list[Listener] = []


def _condition(url: str, queue: str) -> threading.Condition:
    key = (url, queue)
    with _lock:
        cond = _conditions.get(key)
        if cond is None:
            cond = _conditions[key] = threading.Condition()
            _generation[key] = 0
        return cond


def generation(url: str, queue: str) -> int:
    """A counter raised by every :func:`signal` of a queue (read before polling)."""
    cond = _condition(url, queue)
    with cond:
        return _generation[(url, queue)]


#: Seconds between two looks at a SQLite file's ``data_version`` by a waiting dequeue.
SLICE = 0.002


class FileWatch:
    """Commits to a SQLite database by other connections (``PRAGMA data_version``).

    Its own connection (the pragma compares calls on one connection); a read of the
    WAL index in shared memory, without a transaction or lock.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "w.db")
    >>> w = FileWatch(path); before = w.mark()
    >>> c = sqlite3.connect(path); _ = c.execute("CREATE TABLE t (x)"); c.commit()
    >>> w.mark() != before
    True
    >>> w.close()
    """

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def mark(self) -> int | None:
        """The current data version (None: unreadable now, e.g. the file is busy)."""
        try:
            return int(self.conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            return None

    def close(self) -> None:
        """Close the watching connection."""
        self.conn.close()


def wait(url: str, queue: str, seen: int, timeout: float, watch: FileWatch | None = None,
         mark: int | None = None) -> None:
    """Sleep up to ``timeout`` seconds, less if the queue is signalled after ``seen``,
    or (with ``watch``) once the file's data version is no longer ``mark``."""
    cond = _condition(url, queue)
    key = (url, queue)
    if watch is None or mark is None:
        with cond:
            if _generation[key] == seen:
                cond.wait(timeout)
        return
    end = time.monotonic() + timeout
    while True:
        with cond:
            if _generation[key] != seen:
                return
            left = end - time.monotonic()
            if left <= 0:
                return
            cond.wait(min(SLICE, left))
        if watch.mark() != mark:
            return


def signal(url: str, queue: str, msg_ids: list[str]) -> None:
    """Wake this process's waiters on a queue and call the listeners."""
    cond = _condition(url, queue)
    with cond:
        _generation[(url, queue)] += 1
        cond.notify_all()
    for listener in list(_listeners):
        try:
            listener(url, queue, msg_ids)
        except Exception:  # noqa: BLE001  (a listener must never fail a commit)
            log.exception("messaging listener %r failed", listener)


def add_listener(listener: Listener) -> None:
    """Call ``listener(store_url, queue, msg_ids)`` after each commit in this process."""
    _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    """Stop calling a listener."""
    if listener in _listeners:
        _listeners.remove(listener)


@dataclass(frozen=True)
class Registration:
    """A request to be notified when a message for ``consumer`` arrives on ``queue``."""

    queue: str
    consumer: str
    notify_url: str
    db_user: str | None


def register(store: StateStore, queue: str, consumer: str, notify_url: str,
             user: str | None) -> Registration:
    """Store a registration (idempotent).

    Raises:
        MessagePropertyError: the URL is not ``http(s)://`` or ``mailto:``.
    """
    url = notify_url.strip()
    if not url.lower().startswith(("http://", "https://", "mailto:", "plsql://")):
        raise MessagePropertyError(
            f"notify_url {notify_url!r} must start with http://, https://, mailto: or plsql://")
    t = S.registrations
    try:
        with store.begin() as conn:
            conn.execute(t.insert().values(queue=queue, consumer=consumer, notify_url=url,
                                           db_user=user, created_at=utcnow()))
    except IntegrityError:
        pass
    return Registration(queue, consumer, url, user)


def unregister(store: StateStore, queue: str, consumer: str, notify_url: str) -> bool:
    """Remove a registration. Returns whether one was removed."""
    t = S.registrations
    with store.begin() as conn:
        done = conn.execute(delete(t).where(t.c.queue == queue, t.c.consumer == consumer,
                                            t.c.notify_url == notify_url.strip()))
    return bool(done.rowcount)


def registrations(store: StateStore, queue: str | None = None) -> list[Registration]:
    """The registrations of one queue, or all."""
    t = S.registrations
    stmt = select(t).order_by(t.c.queue, t.c.consumer, t.c.id)
    if queue is not None:
        stmt = stmt.where(t.c.queue == queue)
    with store.read() as conn:
        return [Registration(r.queue, r.consumer, r.notify_url, r.db_user)
                for r in conn.execute(stmt)]
