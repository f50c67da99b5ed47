"""Benchmark: the ``kafka`` capture of Debezium's topics against Spark's plain Kafka source.

1. A pgbench database (scale 5, 4 clients running 25,000 transactions each: 400,000
   change events; small: scale 1, 5,000 each: 80,000) in a throwaway cluster; a
   ``pgoutput`` slot created after ``pgbench -i``, so the backlog is pgbench's own
   transactions (three updates and an insert each).
2. Debezium's PostgreSQL connector (Kafka Connect, JsonConverter with schemas) streams
   that backlog into a KRaft broker (:mod:`bench.kafka_peers`); its time is reported.
   Connect and PostgreSQL stop before anything is timed.
3. ``kafka_capture.vs_spark_kafka_source``: the capture (``run_kafka_capture``, a
   capture rule set, quality checks on) of the four topics into a queue, against Spark's
   plain Kafka source reading the same topics in the same session and writing them to
   Parquet with the capture's own read schema (``from_json(value, <read schema>)``: no
   inference, no survey, no conversion). Three runs each, alternating, each capture run
   into a fresh pipeline; warm is the best of the second and third runs, the first are
   the cold figure, and the one-shot figure adds a Spark session and the GX context
   (:mod:`bench.startup`). Target >= 0.6 (warm).

Run it alone with ``python -m bench.kafka_bench [small|full]``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench import kafka_peers, startup
from bench.results import entry, skipped
from changeflow.testing.pg_cluster import PgCluster

SIZES = {"small": {"scale": 1, "transactions": 5_000},
         "full": {"scale": 5, "transactions": 25_000}}  # per client, 4 clients
TABLES = {"pgbench_accounts": "aid", "pgbench_branches": "bid", "pgbench_tellers": "tid",
          "pgbench_history": "hid"}
SLOT, PUBLICATION = "dbz_kbench", "kbench"
PIPELINE = """
version: 1
rules: rules.yaml
sites:
  s1: {{staging_root: s1/staging, target_root: s1/targets, state_url: "sqlite:///s1/state.db",
       database: DBS1.EXAMPLE.COM}}
queues: [{{name: bench.q, site: s1}}]
captures:
  - name: kcap
    queue: bench.q@s1
    source: {{type: kafka, database: PG1.EXAMPLE.COM, bootstrap_servers: "{bootstrap}",
              topics: {topics}, tables: {tables}}}
"""
RULES = """
rules:
  PUBLIC: {condition: "((:dml.get_object_owner() = 'PUBLIC') and :dml.is_null_tag() = 'Y' )"}
rule_sets: {S: {rules: [PUBLIC]}}
clients: {kcap: {type: capture, positive_rule_set: S}}
"""


def _backlog(spark: Any, pg: PgCluster, peer: kafka_peers.DebeziumPeer,
             params: dict[str, int]) -> tuple[int, float]:
    """pgbench's run in Debezium's topics: ``(records, seconds the connector took)``."""
    pg.createdb("ksrc")
    pg.tool("pgbench", "-q", "-i", "-I", "dtp", "-s", str(params["scale"]), db="ksrc")
    pg.sql("ksrc", "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")
    pg.tool("pgbench", "-q", "-i", "-I", "g", "-s", str(params["scale"]), db="ksrc")
    pg.sql("ksrc", f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {', '.join(TABLES)};"
                   f"SELECT pg_create_logical_replication_slot('{SLOT}', 'pgoutput')")
    report = pg.tool("pgbench", "-n", "-c", "4", "-j", "2", "-t", str(params["transactions"]),
                     db="ksrc")
    records = 4 * kafka_peers.pgbench_transactions(report)  # tpcb-like: 3 updates, 1 insert
    seconds = peer.stream(spark, pg, "ksrc", slot=SLOT, publication=PUBLICATION,
                          expected=records)
    return records, seconds


def _raw_copy(spark: Any, bootstrap: str, topics: list[str], out: Path) -> float:
    """Seconds of Spark's plain Kafka source writing the topics to Parquet, parsed with
    the capture's read schema."""
    from pyspark.sql import functions as F

    from changeflow.debezium.reader import read_schema

    t = time.perf_counter()
    (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest")
     .option("endingOffsets", "latest").load()
     .select(F.from_json(F.col("value").cast("string"), read_schema(True)).alias("j"),
             "topic", "partition", "offset")
     .select("j.*", "topic", "partition", "offset").write.parquet(str(out)))
    return time.perf_counter() - t


