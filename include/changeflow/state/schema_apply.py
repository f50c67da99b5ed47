"""Tables of the ``apply`` domain: the error queue, applied transactions, handlers.

* ``cf_apply_error_queue``: one row per failed source transaction (or user message):
  its identity, the failing message and error, and ``lcr_path``, a Parquet file that
  holds *every* LCR of the transaction (the LCR contract), so a failed transaction
  survives the purge of the batches it came in and can be re-executed.
* ``cf_apply_txns`` and ``cf_apply_watermarks``: which source transactions an apply
  has applied (or set aside in its error queue), exactly, per transaction; older
  entries collapse into a per-source watermark (see :mod:`changeflow.apply.positions`).
* ``cf_apply_conflict_handlers``: conflict handlers set with ``changeflow apply
  conflict-handlers set`` (``DBMS_APPLY_ADM.SET_UPDATE_CONFLICT_HANDLER``), besides
  those in the configuration.
* ``cf_apply_dropped_tables``: Parquet target tables a DROP TABLE removed, so later
  LCRs for them fail clearly instead of re-creating them silently.
* ``cf_target_stats``: the row count of each Parquet target table, kept by the apply,
  so its quality check does not count whole tables.
* ``cf_apply_status``: the last run of each apply, for the views.

Step 1 also moves what the old core tables held: ``cf_apply_progress`` marks become
watermarks (they meant "everything up to here is applied"), and ``cf_apply_errors``
rows become error-queue entries without LCRs (those were never kept).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    inspect,
    select,
)
from sqlalchemy.engine import Connection

from changeflow.state import schema
from changeflow.state.schema import ID, metadata, utcnow
from changeflow.state.steps import Step, create_tables

error_queue = Table(
    "cf_apply_error_queue",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("apply", String(200), nullable=False, index=True),
    # source \x1f commit position \x1f transaction id; "msg:<id>" for a user message
    Column("txn_key", String(700), nullable=False),
    Column("source_database", String(300)),
    Column("transaction_id", String(300)),
    Column("commit_scn", BigInteger),
    Column("commit_time", DateTime(timezone=True)),
    Column("failing_msg_id", String(64)),
    Column("failing_position", BigInteger),
    Column("error_kind", String(40), nullable=False),
    Column("error_message", Text, nullable=False),
    Column("n_messages", BigInteger, nullable=False, default=0),
    Column("tables", Text),  # JSON list of the tables the transaction touches
    Column("lcr_path", Text),  # Parquet file of every LCR; NULL for pre-v1 records
    Column("attempts", Integer, nullable=False, default=1),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("apply", "txn_key", name="uq_cf_apply_error_queue_txn"),
    sqlite_autoincrement=True,
)

applied_txns = Table(
    "cf_apply_txns",
    metadata,
    Column("apply", String(200), primary_key=True),
    Column("source_database", String(300), primary_key=True),
    Column("commit_scn", BigInteger, primary_key=True),
    Column("transaction_id", String(300), primary_key=True),
    Column("commit_time", DateTime(timezone=True)),
    Column("outcome", String(20), nullable=False),  # applied | error
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Index("ix_cf_apply_txns_time", "apply", "source_database", "commit_time"),
)

watermarks = Table(
    "cf_apply_watermarks",
    metadata,
    Column("apply", String(200), primary_key=True),
    Column("source_database", String(300), primary_key=True),
    Column("commit_scn", BigInteger, nullable=False),
    Column("commit_time", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

conflict_handlers = Table(
    "cf_apply_conflict_handlers",
    metadata,
    Column("apply", String(200), primary_key=True),
    Column("table_name", String(300), primary_key=True),
    Column("conflict", String(20), primary_key=True),  # update | uniqueness | delete
    Column("columns_key", String(2000), primary_key=True),  # sorted, comma-joined
    Column("method", String(20), nullable=False),
    Column("resolution_column", String(300)),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

dropped_tables = Table(
    "cf_apply_dropped_tables",
    metadata,
    Column("table_name", String(300), primary_key=True),
    Column("source_database", String(300)),
    Column("commit_scn", BigInteger),
    Column("dropped_at", DateTime(timezone=True), nullable=False),
)

target_stats = Table(
    "cf_target_stats",
    metadata,
    Column("table_name", String(300), primary_key=True),
    Column("row_count", BigInteger, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

apply_status = Table(
    "cf_apply_status",
    metadata,
    Column("apply", String(200), primary_key=True),
    Column("last_run_at", DateTime(timezone=True), nullable=False),
    Column("batches", BigInteger, nullable=False, default=0),
    Column("messages", BigInteger, nullable=False, default=0),
    Column("transactions", BigInteger, nullable=False, default=0),
    Column("changes", BigInteger, nullable=False, default=0),
    Column("errors", BigInteger, nullable=False, default=0),
    Column("skipped", BigInteger, nullable=False, default=0),
    Column("enqueued", BigInteger, nullable=False, default=0),
    Column("seconds", Float, nullable=False, default=0.0),
    Column("total_transactions", BigInteger, nullable=False, default=0),
    Column("total_errors", BigInteger, nullable=False, default=0),
)

TABLES = (error_queue, applied_txns, watermarks, conflict_handlers, dropped_tables,
          target_stats, apply_status)


def _v1(conn: Connection) -> None:
    create_tables(*TABLES)(conn)
    have = set(inspect(conn).get_table_names())
    now = utcnow()
    if schema.apply_progress.name in have:
        known = {(r[0], r[1]) for r in conn.execute(
            select(watermarks.c.apply, watermarks.c.source_database))}
        for r in conn.execute(select(schema.apply_progress)).mappings().all():
            if (r["apply"], r["source_database"]) not in known:
                conn.execute(watermarks.insert().values(
                    apply=r["apply"], source_database=r["source_database"],
                    commit_scn=r["commit_scn"], commit_time=r["commit_time"], updated_at=now))
    if schema.apply_errors.name in have:
        for r in conn.execute(select(schema.apply_errors)).mappings().all():
            key = f"{r['source_database']}\x1f{r['commit_scn']}\x1f{r['transaction_id']}"
            if conn.execute(select(error_queue.c.id).where(
                    error_queue.c.apply == r["apply"], error_queue.c.txn_key == key)).first():
                continue
            conn.execute(error_queue.insert().values(
                apply=r["apply"], txn_key=key, source_database=r["source_database"],
                transaction_id=r["transaction_id"], commit_scn=r["commit_scn"],
                failing_msg_id=r["failing_msg_id"], error_kind="legacy",
                error_message=f"{r['error_message']} (recorded before the error queue kept "
                              "whole transactions: its LCRs were not kept)",
                n_messages=0, lcr_path=None, attempts=1, created_at=r["created_at"],
                updated_at=r["created_at"]))


MIGRATIONS = [
    Step(1, "apply error queue with whole transactions, applied transactions and watermarks, "
            "conflict handlers, dropped tables, target stats, apply status; moves "
            "cf_apply_progress and cf_apply_errors", _v1),
]
