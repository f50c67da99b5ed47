"""Core tables of the runtime state store, and the ``core`` migration chain.

The store holds everything that must change atomically with a queue or target:
which batches a queue holds, each consumer's position, capture positions, apply
high-water marks and target manifests. SQLAlchemy Core keeps it portable: the
embedded default is SQLite, and a PostgreSQL URL works unchanged.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Connection

from changeflow.state.steps import Step, add_columns, create_indexes, create_tables

#: The one metadata every state-store table is declared on (see :mod:`.migrations`).
metadata = MetaData()


def utcnow() -> dt.datetime:
    """The current time, timezone-aware in UTC."""
    return dt.datetime.now(dt.UTC)


# BigInteger autoincrement is not an alias of ROWID on SQLite; Integer is, and is 64-bit there.
ID = BigInteger().with_variant(Integer(), "sqlite")

queues = Table(
    "cf_queues",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("queue_table", String(200), nullable=False),
    Column("sort_order", String(40), nullable=False),
    Column("multiple_consumers", Boolean, nullable=False),
    Column("storage_path", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # Advanced Queuing properties (DBMS_AQADM); defaults are Oracle's.
    Column("queue_type", String(20), nullable=False, server_default=text("'normal'")),
    Column("payload_type", String(200)),
    Column("max_retries", Integer, nullable=False, server_default=text("5")),
    Column("retry_delay", Float, nullable=False, server_default=text("0")),
    Column("retention_time", Float, nullable=False, server_default=text("0")),
    Column("secure", Boolean, nullable=False, server_default=text("false")),
    Column("enqueue_enabled", Boolean, nullable=False, server_default=text("true")),
    Column("dequeue_enabled", Boolean, nullable=False, server_default=text("true")),
    # A dropped queue keeps its row (status 'dropped') so nothing re-creates it unasked.
    Column("status", String(20), nullable=False, server_default=text("'active'")),
    Column("dropped_at", DateTime(timezone=True)),
    Column("comment", Text),
)

queue_batches = Table(
    "cf_queue_batches",
    metadata,
    Column("seq", ID, primary_key=True, autoincrement=True),
    Column("queue", String(200), nullable=False, index=True),
    Column("batch_id", String(64), nullable=False, unique=True),
    Column("path", Text, nullable=False),
    Column("n_messages", BigInteger, nullable=False),
    Column("n_bytes", BigInteger, nullable=False),
    Column("min_commit_scn", BigInteger),
    Column("max_commit_scn", BigInteger),
    Column("oldest_time", DateTime(timezone=True)),
    # Who enqueued it, and the key that makes a re-run of the same work a no-op.
    Column("producer", String(200), nullable=False),
    Column("dedup_key", String(300)),
    Column("source_last_seq", BigInteger),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # The first source sequence of the range a propagation committed (exclusive lower
    # bound + 1): two overlapping ranges of one producer can never both commit.
    Column("source_first_seq", BigInteger),
    # ready: consumers see it; quarantined: set aside (see cf_quarantine).
    Column("state", String(20), nullable=False, server_default=text("'ready'")),
    UniqueConstraint("queue", "dedup_key", name="uq_batch_dedup"),
    # Sequence numbers must never be reused after a purge, or a consumer whose position
    # is past a reused number would skip the new batch: AUTOINCREMENT on SQLite.
    sqlite_autoincrement=True,
)

queue_consumers = Table(
    "cf_queue_consumers",
    metadata,
    Column("queue", String(200), primary_key=True),
    Column("consumer", String(200), primary_key=True),
    Column("kind", String(40), nullable=False),
    Column("position", BigInteger, nullable=False, default=0),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

counters = Table(
    "cf_counters",
    metadata,
    Column("name", String(300), primary_key=True),
    Column("value", BigInteger, nullable=False),
)

capture_progress = Table(
    "cf_capture_progress",
    metadata,
    Column("capture", String(200), primary_key=True),
    Column("source_object", String(300), primary_key=True),
    Column("position", String(300), nullable=False),
    Column("commit_scn", BigInteger),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

apply_progress = Table(
    "cf_apply_progress",
    metadata,
    Column("apply", String(200), primary_key=True),
    Column("source_database", String(300), primary_key=True),
    Column("commit_scn", BigInteger, nullable=False),
    Column("commit_time", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

target_tables = Table(
    "cf_target_tables",
    metadata,
    Column("name", String(300), primary_key=True),
    Column("root", Text, nullable=False),
    Column("key_columns", Text, nullable=False),
    Column("columns_json", Text, nullable=False),
    Column("buckets", Integer, nullable=False),
    Column("version", BigInteger, nullable=False),
)

target_files = Table(
    "cf_target_files",
    metadata,
    Column("table_name", String(300), primary_key=True),
    Column("path", String(700), primary_key=True),
    Column("bucket", Integer, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("kind", String(10), nullable=False),
    Column("n_bytes", BigInteger, nullable=False),
)

apply_errors = Table(
    "cf_apply_errors",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("apply", String(200), nullable=False, index=True),
    Column("source_database", String(300)),
    Column("transaction_id", String(300)),
    Column("commit_scn", BigInteger),
    Column("failing_msg_id", String(64)),
    Column("error_message", Text, nullable=False),
    Column("path", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

batch_recipients = Table(
    "cf_batch_recipients",
    metadata,
    # When a batch has rows here, only these consumers see it (a released quarantined
    # batch goes back only to the consumers that had not read it).
    Column("seq", BigInteger, primary_key=True),
    Column("consumer", String(200), primary_key=True),
)

quarantine = Table(
    "cf_quarantine",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("queue", String(200), nullable=False, index=True),
    Column("seq", BigInteger, nullable=False),
    Column("batch_id", String(64), nullable=False),
    Column("path", Text, nullable=False),
    Column("n_messages", BigInteger, nullable=False),
    Column("reason", Text, nullable=False),
    Column("origin", String(40), nullable=False),  # operator | quality
    Column("waiting_consumers", Text, nullable=False),  # JSON list
    Column("quarantined_at", DateTime(timezone=True), nullable=False),
    Column("released_at", DateTime(timezone=True)),
    Column("released_seq", BigInteger),
    sqlite_autoincrement=True,
)

leases = Table(
    "cf_leases",
    metadata,
    Column("component", String(300), primary_key=True),
    Column("owner", String(300), nullable=False),
    # Raised on every acquisition: a holder whose token changed has lost the lease.
    Column("token", BigInteger, nullable=False),
    Column("acquired_at", DateTime(timezone=True), nullable=False),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

schema_versions = Table(
    "cf_schema_versions",
    metadata,
    Column("domain", String(100), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("description", String(300)),
    Column("applied_at", DateTime(timezone=True), nullable=False),
)

ix_batches_queue_seq = Index("ix_cf_queue_batches_queue_seq", queue_batches.c.queue,
                               queue_batches.c.seq)


def _v2(conn: Connection) -> None:
    add_columns(queues, "queue_type", "payload_type", "max_retries", "retry_delay",
                "retention_time", "secure", "enqueue_enabled", "dequeue_enabled", "status",
                "dropped_at", "comment")(conn)
    add_columns(queue_batches, "source_first_seq", "state")(conn)
    create_tables(batch_recipients, quarantine, leases)(conn)
    create_indexes(ix_batches_queue_seq)(conn)


MIGRATIONS = [
    Step(1, "queues, batches, consumers, counters, capture/apply progress, targets",
         create_tables(queues, queue_batches, queue_consumers, counters, capture_progress,
                       apply_progress, target_tables, target_files, apply_errors)),
    Step(2, "AQ queue properties, dropped queues, batch ranges and states, quarantine, leases",
         _v2),
]
