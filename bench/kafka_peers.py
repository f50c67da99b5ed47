"""Debezium's PostgreSQL connector as a benchmark peer: a real broker, a real Kafka Connect.

Shared by :mod:`bench.pg_bench` (the connector's throughput on the capture's pgbench
backlog, its lag at a steady rate) and :mod:`bench.kafka_bench` (its topics, read by the
``kafka`` capture and by Spark's plain Kafka source).

The connector reads a ``pgoutput`` slot created before the backlog was written, with
``snapshot.mode = no_data``: with no stored offset it streams from the slot's confirmed
position, so it reads exactly the backlog the other readers read (the end offsets must
reach the backlog's count of row changes, or the run fails). Its topics are created
beforehand with ``message.timestamp.type = LogAppendTime``: a record's timestamp is the
time the broker appended it, which the lag is measured against.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from changeflow.testing.kafka import KafkaBroker, KafkaConnect, debezium_postgres
from changeflow.testing.pg_cluster import PgCluster

PREFIX = "dbz"


def topics_of(tables: list[str], prefix: str = PREFIX) -> list[str]:
    """The connector's topic of each ``public`` table."""
    return [f"{prefix}.public.{t}" for t in tables]


def end_offsets(spark: Any, bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """Every partition's end offset, asked of the broker by the capture's own probe."""
    from changeflow.debezium.config import KafkaSource
    from changeflow.debezium.kafka import broker_offsets

    source = KafkaSource(type="kafka", database="BENCH", bootstrap_servers=bootstrap,
                         topics=topics)
    return {k: end for k, (_, end) in broker_offsets(spark, source).items()}


@dataclass
class DebeziumPeer:
    """A tuned broker and Connect worker, and the connector's topics."""

    tables: list[str]
    broker: KafkaBroker = field(default_factory=lambda: KafkaBroker(tuned=True))
    connect: KafkaConnect | None = None

    @property
    def topics(self) -> list[str]:
        """The tables' topics."""
        return topics_of(self.tables)

    def start(self) -> DebeziumPeer:
        """Start the broker, create the topics (log-append timestamps), start Connect."""
        self.broker.start()
        for topic in self.topics:
            self.broker.create_topic(topic, message_timestamp_type="LogAppendTime")
        self.connect = KafkaConnect(self.broker, tuned=True).start()
        return self

    def stop(self) -> None:
        """Stop Connect and the broker; their files go."""
        if self.connect is not None:
            self.connect.stop()
        self.broker.stop()

    def stream(self, spark: Any, pg: PgCluster, db: str, *, slot: str, publication: str,
               expected: int, timeout: float = 3600.0) -> float:
        """Seconds from adding the connector (reading ``slot``) until the topics hold
        ``expected`` records; nothing subtracted (its start, snapshot of the schema,
        connection to PostgreSQL are in the time).

        Raises:
            RuntimeError: the connector failed, or the count was not reached in time.
        """
        assert self.connect is not None
        config = debezium_postgres(
            "bench", port=pg.port, dbname=db, prefix=PREFIX,
            tables=[f"public.{t}" for t in self.tables],
            **{"snapshot.mode": "no_data", "slot.name": slot, "publication.name": publication,
               "publication.autocreate.mode": "disabled"})
        started = time.perf_counter()
        self.connect.add("bench", config, timeout=300)
        self.wait(spark, expected, timeout)
        return time.perf_counter() - started

    def count(self, spark: Any) -> int:
        """Records in the topics now (one partition each, nothing deleted)."""
        return sum(end_offsets(spark, self.broker.bootstrap, self.topics).values())

    def wait(self, spark: Any, expected: int, timeout: float = 3600.0) -> None:
        """Poll the end offsets every 0.2 s until they sum to ``expected``.

        Raises:
            RuntimeError: more records than expected, or not all of them in time.
        """
        deadline = time.monotonic() + timeout
        got = 0
        while time.monotonic() < deadline:
            got = self.count(spark)
            if got > expected:
                raise RuntimeError(f"the connector wrote {got} records, {expected} expected")
            if got == expected:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the connector wrote {got} of {expected} records in "
                           f"{timeout:.0f} s")

    def lags(self, spark: Any, since: dict[tuple[str, int], int]) -> list[float]:
        """Seconds from each record's source commit (``payload.source.ts_ms``) to its
        append to the topic, for the records after the offsets ``since``."""
        import json

        from pyspark.sql import functions as F

        start = {t: {str(p): o for (tt, p), o in since.items() if tt == t} for t in self.topics}
        rows = (spark.read.format("kafka")
                .option("kafka.bootstrap.servers", self.broker.bootstrap)
                .option("subscribe", ",".join(self.topics))
                .option("startingOffsets", json.dumps(start))
                .option("endingOffsets", "latest").load()
                .where(F.col("value").isNotNull())
                .select(((F.col("timestamp").cast("double") * 1000) - F.get_json_object(
                    F.col("value").cast("string"), "$.payload.source.ts_ms").cast("double")
                         ).alias("ms")).collect())
        return [r.ms / 1000.0 for r in rows if r.ms is not None]


def pgbench_transactions(output: str) -> int:
    """The transactions pgbench processed, from its report.

    >>> pgbench_transactions("number of transactions actually processed: 1234\\nlatency")
    1234
    """
    for line in output.splitlines():
        if line.startswith("number of transactions actually processed:"):
            return int(line.split(":")[1].split("/")[0].strip())
    raise ValueError(f"no transaction count in pgbench's report: {output[-500:]}")


def percentile(xs: list[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``xs``, nearest rank; None when empty.

    >>> percentile([3.0, 1.0, 2.0, 4.0], 0.5), percentile([], 0.95)
    (2.0, None)
    """
    if not xs:
        return None
    ordered = sorted(xs)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]
