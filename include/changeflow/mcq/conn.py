"""One-statement transactions for the hot paths (a log call, a get, an ack).

A claim, an ack, a put-back and a log call of a known pair are each a single SQL
statement, atomic by itself. On PostgreSQL they run on a connection this thread
keeps open in autocommit mode: one round trip each, instead of a pool checkout (with
its liveness ping), ``BEGIN``, the statement and ``COMMIT``. A connection that
breaks is dropped and the error raised as a transient
:class:`~changeflow.errors.StateStoreError`; the next call opens a new one. On SQLite
the statement runs in an ordinary write transaction of the store (``BEGIN
IMMEDIATE``: writers take turns).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

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
            _drop(store)
            raise StateStoreError(f"state store {store.safe_url!r}: "
                                  f"{str(exc).splitlines()[0]}") from exc
        raise


def close(store: StateStore) -> None:
    """Close this thread's held connection to a store (if any)."""
    _drop(store)
