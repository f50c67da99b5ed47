"""The runtime state store: an embedded SQLite database by default, PostgreSQL by URL.

>>> store = StateStore("sqlite://")
>>> store.next_counter("scn:DBS1")
1
>>> store.next_counter("scn:DBS1")
2
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import StaticPool

from changeflow.errors import StateStoreError
from changeflow.state import schema

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def utcnow() -> dt.datetime:
    """The current time, timezone-aware in UTC."""
    return dt.datetime.now(dt.UTC)


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
            cur.close()
            # Take the write lock at BEGIN so two writers serialise instead of deadlocking.
            dbapi_conn.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(conn):  # type: ignore[no-untyped-def]
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True)


class StateStore:
    """A handle on one site's state store.

    Args:
        url: a SQLAlchemy URL, e.g. ``sqlite:///work/site1/state.db`` or
            ``postgresql+psycopg://user@host/db``.
    """

    def __init__(self, url: str):
        self.url = url
        with _lock:
            engine = _engines.get(url)
            if engine is None:
                engine = _make_engine(url)
                try:
                    schema.metadata.create_all(engine)
                except OperationalError as exc:
                    raise StateStoreError(f"state store {url!r} is unreachable: {exc}") from exc
                _engines[url] = engine
        self.engine = engine

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A transaction: everything inside commits together or not at all."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except OperationalError as exc:
            raise StateStoreError(f"state store transaction failed: {exc}") from exc

    def next_counter(self, name: str, conn: Connection | None = None) -> int:
        """Increment and return a named counter (e.g. a source's commit position)."""
        if conn is None:
            with self.begin() as c:
                return self.next_counter(name, c)
        t = schema.counters
        row = conn.execute(select(t.c.value).where(t.c.name == name)).first()
        if row is None:
            conn.execute(t.insert().values(name=name, value=1))
            return 1
        value = int(row[0]) + 1
        conn.execute(update(t).where(t.c.name == name).values(value=value))
        return value
