"""Fixtures of the Kafka tests: one PostgreSQL cluster, KRaft broker and Kafka Connect
worker (Debezium streaming ``public.customers``) for the whole package, and a pipeline
with a ``kafka`` capture of given topics."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.config import PipelineConfig, load_config
from changeflow.testing.kafka import KafkaBroker, KafkaConnect, debezium_postgres
from changeflow.testing.pg_cluster import PgCluster

FIXTURES = Path(__file__).parents[2] / "fixtures" / "debezium" / "pg-3.6.1"
TABLE = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, score double precision,
                        amount numeric(10,2), born date, seen timestamptz);
INSERT INTO customers VALUES (1, 'Ann', 1.5, 10.25, '2000-01-01', '2024-01-02 03:04:05+00'),
                             (2, 'Bob', NULL, NULL, NULL, NULL);
"""


@pytest.fixture(scope="package")
def stack() -> Iterator[dict[str, Any]]:
    """PostgreSQL, a broker, Connect with Debezium streaming ``public.customers``."""
    pg = PgCluster().start()
    broker = KafkaBroker().start()
    connect = KafkaConnect(broker).start()
    try:
        pg.sql("postgres", TABLE)
        connect.add("pg1", debezium_postgres("pg1", port=pg.port, dbname="postgres",
                                             prefix="pg1", tables=["public.customers"],
                                             **{"provide.transaction.metadata": "true"}))
        yield {"pg": pg, "broker": broker, "connect": connect}
    finally:
        connect.stop()
        broker.stop()
        pg.stop()


def pipeline(root: Path, broker: KafkaBroker, topics: list[str],
              table: str = "{name: public.customers, key: [id]}") -> PipelineConfig:
    path = root / "pipeline.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        sites:
          s1: {{staging_root: {root}/staging, target_root: {root}/targets,
               state_url: "sqlite:///{root}/state.db", database: DBS1.EXAMPLE.COM}}
        queues: [{{name: strm.q, site: s1}}]
        captures:
          - name: kcap
            queue: strm.q@s1
            source:
              type: kafka
              database: PG1.EXAMPLE.COM
              bootstrap_servers: {broker.bootstrap}
              topics: {json.dumps(topics)}
              tables: [{table}]
    """))
    return load_config(path)



def queue_rows(cfg: PipelineConfig) -> list[dict[str, Any]]:
    from changeflow.debezium.export import queue_batches
    from changeflow.queues import arrow_io

    batches = queue_batches(cfg, "strm.q@s1")
    return arrow_io.read_arrow_batches(batches).to_pylist() if batches else []




def customer_event(**changes: Any) -> str:
    """A real insert of the connector (with its schema), into ``public.customers``,
    its ``after`` image's values replaced by ``changes``."""
    line = (FIXTURES / "customers.jsonl").read_text().splitlines()[8]
    event = json.loads(line.replace('"schema":"inventory"', '"schema":"public"'))
    event["payload"]["after"].update(changes)
    return json.dumps(event, separators=(",", ":"))
