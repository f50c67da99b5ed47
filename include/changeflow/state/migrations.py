"""Versioned migrations of the state store, one chain per domain.

Every table of the state store is declared on the one :data:`schema.metadata`, in a
``schema*`` module of this package, and created or changed only by a migration step.
Each domain (``core``, ``schedules``, ``quality``, ...) has its own chain of numbered
steps, so domains evolve independently; ``cf_schema_versions`` records how far each
domain's chain has run in this store. Opening a store runs the steps it has not run
yet, under a lock, so an upgrade of a running installation keeps its state:

* a fresh store runs every step;
* a store created before versioning existed (its tables present, no version rows)
  runs every step too, and each step is written to be a no-op on what already exists
  (``create_tables`` skips present tables, ``add_columns`` skips present columns).

A step is idempotent by construction, which is also what makes two processes opening
the same fresh store at once harmless.

>>> from changeflow.state import StateStore
>>> store = StateStore("sqlite://")
>>> versions(store)["core"] >= 1
True
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import inspect, select, text, update
from sqlalchemy.engine import Connection

from changeflow.state import schema
from changeflow.state.steps import Step

if TYPE_CHECKING:
    from changeflow.state import StateStore

log = logging.getLogger(__name__)

#: Domain name -> module declaring its tables and ``MIGRATIONS``. Order matters only
#: for foreign keys between domains (there are none).
DOMAINS: dict[str, str] = {
    "core": "changeflow.state.schema",
    "schedules": "changeflow.state.schema_schedules",
    "quality": "changeflow.state.schema_quality",
    "obs": "changeflow.state.schema_obs",
    "apply": "changeflow.state.schema_apply",
    "mcq": "changeflow.state.schema_mcq",
    "messaging": "changeflow.state.schema_messaging",
}


def _chain(domain: str) -> Sequence[Step]:
    module = importlib.import_module(DOMAINS[domain])
    steps: Sequence[Step] = module.MIGRATIONS
    numbers = [s.version for s in steps]
    if numbers != list(range(1, len(steps) + 1)):
        raise RuntimeError(f"migrations of domain {domain!r} are not numbered 1..n: {numbers}")
    return steps


def _lock(conn: Connection) -> None:
    # SQLite write transactions already begin IMMEDIATE (one writer at a time).
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(7714301)"))


def versions(store: StateStore) -> dict[str, int]:
    """How far each domain's chain has run in a store."""
    t = schema.schema_versions
    with store.read() as conn:
        found = {r.domain: r.version for r in conn.execute(select(t.c.domain, t.c.version))}
    return {d: found.get(d, 0) for d in DOMAINS}


def _pending(conn: Connection) -> dict[str, list[Step]]:
    t = schema.schema_versions
    if not inspect(conn).has_table(t.name):
        done: dict[str, int] = {}
    else:
        done = {r.domain: r.version for r in conn.execute(select(t.c.domain, t.c.version))}
    todo = {}
    for domain in DOMAINS:
        steps = [s for s in _chain(domain) if s.version > done.get(domain, 0)]
        if steps:
            todo[domain] = steps
    return todo


def upgrade(store: StateStore) -> list[tuple[str, int]]:
    """Run every step a store has not run yet. Returns the (domain, version) pairs run."""
    with store.read() as conn:
        if not _pending(conn):
            return []
    ran: list[tuple[str, int]] = []
    with store.begin() as conn:
        _lock(conn)
        schema.metadata.create_all(conn, tables=[schema.schema_versions], checkfirst=True)
        t = schema.schema_versions
        for domain, steps in _pending(conn).items():
            for step in steps:
                log.info("state store %s: %s migration %d: %s", store.safe_url, domain,
                         step.version, step.description)
                step.up(conn)
                ran.append((domain, step.version))
            last = steps[-1]
            values = {"version": last.version, "description": last.description[:300],
                      "applied_at": schema.utcnow()}
            if conn.execute(update(t).where(t.c.domain == domain).values(**values)).rowcount == 0:
                conn.execute(t.insert().values(domain=domain, **values))
    return ran
