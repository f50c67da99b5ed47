"""The runtime state store: an embedded SQLite database by default, PostgreSQL by URL.

Every table is declared on one metadata (:mod:`.schema` and its ``schema_*``
siblings) and created or changed only by versioned migrations (:mod:`.migrations`),
which run when a process first opens a store.

Writes go through :meth:`StateStore.begin`; reads through :meth:`StateStore.read`.
On SQLite a write transaction takes the database's write lock at ``BEGIN
IMMEDIATE`` (so two writers serialise instead of failing on upgrade), while a read
begins ``DEFERRED`` and never blocks a writer (WAL mode).

>>> store = StateStore("sqlite://")
>>> store.next_counter("scn:DBS1")
1
>>> store.next_counter("scn:DBS1")
2
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, Table, bindparam, create_engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import StaticPool

from changeflow.errors import StateStoreError
from changeflow.state import schema
from changeflow.state.schema import utcnow

__all__ = ["StateStore", "close_idle", "insert_if_absent", "schema", "utcnow"]

_engines: dict[str, Engine] = {}
_lock = threading.Lock()
_READ = "changeflow_read"


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        kwargs: dict = {"connect_args": {"timeout": 60}}
        if not path:
            kwargs["poolclass"] = StaticPool
            kwargs["connect_args"]["check_same_thread"] = False
        engine = create_engine(url, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragma(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            # WAL lets readers (the CLI, the UI) proceed while a job commits.
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.close()
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves

        @event.listens_for(engine, "begin")
        def _begin(conn):  # type: ignore[no-untyped-def]
            read = conn.get_execution_options().get(_READ, False)
            conn.exec_driver_sql("BEGIN" if read else "BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def close_idle() -> None:
    """Close every store's idle pooled connections; the stores stay usable and open new
    ones when next used. A process that has opened many stores (a test session, a
    server that met many sites) keeps no files or sockets open for them. An in-memory
    SQLite store keeps its one connection (closing it would drop the database)."""
    with _lock:
        engines = list(_engines.values())
    for engine in engines:
        if engine.url.get_backend_name() == "sqlite" and \
                engine.url.database in (None, "", ":memory:"):
            continue  # its one connection is the database
        engine.dispose()


def _insert(dialect: str) -> Any:
    """The dialect's ``insert`` (the one with ``on_conflict_do_*``)."""
    from sqlalchemy.dialects import postgresql, sqlite

    if dialect == "postgresql":
        return postgresql.insert
    if dialect == "sqlite":
        return sqlite.insert
    raise StateStoreError(f"state stores are SQLite or PostgreSQL, not {dialect}")


def insert_if_absent(conn: Connection, table: Table, values: dict[str, Any]) -> bool:
    """Insert a row unless one with the same key exists; returns whether it did.

    ``INSERT ... ON CONFLICT DO NOTHING``: rows made on first use (a schedule, an
    exception queue, a grant) by several processes at once end as one row, and none
    of them fails on the key.
    """
    key = list(table.primary_key.columns)[0]
    stmt = _insert(conn.dialect.name)(table).values(**values).on_conflict_do_nothing()
    # RETURNING, not rowcount: psycopg reports -1 for this INSERT
    return conn.execute(stmt.returning(key)).first() is not None


@functools.lru_cache(maxsize=4)
def _next_counter(dialect: str) -> Any:
    t = schema.counters
    stmt = _insert(dialect)(t).values(name=bindparam("name"), value=1)
    return stmt.on_conflict_do_update(
        index_elements=[t.c.name], set_={"value": t.c.value + 1}).returning(t.c.value)


def _safe(url: str) -> str:
    """A URL with its password hidden.

    >>> _safe("postgresql+psycopg://u:secret@h/db")
    'postgresql+psycopg://u:***@h/db'
    """
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


class StateStore:
    """A handle on one site's state store.

    Args:
        url: a SQLAlchemy URL, e.g. ``sqlite:///work/site1/state.db`` or
            ``postgresql+psycopg://user@host/db``.

    Raises:
        StateStoreError: the store cannot be reached (transient).
    """

    def __init__(self, url: str):
        from changeflow.state import migrations

        self.url = url
        self.safe_url = _safe(url)
        with _lock:
            engine = _engines.get(url)
            fresh = engine is None
            if engine is None:
                engine = _make_engine(url)
            self.engine = engine
            self.reader = engine.execution_options(**{_READ: True})
            if fresh:
                try:
                    migrations.upgrade(self)
                except (OperationalError, DBAPIError) as exc:
                    raise StateStoreError(
                        f"state store {self.safe_url!r} is unreachable: "
                        f"{str(exc).splitlines()[0]}") from exc
                _engines[url] = engine

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A write transaction: everything inside commits together or not at all."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except OperationalError as exc:
            raise StateStoreError(
                f"state store {self.safe_url!r}: transaction failed: "
                f"{str(exc).splitlines()[0]}") from exc

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (a consistent snapshot; takes no write lock)."""
        try:
            with self.reader.connect() as conn:
                yield conn
                conn.rollback()
        except OperationalError as exc:
            raise StateStoreError(
                f"state store {self.safe_url!r}: read failed: "
                f"{str(exc).splitlines()[0]}") from exc

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    def next_counter(self, name: str, conn: Connection | None = None) -> int:
        """Increment and return a named counter (e.g. a source's commit position).

        One statement, ``INSERT ... ON CONFLICT (name) DO UPDATE SET value = value + 1
        RETURNING value``: a counter is created by its first use, and first uses in
        several transactions at once queue on the row (or its key) instead of one of
        them failing on the primary key. The row stays locked until ``conn`` commits,
        so numbers are handed out in commit order.
        """
        if conn is None:
            with self.begin() as c:
                return self.next_counter(name, c)
        return int(conn.execute(_next_counter(self.dialect), {"name": name}).scalar_one())

