"""A session's cached view of the dictionary: queue properties, subscribers, privileges.

An entry is read in one read transaction, the dictionary version first
(:func:`changeflow.messaging.dictionary.version`), and is trusted while:

* it is younger than :data:`MAX_AGE` (changes made behind the messaging API's back,
  e.g. through the queue catalog, are seen within that time);
* no administrative call of this process happened since (``D.generation()``);
* the statements that use it find the store's version unchanged (they carry it:
  :func:`changeflow.messaging.dictionary.version_guard`); when one does not, the
  caller drops the entry (:meth:`Dictionary.forget`) and prepares again.

Privilege checks of secure queues are remembered per entry when they pass, and an entry
of a queue stopped for enqueue is read again before it is used (a refusal is never
cached: it is re-checked, and raised, every time).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow.messaging import dictionary as D
from changeflow.messaging import privileges

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from changeflow.state import StateStore

#: Seconds an entry is trusted without a version check by a statement.
MAX_AGE = 1.0


@dataclass
class QueueView:
    """What a session knows about one queue, as of dictionary ``version``."""

    props: D.QueueProps
    version: int
    generation: int
    loaded: float
    subscribers: tuple[D.Subscriber, ...] | None  # multi-consumer queues only
    allowed: set[tuple[str | None, str, str | None]] = field(default_factory=set)

    def fresh(self) -> bool:
        """Whether the entry may still be used (age, and this process's admin calls).

        An entry of a queue stopped for enqueue is never used: it would refuse, and a
        refusal is never taken from the cache (another process may have started the
        queue again, or dropped it, since the entry was read)."""
        return (self.props.enqueue_enabled
                and time.monotonic() - self.loaded < MAX_AGE
                and self.generation == D.generation())


class LazyRead:
    """A read connection opened on first use (a fresh cache needs none)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._cm: Any = None
        self._conn: Connection | None = None

    @property
    def conn(self) -> Connection:
        """The connection, opened now if needed."""
        if self._conn is None:
            self._cm = self.store.read()
            self._conn = self._cm.__enter__()
        return self._conn

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        """``Connection.execute`` on the (lazily opened) connection."""
        return self.conn.execute(*args, **kwargs)

    def close(self) -> None:
        """End the read transaction, if one was opened."""
        if self._cm is not None:
            cm, self._cm, self._conn = self._cm, None, None
            cm.__exit__(None, None, None)

    def __enter__(self) -> LazyRead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Dictionary:
    """The cached dictionary of one session."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueView] = {}

    def view(self, conn: Connection | LazyRead, name: str) -> QueueView:
        """The queue's entry: the cached one while fresh, else read now."""
        found = self.queues.get(name)
        if found is not None and found.fresh():
            return found
        return self.load(conn, name)

    def load(self, conn: Connection | LazyRead, name: str) -> QueueView:
        """Read a queue's entry (version first, so a racing change only looks newer).

        Raises:
            QueueNotFoundError, QueueDroppedError: no such queue (the entry is dropped).
        """
        self.queues.pop(name, None)
        c: Any = conn
        generation = D.generation()
        version = D.version(c)
        props = D.queue(c, name)
        subs = tuple(D.subscribers(c, name)) if props.multiple_consumers else None
        found = QueueView(props, version, generation, time.monotonic(), subs)
        self.queues[name] = found
        return found

    def current(self, conn: Connection | LazyRead, name: str) -> QueueView:
        """The entry, checked against the store's version now (one small read)."""
        found = self.queues.get(name)
        if found is not None and found.fresh() and D.version(conn) == found.version:  # type: ignore[arg-type]
            return found
        return self.load(conn, name)

    def forget(self, name: str) -> None:
        """Drop a queue's entry (a statement found the version moved)."""
        self.queues.pop(name, None)

    def check(self, conn: Connection | LazyRead, view: QueueView, user: str | None,
              privilege: str, agent: str | None = None) -> None:
        """:func:`changeflow.messaging.privileges.check`, remembered when it passes.

        Raises:
            SecurityError: the user may not (never cached).
        """
        if not view.props.secure:
            return
        key = (user, privilege, agent)
        if key in view.allowed:
            return
        privileges.check(conn, view.props, user, privilege, agent)  # type: ignore[arg-type]
        view.allowed.add(key)
