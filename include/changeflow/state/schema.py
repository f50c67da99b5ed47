"""Tables of the runtime state store.

The store holds everything that must change atomically with a queue or target:
which batches a queue holds, each consumer's position, capture positions, apply
high-water marks and target manifests. SQLAlchemy Core keeps it portable: the
embedded default is SQLite, and a PostgreSQL URL works unchanged.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

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
