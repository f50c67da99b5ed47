"""Fixtures of the directed-network tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from changeflow.testing.pg_cluster import PG_BIN, PgCluster


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    """A PostgreSQL cluster for the two-way PostgreSQL test."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 is not installed at {PG_BIN}; run make setup")
    cluster = PgCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()
