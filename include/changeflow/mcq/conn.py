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
fifth use.
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


def _held(store: StateStore) -> Connection:
    conns: dict[str, Connection] = getattr(_local, "conns", None) or {}
    _local.conns = conns
    conn = conns.get(store.url)
    if conn is None or conn.closed or conn.invalidated:
        conn = store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        conns[store.url] = conn
    return conn


def _drop(store: StateStore) -> None:
    conns: dict[str, Connection] = getattr(_local, "conns", None) or {}
    conn = conns.pop(store.url, None)
    if conn is not None:
        try:
            conn.invalidate()
            conn.close()
        except Exception:  # noqa: BLE001 (it is broken already)
            pass


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
