"""What the IDAP service looks up for every request, cached per dictionary version.

Each request needs the queue's properties (kind, payload type, security) and the
database users its agent may act as. Read from the store every time, that is two read
transactions per request, more than the enqueue or dequeue itself on the embedded
store. :class:`Lookups` keeps them while the store's dictionary version is unchanged:
every administrative call of the messaging API (queues, subscribers, privileges,
``enable_db_access``), in any process, raises that version, and each request reads it
first (one precompiled single-row read, :mod:`changeflow.messaging.wire`). Entries are
also dropped after :data:`changeflow.messaging.cache.MAX_AGE` seconds, so changes made
behind the API's back (the queue catalog directly) are seen within that time, as by
the messaging sessions.

>>> from changeflow.state import StateStore
>>> from changeflow.messaging import admin
>>> store = StateStore("sqlite://")
>>> _ = admin.create_queue_table(store, "app.qt", "RAW")
>>> _ = admin.create_queue(store, "app.q", "app.qt", start=True)
>>> look = Lookups(store)
>>> look.begin()
>>> look.props("app.q").name, look.props("app.q") is look.props("app.q")
('app.q', True)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from changeflow.messaging import cache, wire
from changeflow.messaging import dictionary as D
from changeflow.messaging.engines import session_store
from changeflow.messaging.model import queue_name
from changeflow.state import StateStore


class Lookups:
    """Queue properties and agents' users, trusted while the dictionary version holds."""

    def __init__(self, store: StateStore) -> None:
        self.store = session_store(store)
        self._lock = threading.Lock()
        self._version: int | None = None
        self._generation = -1
        self._loaded = 0.0
        self._props: dict[str, D.QueueProps] = {}
        self._users: dict[str, list[str]] = {}

    def begin(self) -> None:
        """Check the store's dictionary version (once per request); drop what moved."""
        stmt = wire.compiled(self.store.engine, "idap:dver", _version_statement,
                             list(_version_statement().selected_columns))
        version = int(stmt.read(self.store, {})[0].v)
        generation = D.generation()
        with self._lock:
            if (version != self._version or generation != self._generation
                    or time.monotonic() - self._loaded >= cache.MAX_AGE):
                self._props.clear()
                self._users.clear()
                self._version, self._generation = version, generation
                self._loaded = time.monotonic()

    def props(self, queue: str) -> D.QueueProps:
        """A queue's properties (read when not cached).

        Raises:
            QueueNotFoundError, QueueDroppedError: no such queue (never cached).
        """
        name = queue_name(queue)
        return self._get(self._props, name, lambda: self._read(lambda c: D.queue(c, name)))

    def users(self, agent: str, load: Callable[[], list[str]]) -> list[str]:
        """The database users of ``agent``: ``load()`` when not cached."""
        return list(self._get(self._users, agent, load))

    def _get(self, table: dict[str, Any], key: str, load: Callable[[], Any]) -> Any:
        with self._lock:
            found = table.get(key)
            version = self._version
        if found is not None:
            return found
        value = load()
        with self._lock:  # kept only when read under a checked version
            if version is not None and self._version == version:
                table[key] = value
        return value

    def _read(self, fn: Callable[[Any], Any]) -> Any:
        with self.store.read() as conn:
            return fn(conn)


def _version_statement() -> Any:
    return _VERSION


_VERSION = select(D.version_value().label("v"))
