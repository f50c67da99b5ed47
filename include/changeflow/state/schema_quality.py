"""The table of data-quality validation results (``cf_quality_results``)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, String, Table, Text

from changeflow.state.schema import ID, metadata
from changeflow.state.steps import Step, create_tables

results = Table(
    "cf_quality_results",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("stage", String(300), nullable=False, index=True),
    Column("subject", String(300), nullable=False),
    Column("producer", String(300)),
    Column("batch_id", String(64)),
    Column("status", String(10), nullable=False),  # passed | warned | failed
    Column("n_rows", BigInteger),
    Column("seconds", String(20)),
    Column("checks_json", Text, nullable=False),
    Column("gx_json", Text, nullable=False),
    Column("watermarks_json", Text),
    Column("quarantine_path", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


MIGRATIONS = [Step(1, "validation results", create_tables(results))]
