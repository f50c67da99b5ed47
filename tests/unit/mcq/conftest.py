"""An MCQ on a fresh embedded store per test, registered like the seed's deployment."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.mcq.api import MetaChangeQueue
from changeflow.state import StateStore


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    """A fresh SQLite state store."""
    return StateStore(f"sqlite:///{tmp_path}/state.db")


@pytest.fixture
def mcq(store: StateStore) -> MetaChangeQueue:
    """PERSON/Telephone, PERSON/Status and LOGINS; listeners LDAP, ADSI, BEST."""
    q = MetaChangeQueue(store)
    q.add_table("PERSON", "Telephone", person_id="directory_telephone.person_id")
    q.add_table("PERSON", "Status")
    q.add_table("LOGINS", pkey_string="logins.username")
    for name, freq in (("LDAP", "5s"), ("ADSI", "5s"), ("BEST", "daily")):
        q.add_listener(name, frequency=freq)
    q.add_interest("LDAP", "PERSON", "Telephone")
    q.add_interest("LDAP", "LOGINS")
    q.add_interest("ADSI", "LOGINS")
    q.add_interest("BEST", "PERSON", "*")
    return q
