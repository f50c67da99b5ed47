"""Tables of the Meta Change Queue (seed 004), and the ``mcq`` migration chain.

The names and columns are the seed's: ``meta_change_tables`` (Table 3),
``meta_change_listeners`` (Table 4), ``meta_change_interests`` (Table 6) and
``meta_change_queue`` (Table 7). changeflow adds:

* ``meta_change_queue.lane`` (0 real time, 1 bulk: the seed's "Bulk Priority Queue")
  and ``claimed_by`` (which worker holds an entry it got, so two workers of one
  listener never process the same entry and an ack can be checked);
* scheduling and monitoring columns on the listeners, and how an entry got but not
  acknowledged comes back (``workers``, ``redeliver``);
* ``meta_change_process_monitor``: the process monitor's marks (seed reference 5);
* ``meta_change_pump``: entries moved from a source database's change log, so a
  pump that crashed between its two commits neither loses nor duplicates.

The poll stays cheap as processed entries pile up because the index it uses is
*partial*: ``queue_name`` is cleared when an entry is processed, and only rows whose
``queue_name`` is set are in the index (the seed keeps its index small the same way).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    SmallInteger,
    String,
    Table,
    Text,
    text,
)

from changeflow.state.schema import ID, metadata
from changeflow.state.steps import Step, add_columns, create_tables

tables = Table(
    "meta_change_tables",
    metadata,
    Column("tname", String(64), primary_key=True),
    Column("subtype", String(64), primary_key=True),  # '' when the table has none
    Column("comments", String(255)),
    Column("call_stack", Text),
    Column("stack_date", DateTime(timezone=True)),
    Column("person_id", String(255)),
    Column("pkey_string", String(255)),
    Column("pkey_number", String(255)),
    Column("aux_string", String(255)),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

listeners = Table(
    "meta_change_listeners",
    metadata,
    Column("proc_name", String(64), primary_key=True),
    Column("comments", String(1024)),
    Column("role", String(64)),
    Column("owner", String(255)),
    Column("call_stack", Text),
    Column("stack_date", DateTime(timezone=True)),
    # How often it runs (seconds) and how long it may go without marking that it is alive.
    Column("frequency", Float, nullable=False, server_default=text("86400")),
    Column("alert_after", Float),
    Column("claim_timeout", Float, nullable=False, server_default=text("300")),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # How many workers consume it, and when an entry got but not acked comes back:
    # 'immediate' (the seed's Get_Changes) or 'claim_timeout'; NULL: by workers.
    Column("workers", Integer, nullable=False, server_default=text("1")),
    Column("redeliver", String(16)),
)

interests = Table(
    "meta_change_interests",
    metadata,
    Column("proc_name", String(64), primary_key=True),
    Column("tname", String(64), primary_key=True),
    Column("subtype", String(64), primary_key=True),  # '' none, '*' every subtype
    Column("comments", String(1024)),
)

queue = Table(
    "meta_change_queue",
    metadata,
    Column("entry_number", ID, primary_key=True, autoincrement=True),
    Column("tname", String(64), nullable=False),
    Column("subtype", String(64), nullable=False, server_default=text("''")),
    Column("rrowid", String(255)),
    Column("change_type", String(1), nullable=False),
    Column("person_id", BigInteger),
    Column("pkey_string", String(255)),
    Column("pkey_number", BigInteger),
    Column("aux_string", String(255)),
    Column("entry_date", DateTime(timezone=True), nullable=False),
    Column("proc_date", DateTime(timezone=True)),
    Column("hold_until", DateTime(timezone=True)),
    Column("queue_name", String(64)),
    Column("proc_name", String(64), nullable=False),
    Column("retry_count", Integer, nullable=False, server_default=text("0")),
    Column("lane", SmallInteger, nullable=False, server_default=text("0")),
    Column("claimed_by", String(64)),
    # entry_number is never reused, even after a purge.
    sqlite_autoincrement=True,
)

# The poll's index: pending entries only (processed rows have queue_name NULL).
ix_queue_pending = Index(
    "ix_meta_change_queue_pending", queue.c.queue_name, queue.c.lane, queue.c.entry_number,
    sqlite_where=queue.c.queue_name.isnot(None),
    postgresql_where=queue.c.queue_name.isnot(None),
)

process_monitor = Table(
    "meta_change_process_monitor",
    metadata,
    Column("proc", String(200), primary_key=True),
    Column("listener", String(64)),
    Column("expect_every", Float, nullable=False),
    Column("alert_after", Float, nullable=False),
    Column("last_mark", DateTime(timezone=True)),
    Column("marked_by", String(300)),
    Column("marks", BigInteger, nullable=False, server_default=text("0")),
    Column("registered_at", DateTime(timezone=True), nullable=False),
    Column("alerted_at", DateTime(timezone=True)),
    # last_mark when the alert went out: a later mark means the process is back.
    Column("alerted_mark", DateTime(timezone=True)),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
)

pump = Table(
    "meta_change_pump",
    metadata,
    Column("source", String(64), primary_key=True),
    Column("log_id", BigInteger, primary_key=True),
    Column("moved_at", DateTime(timezone=True), nullable=False),
)

MIGRATIONS = [
    Step(1, "meta change tables, listeners, interests, queue (partial pending index), "
            "process monitor, pump",
         create_tables(tables, listeners, interests, queue, process_monitor, pump)),
    Step(2, "listeners: workers and redeliver (immediate or after the claim timeout)",
         add_columns(listeners, "workers", "redeliver")),
]
