"""A throwaway PostgreSQL cluster for the MCQ tests, and MCQs on it or on SQLite."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.store import sqlalchemy_url
from changeflow.state import StateStore
from changeflow.testing.pg_cluster import PG_BIN, PgCluster

_dbs = itertools.count(1)


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    """The session's PostgreSQL cluster, removed at the end."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 is not installed at {PG_BIN}; run make setup")
    cluster = PgCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pgdb(pg: PgCluster) -> str:
    """A fresh database of the cluster; its libpq URL."""
    return pg.createdb(f"mcq{next(_dbs)}")


def seeded(store: StateStore) -> MetaChangeQueue:
    """PERSON/Telephone, PERSON/PEOPLE, LOGINS; LDAP, ADSI, BEST and their interests."""
    q = MetaChangeQueue(store)
    q.add_table("PERSON", "Telephone", person_id="directory_telephone.person_id",
                aux_string="directory_telephone.tele_type")
    q.add_table("PERSON", "PEOPLE")
    q.add_table("LOGINS", pkey_string="logins.username")
    for name, freq in (("LDAP", "5s"), ("ADSI", "5s"), ("BEST", "daily")):
        q.add_listener(name, frequency=freq)
    q.add_interest("LDAP", "PERSON", "Telephone")
    q.add_interest("LDAP", "LOGINS")
    q.add_interest("ADSI", "LOGINS")
    q.add_interest("BEST", "PERSON", "*")
    return q


@pytest.fixture
def pg_mcq(pgdb: str) -> MetaChangeQueue:
    """An MCQ whose state store is a fresh PostgreSQL database."""
    return seeded(StateStore(sqlalchemy_url(pgdb)))


@pytest.fixture
def lite_mcq(tmp_path: Path) -> MetaChangeQueue:
    """An MCQ on a fresh embedded SQLite store."""
    return seeded(StateStore(f"sqlite:///{tmp_path}/state.db"))
