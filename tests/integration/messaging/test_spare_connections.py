"""The hot path's spare driver connections (``messaging.wire``): kept only when clean,
closed when the engine is disposed, never used across a fork."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from changeflow.messaging import connect, engines, wire
from changeflow.state import StateStore
from changeflow.testing.pg_cluster import PgCluster

from .conftest import make_queue, pg_url


def _spares(store: StateStore) -> list[Any]:
    found = wire._spares.get(engines.session_store(store).engine)
    return list(found.free) if found is not None else []


def test_a_failed_statement_does_not_leave_its_connection_for_the_next(
        tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    with wire.transaction(store) as cursor:
        cursor.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
        cursor.execute("INSERT INTO t VALUES (1)")
    kept = _spares(store)
    assert kept, "a clean transaction's connection was not kept"
    with pytest.raises(sqlite3.IntegrityError), wire.transaction(store) as cursor:
        cursor.execute("INSERT INTO t VALUES (2)")
        cursor.execute("INSERT INTO t VALUES (1)")  # fails: the transaction is undone
    assert _spares(store) == [], "the failed transaction's connection was kept"
    with wire.transaction(store, write=False) as cursor:
        cursor.execute("SELECT x FROM t ORDER BY x")
        assert [r[0] for r in cursor.fetchall()] == [1]
        assert cursor.connection.in_transaction is False


@pytest.mark.postgres
def test_disposing_the_engines_closes_the_spare_connections(pg: PgCluster) -> None:
    url = pg_url(pg)
    store = StateStore(url)
    make_queue(store, "app.q")
    s = connect(store)
    for i in range(5):
        s.enqueue("app.q", f"m{i}".encode(), commit=True)
    assert s.dequeue("app.q", wait=0, commit=True) is not None
    assert _spares(store), "the session kept no spare connection"
    db = url.split("@/", 1)[1].split("?")[0]
    with pg.connect("postgres") as admin_conn:
        def sessions() -> int:
            return int(admin_conn.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                          "datname = %s", (db,)).fetchone()[0])

        assert sessions() > 0
        engines.dispose(url)
        from changeflow.state import _engines

        _engines[url].dispose()
        deadline = time.monotonic() + 10  # a closed connection's backend exits soon after
        while sessions() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sessions() == 0, "a spare connection outlived the engines' dispose"
    s2 = connect(StateStore(url))  # the store works again after the dispose
    assert s2.dequeue("app.q", wait=0, commit=True) is not None
    engines.dispose(url)
    StateStore(url).engine.dispose()


def test_a_forked_process_does_not_use_its_parents_spares(tmp_path: Path) -> None:
    import multiprocessing as mp

    store = StateStore(f"sqlite:///{tmp_path / 'f.db'}")
    make_queue(store, "app.q")
    s = connect(store)
    s.enqueue("app.q", b"parent", commit=True)
    assert _spares(store)
    ctx = mp.get_context("fork")
    out = ctx.Queue()

    def child() -> None:
        offered = wire._spares_of(store.engine).take()  # the parent's, if it were allowed
        c = connect(store)
        m = c.dequeue("app.q", wait=0, commit=True)
        out.put((offered is None, m.payload if m else None))

    p = ctx.Process(target=child)
    p.start()
    refused, payload = out.get(timeout=60)
    p.join(timeout=60)
    assert p.exitcode == 0
    assert refused, "the child was handed a connection of its parent"
    assert payload == b"parent"


@pytest.mark.postgres
def test_the_hot_path_keeps_one_cursor_per_connection_and_drops_it_after_a_failure(
        pg: PgCluster) -> None:
    """PostgreSQL statements of the hot path run on a cursor kept with the connection
    (``wire._autocommit``): the same cursor while statements succeed, a new one after a
    statement failed, and a new connection and cursor after the backend was killed."""
    import psycopg

    url = pg_url(pg)
    store = StateStore(url)
    sstore = engines.session_store(store)
    make_queue(store, "app.cur")
    s = connect(store)
    s.enqueue("app.cur", b"a", commit=True)

    def kept() -> list[Any]:  # the cursor objects (not ids: a freed one's id is reused)
        return [c.info[wire._CURSOR] for c in _spares(store) if wire._CURSOR in c.info]

    def backend(cursor: Any) -> int:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])

    first = kept()
    assert len(first) == 1, "no cursor was kept with the spare connection"
    for i in range(5):
        s.enqueue("app.cur", f"m{i}".encode(), commit=True)
    assert kept()[0] is first[0], "a clean statement did not reuse the kept cursor"

    with pytest.raises(psycopg.errors.DivisionByZero):
        wire._autocommit(sstore, lambda cursor: cursor.execute("SELECT 1 / 0"))
    s.enqueue("app.cur", b"after the failure", commit=True)
    assert kept() and kept()[0] is not first[0], "the cursor of a failed statement was reused"

    pid = wire._autocommit(sstore, backend)
    with pg.connect("postgres") as admin_conn:
        admin_conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.2)
    from changeflow.errors import StateStoreError

    with pytest.raises(StateStoreError):
        wire._autocommit(sstore, backend)  # the killed backend: transient, connection dropped
    assert wire._autocommit(sstore, backend) != pid
    got = [s.dequeue("app.cur", wait=0, commit=True) for _ in range(8)]
    assert [m.payload for m in got if m is not None] == [
        b"a", *(f"m{i}".encode() for i in range(5)), b"after the failure"]
    engines.dispose(url)
    store.engine.dispose()
