"""What the messaging layer reads about queues, types and subscribers (the dictionary).

A queue's properties come from its row in the queue catalog (``cf_queues``, the
single owner of queue state) joined with its queue table (``cf_aq_queue_tables``). A
queue declared for LCRs (``queues:`` in the pipeline file) has no queue-table row: it
is a multi-consumer ANYDATA queue with the catalog's sort order.

Sessions cache what they read here (queue properties, subscribers, privilege
verdicts) and trust it while the *dictionary version* is unchanged: a counter
(``cf_counters`` row ``aq:dictionary``) that every administrative call raises
(:func:`bump`, after its change committed). The hot statements carry the version they
were prepared under (:func:`version_guard`): an enqueue or dequeue prepared before an
``add_subscriber``, ``alter_subscriber``, ``revoke`` ... in *any* process finds the
version moved, writes nothing, and is prepared again from a fresh read. Changes made
behind the messaging API's back (the queue catalog directly) are seen within a second
(the cache's age limit), and the statements themselves require the queue active and
started, so ``stop_queue`` and ``drop_queue`` always take effect at once. Message
types, immutable once created, are cached without limit.

>>> exception_queue_name("hr.orders_qt")
'hr.aq$_orders_qt_e'
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.engine import Connection

from changeflow.errors import QueueDroppedError, QueueNotFoundError
from changeflow.messaging import types as T
from changeflow.messaging.constants import sort_order
from changeflow.state import StateStore, schema
from changeflow.state import schema_messaging as S

Q = schema.queues
QT = S.queue_tables


def exception_queue_name(queue_table: str) -> str:
    """The exception queue of a queue table: ``owner.aq$_<table>_e`` (Oracle's name)."""
    owner, _, name = queue_table.lower().partition(".")
    return f"{owner}.aq$_{name}_e"


@dataclass(frozen=True)
class QueueProps:
    """A queue's properties as enqueue and dequeue use them."""

    name: str
    queue_table: str
    queue_type: str
    sort_order: str
    multiple_consumers: bool
    payload_type: str
    max_retries: int
    retry_delay: float
    retention_time: float
    secure: bool
    enqueue_enabled: bool
    dequeue_enabled: bool
    message_grouping: str
    storage_path: str
    managed: bool  # has a queue-table row (created through DBMS_AQADM or the config)

    @property
    def owner(self) -> str:
        """The owning schema (the part before the dot), upper case like a user name."""
        return self.name.split(".", 1)[0].upper()

    @property
    def exception_queue(self) -> str:
        """The default exception queue of the queue's queue table."""
        return exception_queue_name(self.queue_table)

    @property
    def is_exception(self) -> bool:
        """Whether this queue is an exception queue."""
        return self.queue_type == "exception"

    @property
    def commit_ordered(self) -> bool:
        """Whether messages are ordered by commit sequence (``commit_time`` orders)."""
        return self.sort_order.endswith("commit_time")

    @property
    def by_priority(self) -> bool:
        """Whether the sort order starts with priority."""
        return self.sort_order.startswith("priority")


def _props(m: Any) -> QueueProps:
    # A queue whose queue table is declared (cf_aq_queue_tables) takes the table's AQ
    # properties, also when the catalog created it first for LCRs (``queues:``).
    managed = m["qt_name"] is not None
    return QueueProps(
        name=m["name"], queue_table=m["queue_table"], queue_type=m["queue_type"] or "normal",
        sort_order=sort_order(m["qt_sort_order"] if managed else m["sort_order"]),
        multiple_consumers=bool(m["qt_multiple"] if managed else m["multiple_consumers"]),
        payload_type=T.canonical_type_name(m["payload_type"] or m["qt_payload_type"]
                                           or "SYS.ANYDATA"),
        max_retries=int(m["max_retries"]), retry_delay=float(m["retry_delay"]),
        retention_time=float(m["retention_time"]),
        secure=bool(m["secure"]) or bool(m["qt_secure"]),
        enqueue_enabled=bool(m["enqueue_enabled"]), dequeue_enabled=bool(m["dequeue_enabled"]),
        message_grouping=m["message_grouping"] or "none", storage_path=m["storage_path"],
        managed=managed)


_SELECT = select(Q, QT.c.name.label("qt_name"), QT.c.message_grouping,
                 QT.c.sort_order.label("qt_sort_order"),
                 QT.c.multiple_consumers.label("qt_multiple"),
                 QT.c.payload_type.label("qt_payload_type"),
                 QT.c.secure.label("qt_secure")).select_from(
    Q.outerjoin(QT, QT.c.name == Q.c.queue_table))
_BY_NAME = _SELECT.where(Q.c.name == bindparam("p_name"))
_LOCKED = _BY_NAME.with_for_update(of=Q)


def queue(conn: Connection, name: str, *, allow_dropped: bool = False,
          lock: bool = False) -> QueueProps:
    """A queue's properties.

    Args:
        lock: take the queue row's lock (PostgreSQL) until the transaction ends.

    Raises:
        QueueNotFoundError: no such queue; QueueDroppedError: it was dropped.
    """
    name = name.lower()
    row = conn.execute(_LOCKED if lock else _BY_NAME, {"p_name": name}).first()
    if row is None:
        raise QueueNotFoundError(f"queue {name!r} does not exist")
    m = row._mapping
    if m["status"] == "dropped" and not allow_dropped:
        raise QueueDroppedError(
            f"queue {name!r} was dropped at {m['dropped_at']}; it is not re-created "
            "automatically")
    return _props(m)


def all_queues(conn: Connection) -> list[QueueProps]:
    """Every queue that is not dropped, by name."""
    rows = conn.execute(_SELECT.where(Q.c.status != "dropped").order_by(Q.c.name))
    return [_props(r._mapping) for r in rows]


_generation = [0]
#: The ``cf_counters`` row holding the dictionary version.
VERSION = "aq:dictionary"
_C = schema.counters
_VERSION_VALUE = func.coalesce(
    select(_C.c.value).where(_C.c.name == VERSION).scalar_subquery(), 0)


def changed(store: StateStore | None = None) -> None:
    """Note that an administrative call changed queues, subscribers or privileges.

    Sessions of this process re-check their cached dictionary at once; with ``store``,
    the store's dictionary version is raised too (:func:`bump`), so that sessions of
    every other process do at their next enqueue or dequeue.
    """
    _generation[0] += 1
    if store is not None:
        bump(store)


def bump(store: StateStore) -> int:
    """Raise the store's dictionary version (its own transaction); returns the new one."""
    return store.next_counter(VERSION)


def version(conn: Connection) -> int:
    """The store's dictionary version (0 before any administrative call)."""
    return int(conn.execute(select(_VERSION_VALUE)).scalar_one())


def version_value() -> Any:
    """The dictionary version as an SQL expression (to read it along with a query)."""
    return _VERSION_VALUE


def version_guard() -> Any:
    """A predicate, true while the dictionary version is ``:p_dver`` (for hot statements)."""
    return bindparam("p_dver") == _VERSION_VALUE


def generation() -> int:
    """How many administrative changes this process has made."""
    return _generation[0]


class _TypeCache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.types: dict[tuple[str, str], T.TypeDef] = {}

    def forget(self, url: str, name: str) -> None:
        with self.lock:
            self.types.pop((url, name), None)


TYPES = _TypeCache()


def message_type(conn: Connection, url: str, name: str) -> T.TypeDef:
    """A message type by name: built in, or declared in this store.

    Raises:
        UnknownTypeError: neither.
    """
    found = T.builtin(name)
    if found is not None:
        return found
    canonical = T.canonical_type_name(name)
    key = (url, canonical)
    with TYPES.lock:
        cached = TYPES.types.get(key)
    if cached is not None:
        return cached
    t = S.message_types
    row = conn.execute(select(t).where(t.c.name == canonical)).first()
    if row is None:
        known = [r[0] for r in conn.execute(select(t.c.name).order_by(t.c.name))]
        raise T.unknown_type(name, known)
    found = T.from_row(row.name, row.kind, row.fields_json)
    with TYPES.lock:
        TYPES.types[key] = found
    return found


@dataclass(frozen=True)
class Subscriber:
    """A subscriber of a multi-consumer queue (``name`` empty: a remote topic)."""

    queue: str
    name: str
    address: str
    rule: str | None
    kind: str

    @property
    def remote(self) -> bool:
        """Whether messages for it are propagated to another queue."""
        return bool(self.address)

    def __str__(self) -> str:
        return f"{self.name}@{self.address}" if self.address else self.name


def subscribers(conn: Connection, queue: str) -> list[Subscriber]:
    """The subscribers of a queue, by name."""
    t = S.subscribers
    rows = conn.execute(select(t).where(t.c.queue == queue.lower())
                        .order_by(t.c.name, t.c.address))
    return [Subscriber(r.queue, r.name, r.address, r.rule, r.kind) for r in rows]
