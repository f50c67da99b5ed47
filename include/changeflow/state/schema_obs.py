"""Tables of operations data: component runs, end-to-end lag histograms, rule statistics.

What the dictionary views (:mod:`changeflow.views`) and the metrics endpoint read
beside the queue catalog: every run of a capture, propagation or apply
(``cf_runs``), per apply run a histogram of source-commit-to-applied lag per source
database (``cf_lag_hist``), and per client the matches of each rule in its last run
(``cf_rule_stats``).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Float, Index, String, Table, Text
from sqlalchemy.engine import Connection

from changeflow.state.schema import ID, metadata
from changeflow.state.steps import Step, create_indexes, create_tables

runs = Table(
    "cf_runs",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("run_id", String(250), nullable=False),
    Column("kind", String(40), nullable=False),
    Column("name", String(200), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True)),
    Column("status", String(20), nullable=False),  # running | succeeded | failed
    Column("messages", BigInteger),
    Column("batches", BigInteger),
    Column("seconds", Float),
    Column("progress", Text),
    Column("error", Text),
    Column("details", Text),  # JSON: the run's result
    Column("process", String(300)),
    sqlite_autoincrement=True,
)

lag_hist = Table(
    "cf_lag_hist",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("apply", String(200), nullable=False),
    Column("source_database", String(300), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("run_id", String(250)),
    Column("n", BigInteger, nullable=False),
    Column("max_seconds", Float, nullable=False),
    Column("bins", Text, nullable=False),  # JSON {bin index: count}, see changeflow.obs.lag
    sqlite_autoincrement=True,
)

rule_stats = Table(
    "cf_rule_stats",
    metadata,
    Column("client", String(200), primary_key=True),
    Column("rule_set", String(200), primary_key=True),
    Column("rule", String(200), primary_key=True),
    Column("kind", String(40), nullable=False),
    Column("polarity", String(10), nullable=False),
    Column("evaluated", BigInteger, nullable=False),
    Column("matched", BigInteger, nullable=False),
    Column("run_id", String(250)),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
)

ix_runs = Index("ix_cf_runs_component", runs.c.kind, runs.c.name, runs.c.id)
ix_lag = Index("ix_cf_lag_hist_apply", lag_hist.c.apply, lag_hist.c.recorded_at)



def _v1(conn: Connection) -> None:
    create_tables(runs, lag_hist, rule_stats)(conn)
    create_indexes(ix_runs, ix_lag)(conn)


MIGRATIONS = [Step(1, "component runs, lag histograms, rule statistics", _v1)]
