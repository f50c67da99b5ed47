"""Real state stores for the messaging tests: SQLite files and a throwaway PostgreSQL.

``store`` runs a test on both: an embedded SQLite file and a fresh database of the
session's PostgreSQL cluster (its parameter is marked ``postgres``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from changeflow.messaging import admin
from changeflow.state import StateStore
from changeflow.testing.pg_cluster import PG_BIN, PgCluster

_dbs = itertools.count(1)


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    """The session's PostgreSQL cluster (started on first use, removed at the end)."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 is not installed at {PG_BIN}; run make setup")
    cluster = PgCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


def pg_url(pg: PgCluster) -> str:
    """A fresh database of the cluster, as a state-store URL."""
    return pg.createdb(f"aq{next(_dbs)}").replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new state store's URL: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/state.db"
        return
    url = pg_url(request.getfixturevalue("pg"))
    yield url
    close_pools(url)


def close_pools(url: str) -> None:
    """Close the connections the test's stores and sessions pooled (PostgreSQL has 100)."""
    from changeflow.messaging import engines
    from changeflow.state import _engines

    engines.dispose(url)
    engine = _engines.get(url)
    if engine is not None:
        engine.dispose()


@pytest.fixture()
def store(store_url: str) -> StateStore:
    """A new state store (SQLite or PostgreSQL)."""
    return StateStore(store_url)


@pytest.fixture()
def sqlite_store(tmp_path: Path) -> StateStore:
    """A new SQLite state store."""
    return StateStore(f"sqlite:///{tmp_path}/state.db")


def make_queue(store: StateStore, name: str = "app.q", *, payload: str = "RAW",
               sort: str = "enq_time", multi: bool = False, grouping: str = "none",
               secure: bool = False, **queue: object) -> str:
    """A started queue in its own queue table."""
    admin.create_queue_table(store, f"{name}_qt", payload, sort_list=sort,
                             multiple_consumers=multi, message_grouping=grouping,
                             secure=secure)
    admin.create_queue(store, name, f"{name}_qt", start=True, **queue)  # type: ignore[arg-type]
    return name


def rows(store: StateStore) -> list[tuple]:
    """Every message row, to check that a refused call changed nothing."""
    from sqlalchemy import select

    from changeflow.state import schema_messaging as S

    with store.read() as conn:
        return [tuple(r) for r in conn.execute(select(S.messages).order_by(S.messages.c.id))]
