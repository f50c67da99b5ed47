"""Versioned migrations: fresh stores, stores from before versioning, idempotent reruns."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import inspect

from changeflow.queues import QueueCatalog
from changeflow.state import StateStore, migrations, schema
from changeflow.state.steps import Step

# The core tables as the previous release created them (no AQ columns, no batch state,
# no leases, quarantine or version table), with a queue, a consumer and a batch in them.
OLD_SCHEMA = """
CREATE TABLE cf_queues (name VARCHAR(200) PRIMARY KEY, queue_table VARCHAR(200) NOT NULL,
  sort_order VARCHAR(40) NOT NULL, multiple_consumers BOOLEAN NOT NULL,
  storage_path TEXT NOT NULL, created_at DATETIME NOT NULL);
CREATE TABLE cf_queue_batches (seq INTEGER PRIMARY KEY AUTOINCREMENT, queue VARCHAR(200) NOT NULL,
  batch_id VARCHAR(64) NOT NULL UNIQUE, path TEXT NOT NULL, n_messages BIGINT NOT NULL,
  n_bytes BIGINT NOT NULL, min_commit_scn BIGINT, max_commit_scn BIGINT, oldest_time DATETIME,
  producer VARCHAR(200) NOT NULL, dedup_key VARCHAR(300), source_last_seq BIGINT,
  created_at DATETIME NOT NULL, CONSTRAINT uq_batch_dedup UNIQUE (queue, dedup_key));
CREATE TABLE cf_queue_consumers (queue VARCHAR(200) NOT NULL, consumer VARCHAR(200) NOT NULL,
  kind VARCHAR(40) NOT NULL, position BIGINT NOT NULL, updated_at DATETIME NOT NULL,
  PRIMARY KEY (queue, consumer));
INSERT INTO cf_queues VALUES ('hr.q', 'hr.q_table', 'commit_time', 1, '/s/hr/q',
  '2026-01-01 00:00:00');
INSERT INTO cf_queue_batches (queue, batch_id, path, n_messages, n_bytes, producer, created_at)
  VALUES ('hr.q', 'b1', '/s/hr/q/batch-b1', 7, 700, 'capture:c', '2026-01-01 00:00:00');
INSERT INTO cf_queue_consumers VALUES ('hr.q', 'apply:a', 'apply', 0, '2026-01-01 00:00:00');
"""


def test_a_fresh_store_runs_every_chain(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path}/fresh.db")
    done = migrations.versions(store)
    assert done == {d: len(migrations._chain(d)) for d in migrations.DOMAINS}
    tables = set(inspect(store.engine).get_table_names())
    assert set(schema.metadata.tables) <= tables


def test_an_old_store_is_upgraded_in_place_keeping_its_state(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
    store = StateStore(f"sqlite:///{path}")
    cols = {c["name"] for c in inspect(store.engine).get_columns("cf_queue_batches")}
    assert {"state", "source_first_seq"} <= cols
    catalog = QueueCatalog(store, "/s")
    # The old batch is still there, visible, and the new columns took their defaults.
    [b] = catalog.pending("hr.q", "apply:a")
    assert (b.batch_id, b.n_messages) == ("b1", 7)
    props = catalog.properties("hr.q")
    assert props["status"] == "active" and props["max_retries"] == 5 and not props["secure"]
    assert migrations.versions(store)["core"] == len(schema.MIGRATIONS)
    # Running the upgrade again changes nothing.
    assert migrations.upgrade(store) == []


def test_chains_must_be_numbered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "MIGRATIONS", [Step(2, "skips one", lambda conn: None)])
    with pytest.raises(RuntimeError, match="not numbered 1..n"):
        migrations._chain("core")
