"""One-statement transactions for the hot paths (a log call, a get, an ack).

A claim, an ack, a put-back and a log call of a known pair are each a single SQL
statement, atomic by itself. On PostgreSQL they run on a connection this thread
keeps open in autocommit mode: one round trip each, instead of a pool checkout (with
its liveness ping), ``BEGIN``, the statement and ``COMMIT``. A connection that
breaks is dropped and the error raised as a transient
:class:`~changeflow.errors.StateStoreError`; the next call opens a new one. On SQLite
the statement runs in an ordinary write transaction of the store (``BEGIN
IMMEDIATE``: writers take turns).

The hottest statements (a worker's claim and ack) go one step further on PostgreSQL:
:func:`driver` hands out the psycopg connection under the held one, and they run there
as SQL compiled once (:func:`compiled`), skipping SQLAlchemy's per-statement work
(about a third of a get+ack's time); psycopg prepares them server-side after their
fifth use. The held connection plans them once: ``plan_cache_mode =
force_generic_plan`` for its session. Left to choose, PostgreSQL compares a prepared
statement's generic plan with the custom plans of its first uses, and a worker whose
early polls ran against a very different table (a million pending entries, before
ANALYZE) can be left planning every later poll afresh (a tenth of a millisecond
each). The hot statements are lookups on the primary key or the partial pending
index, the right plan whatever the values. Because of that session setting a held
connection never goes back to the pool: it is invalidated when dropped, or when its
thread ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError

from changeflow.errors import StateStoreError

if TYPE_CHECKING:
    from changeflow.state import StateStore

_local = threading.local()
#: Session settings of a held PostgreSQL connection (see the module doc).
PG_SESSION = ("SET plan_cache_mode = force_generic_plan",)


class _Held:
    """A thread's held connection to one store; invalidated, never returned to the pool
    with its session settings, when dropped or garbage-collected with its thread."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def discard(self) -> None:
        try:
            self.conn.invalidate()
            self.conn.close()
        except Exception:  # noqa: BLE001 (broken already, or the interpreter is exiting)
            pass

    def __del__(self) -> None:
        self.discard()


def _held(store: StateStore) -> Connection:
    conns: dict[str, _Held] = getattr(_local, "conns", None) or {}
    _local.conns = conns
    held = conns.get(store.url)
    if held is None or held.conn.closed or held.conn.invalidated:
        conn = store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        held = conns[store.url] = _Held(conn)
        if store.dialect == "postgresql":
            for setting in PG_SESSION:
                conn.exec_driver_sql(setting)
    return held.conn


def _drop(store: StateStore) -> None:
    conns: dict[str, _Held] = getattr(_local, "conns", None) or {}
    held = conns.pop(store.url, None)
    if held is not None:
        held.discard()


@contextmanager
def statement(store: StateStore) -> Iterator[Connection]:
    """A connection on which each statement commits by itself (see the module doc)."""
    if store.dialect != "postgresql":
        with store.begin() as conn:
            yield conn
        return
    try:
        yield _held(store)
    except (OperationalError, DBAPIError) as exc:
        if isinstance(exc, OperationalError) or exc.connection_invalidated:
            raise _broken(store, exc) from exc
        raise


def _broken(store: StateStore, exc: Exception) -> StateStoreError:
    _drop(store)
    return StateStoreError(f"state store {store.safe_url!r}: {str(exc).splitlines()[0]}")


@contextmanager
def driver(store: StateStore) -> Iterator[Any]:
    """The psycopg connection under this thread's held autocommit connection (PostgreSQL).

    A psycopg error that broke the connection drops it and is raised as a transient
    :class:`~changeflow.errors.StateStoreError`; other database errors pass through.
    """
    import psycopg

    try:
        raw: Any = _held(store).connection.driver_connection
    except (OperationalError, DBAPIError) as exc:
        raise _broken(store, exc) from exc
    try:
        yield raw
    except psycopg.Error as exc:
        if isinstance(exc, psycopg.OperationalError) or raw.broken or raw.closed:
            raise _broken(store, exc) from exc
        raise


def compiled(stmt: Any, store: StateStore) -> tuple[str, dict[str, Any]]:
    """A statement's SQL for the store's driver, and the values of its fixed parameters
    (a ``LIMIT 1``, a ``SET column = NULL``); the caller supplies the others."""
    c = stmt.compile(dialect=store.engine.dialect)
    return str(c), {c.bind_names[b]: b.value for b in c.binds.values() if not b.required}


def close(store: StateStore) -> None:
    """Close this thread's held connection to a store (if any)."""
    _drop(store)