def _capture(spark: Any, run: Path, bootstrap: str, topics: list[str], records: int) -> float:
    """Seconds of the capture of every record into a fresh pipeline's queue."""
    from changeflow.clients import rule_filter
    from changeflow.config import load_config
    from changeflow.debezium.kafka import run_kafka_capture

    run.mkdir(parents=True)
    tables = json.dumps([{"name": f"public.{t}", "key": [k]} for t, k in TABLES.items()])
    (run / "rules.yaml").write_text(textwrap.dedent(RULES))
    (run / "p.yaml").write_text(PIPELINE.format(bootstrap=bootstrap, topics=json.dumps(topics),
                                                tables=tables))
    cfg = load_config(run / "p.yaml")
    t = time.perf_counter()
    result = run_kafka_capture(spark, cfg, "kcap", rule_filter(cfg, "capture", "kcap"))
    seconds = time.perf_counter() - t
    if result.messages != records:
        raise RuntimeError(f"the capture took {result.messages} of {records} records")
    return seconds


def run(spark: Any, scale: str = "small") -> list[dict[str, Any]]:
    """Run the benchmark and return its entries."""
    if spark is None:
        from changeflow.spark import get_session

        spark = get_session("kafka-bench")
    params = SIZES.get(scale, SIZES["small"])
    work = Path(tempfile.mkdtemp(prefix="changeflow-kafkabench-"))
    peer = kafka_peers.DebeziumPeer(list(TABLES))
    pg = PgCluster()
    what = ("Spark's Kafka source (spark.read.format('kafka')) reading the same topics, "
            "from_json(value, <the capture's read schema>), written to Parquet; same "
            "session, warm")
    try:
        pg.start()
        peer.start()
        records, dbz_seconds = _backlog(spark, pg, peer, params)
        assert peer.connect is not None
        peer.connect.stop()
        pg.stop()
        startup.warm_gx()
        raw_times, cap_times = [], []
        for attempt in range(3):
            raw_times.append(_raw_copy(spark, peer.broker.bootstrap, peer.topics,
                                       work / f"raw{attempt}"))
            cap_times.append(_capture(spark, work / f"run{attempt}", peer.broker.bootstrap,
                                      peer.topics, records))
    except Exception as exc:  # noqa: BLE001  (a failed peer or setup is a miss with its reason)
        return [skipped("kafka_capture.vs_spark_kafka_source",
                        f"{type(exc).__name__}: {exc}"[:400], unit="events/s", baseline=what,
                        target=0.6, direction=">=", headline=True, figures=params)]
    finally:
        peer.stop()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    raw, cap = min(raw_times[1:]), min(cap_times[1:])
    spark_start, gx = startup.spark_session(), startup.gx_context()
    return [entry(
        "kafka_capture.vs_spark_kafka_source", value=records / cap, unit="events/s",
        baseline=what, baseline_value=records / raw, target=0.6, direction=">=", headline=True,
        figures={"events": records, "topics": len(peer.topics),
                 "raw_runs": [round(x, 2) for x in raw_times],
                 "capture_runs": [round(x, 2) for x in cap_times],
                 "cold_ratio": round(raw_times[0] / cap_times[0], 3),
                 "one_shot_ratio": round((raw_times[0] + spark_start)
                                         / (cap_times[0] + spark_start + gx), 3),
                 "rules": "1 schema rule", "quality": "on (lcr_batch suite)",
                 "debezium_seconds": round(dbz_seconds, 2),
                 "debezium_events_per_s": round(records / dbz_seconds),
                 "pgbench_scale": params["scale"],
                 "pgbench_transactions": 4 * params["transactions"]})]


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING)
    size = sys.argv[1] if len(sys.argv) > 1 else "small"
    print(json.dumps(run(None, size), indent=2, default=str))
