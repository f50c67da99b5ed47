"""Tables of propagation schedules (``cf_schedules``) and UNDELIVERABLE records."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, DateTime, Float, Integer, String, Table, Text

from changeflow.state.schema import ID, metadata
from changeflow.state.steps import Step, create_tables

schedules = Table(
    "cf_schedules",
    metadata,
    Column("propagation", String(200), primary_key=True),
    Column("start", DateTime(timezone=True), nullable=False),
    Column("duration", Float),
    Column("next_time", Float),
    Column("latency", Float, nullable=False),
    Column("disabled", Boolean, nullable=False, default=False),
    Column("disabled_reason", String(40)),
    Column("failures", Integer, nullable=False, default=0),
    Column("last_error_msg", Text),
    Column("last_error_time", DateTime(timezone=True)),
    Column("next_retry", DateTime(timezone=True)),
    Column("total_time", Float, nullable=False, default=0.0),
    Column("total_number", BigInteger, nullable=False, default=0),
    Column("total_bytes", BigInteger, nullable=False, default=0),
    Column("windows", BigInteger, nullable=False, default=0),
    Column("max_number", BigInteger, nullable=False, default=0),
    Column("max_bytes", BigInteger, nullable=False, default=0),
    Column("window_start", DateTime(timezone=True)),
    Column("window_number", BigInteger, nullable=False, default=0),
    Column("window_bytes", BigInteger, nullable=False, default=0),
    Column("last_run", DateTime(timezone=True)),
    Column("next_run", DateTime(timezone=True)),
    Column("process", String(300)),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

undeliverable = Table(
    "cf_undeliverable",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("propagation", String(200), nullable=False, index=True),
    Column("source_queue", String(200), nullable=False),
    Column("exception_queue", String(200), nullable=False),
    Column("source_seq", BigInteger, nullable=False),
    Column("exception_seq", BigInteger),
    Column("n_messages", BigInteger, nullable=False),
    Column("state", String(20), nullable=False),
    Column("error_message", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


MIGRATIONS = [
    Step(1, "schedules and UNDELIVERABLE records", create_tables(schedules, undeliverable)),
]
