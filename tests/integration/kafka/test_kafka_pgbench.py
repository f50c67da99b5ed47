"""pgbench → Debezium's PostgreSQL connector → Kafka → the ``kafka`` capture → propagation
→ the PostgreSQL apply (and, in the long run with the capture killed, an Iceberg apply):
the targets' rows equal the source's, every record captured once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from changeflow.config import PipelineConfig, load_config
from changeflow.debezium.kafka import run_kafka_capture, stored_offsets
from changeflow.sites import queue_site
from changeflow.testing.kafka import debezium_postgres
from changeflow.testing.pg_cluster import PgCluster

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

PGBENCH_TABLES = {"pgbench_accounts": "aid", "pgbench_branches": "bid",
                  "pgbench_tellers": "tid", "pgbench_history": "hid"}
SNAPSHOT_ROWS = 1 + 10 + 1000
# pgbench's tpcb-like transaction over 1,000 accounts, 10 tellers and one branch (the
# built-in script draws from scale x 100,000 accounts): three updates and an insert
PGBENCH_SCRIPT = """\
\\set aid random(1, 1000)
\\set tid random(1, 10)
\\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = 1;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)
  VALUES (:tid, 1, :aid, :delta, CURRENT_TIMESTAMP);
END;
"""
CAPTURE_LOOP = "\n".join([
    "import sys, time",
    "from changeflow.config import load_config",
    "from changeflow.debezium.kafka import run_kafka_capture",
    "from changeflow.spark import get_session",
    "spark, cfg = get_session('kafka-capture-loop'), load_config(sys.argv[1])",
    "end = time.monotonic() + float(sys.argv[2])",
    "while time.monotonic() < end:",
    "    run_kafka_capture(spark, cfg, 'kcap')",
    "    time.sleep(0.5)"])


def _pgbench_source(spark: Any, stack: dict[str, Any], tmp_path: Path,
                    name: str) -> PipelineConfig:
    """Databases ``<name>`` (1,011 rows, streamed by a connector ``<name>`` once its
    snapshot is in Kafka) and ``<name>_dst`` (the same tables, empty), and a pipeline:
    the ``kafka`` capture, a propagation to a second site, a PostgreSQL apply and an
    Iceberg apply."""
    pg, broker, connect = stack["pg"], stack["broker"], stack["connect"]
    for db in (name, f"{name}_dst"):
        pg.createdb(db)
        pg.tool("pgbench", "-q", "-i", "-I", "dtp", "-s", "1", db=db)
        pg.sql(db, "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")
    pg.sql(name, """
        INSERT INTO pgbench_branches VALUES (1, 0, '');
        INSERT INTO pgbench_tellers SELECT t, 1, 0, '' FROM generate_series(1, 10) t;
        INSERT INTO pgbench_accounts SELECT a, 1, 0, '' FROM generate_series(1, 1000) a;
    """)
    connect.add(name, debezium_postgres(
        name, port=pg.port, dbname=name, prefix=name,
        tables=[f"public.{t}" for t in PGBENCH_TABLES],
        **{"provide.transaction.metadata": "true"}))
    os.environ[f"CF_{name.upper()}_DST"] = pg.url(f"{name}_dst")
    tables = json.dumps([{"name": f"public.{t}", "key": [k]} for t, k in PGBENCH_TABLES.items()])
    topics = json.dumps([f"{name}.public.{t}" for t in PGBENCH_TABLES] + [f"{name}.transaction"])
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        sites:
          s1: {{staging_root: {tmp_path}/s1/staging, target_root: {tmp_path}/s1/targets,
               state_url: "sqlite:///{tmp_path}/s1/state.db", database: DBS1.EXAMPLE.COM}}
          s2: {{staging_root: {tmp_path}/s2/staging, target_root: {tmp_path}/s2/targets,
               state_url: "sqlite:///{tmp_path}/s2/state.db", database: DBS2.EXAMPLE.COM}}
        queues: [{{name: strm.cq, site: s1}}, {{name: strm.aq, site: s2}}]
        captures:
          - name: kcap
            queue: strm.cq@s1
            source: {{type: kafka, database: PG1.EXAMPLE.COM,
                      bootstrap_servers: {broker.bootstrap}, topics: {topics},
                      tables: {tables}}}
        propagations:
          - {{name: p12, source_queue: strm.cq@s1, destination_queue: strm.aq@s2}}
        applies:
          - name: topg
            queue: strm.aq@s2
            target: {{type: postgres, url_env: CF_{name.upper()}_DST}}
          - {{name: toiceberg, queue: strm.aq@s2}}
    """))
    cfg = load_config(path)
    _wait_records(spark, cfg, SNAPSHOT_ROWS)
    return cfg


def _wait_records(spark: Any, cfg: PipelineConfig, n: int,
                  timeout: float = 300.0) -> None:
    """Wait until the tables' topics hold ``n`` records (end offsets, asked of the broker
    by the capture's own probe on the test's Spark session)."""
    from changeflow.debezium.kafka import broker_offsets, kafka_source

    source = kafka_source(cfg.component("capture", "kcap"))
    deadline, got = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        got = sum(end for (topic, _), (_, end) in broker_offsets(spark, source).items()
                  if not topic.endswith(".transaction"))
        if got >= n:
            assert got == n, f"the connector wrote {got} records, {n} expected"
            return
        time.sleep(1)
    raise AssertionError(f"the connector wrote {got} of {n} records in {timeout:.0f} s")


def _pgbench(stack: dict[str, Any], tmp_path: Path, db: str, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "tpcb-1000.sql"
    script.write_text(PGBENCH_SCRIPT)
    argv = stack["pg"].argv("pgbench", "-n", "-f", str(script), *args, db=db)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _transactions(bench: subprocess.Popen[str], timeout: float) -> int:
    out, _ = bench.communicate(timeout=timeout)
    assert bench.returncode == 0, out
    line = next(x for x in out.splitlines() if "transactions actually processed" in x)
    return int(line.split(":")[1].split("/")[0])


def _propagate_and_apply(spark: Any, cfg: PipelineConfig, iceberg: bool) -> None:
    from changeflow.apply.engine import apply_once
    from changeflow.apply.postgres import apply_pg_once
    from changeflow.propagation import propagate_once

    while propagate_once(spark, cfg, "p12").batches_read:
        pass
    applied = apply_pg_once(None, cfg, "topg")
    assert applied.errors == 0 and applied.changes > 0
    if iceberg:
        result = apply_once(spark, cfg, "toiceberg")
        assert result.errors == 0 and result.changes > 0


def _assert_targets_equal_source(spark: Any, pg: PgCluster, cfg: PipelineConfig, db: str,
                                 iceberg: bool) -> None:
    from changeflow.apply.engine import targets_of
    from changeflow.targets.read import read_table

    with pg.connect(db) as s, pg.connect(f"{db}_dst") as d:
        for table, key in PGBENCH_TABLES.items():
            expected = s.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
            assert expected, f"{table} is empty: the workload did not run"
            assert d.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall() == expected, \
                f"{table} differs in the PostgreSQL target"
            if iceberg:
                cols = [c.name for c in s.execute(f"SELECT * FROM {table} LIMIT 0").description]
                catalog = targets_of(cfg, cfg.component("apply", "toiceberg"))
                got = read_table(spark, catalog, f"public.{table}").select(*cols).collect()
                assert sorted(tuple(r) for r in got) == sorted(expected), \
                    f"{table} differs in the Iceberg target"


def _captured_once(cfg: PipelineConfig, records: int) -> None:
    """Every record of the topics is in the capture's queue once."""
    from changeflow.debezium.export import queue_batches
    from changeflow.queues import arrow_io

    ids = arrow_io.read_arrow_batches(queue_batches(cfg, "strm.cq@s1")).column(
        "msg_id").to_pylist()
    assert len(ids) == len(set(ids)) == records


def test_pgbench_through_debezium_and_kafka_is_applied_equal_to_the_source(
        spark: Any, tmp_path: Path, stack: dict[str, Any]) -> None:
    """pgbench → Debezium's connector → Kafka → ``kafka`` capture → propagation → the
    PostgreSQL apply: the target's rows equal the source's."""
    cfg = _pgbench_source(spark, stack, tmp_path, "pgb")
    n = _transactions(_pgbench(stack, tmp_path, "pgb", "-c", "2", "-j", "2", "-T", "5",
                               "-R", "60"), timeout=60)
    records = SNAPSHOT_ROWS + 4 * n
    _wait_records(spark, cfg, records)
    assert run_kafka_capture(spark, cfg, "kcap").messages == records
    _captured_once(cfg, records)
    _propagate_and_apply(spark, cfg, iceberg=False)
    _assert_targets_equal_source(spark, stack["pg"], cfg, "pgb", iceberg=False)


@pytest.mark.long
def test_pgbench_for_a_minute_with_the_capture_killed(spark: Any, tmp_path: Path,
                                                      stack: dict[str, Any]) -> None:
    """60 s of pgbench through Debezium; the capture (a process looping over
    ``run_kafka_capture``) is killed with SIGKILL at a random moment and the next run
    catches up: every record captured once, and the PostgreSQL and Iceberg targets equal
    the source."""
    cfg = _pgbench_source(spark, stack, tmp_path, "pgl")
    bench = _pgbench(stack, tmp_path, "pgl", "-c", "4", "-j", "2", "-T", "60", "-R", "200")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
           "CHANGEFLOW_DRIVER_MEMORY": "1g"}
    loop = subprocess.Popen([sys.executable, "-c", CAPTURE_LOOP, str(cfg.source_path), "300"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    rt, _ = queue_site(cfg, "strm.cq@s1")
    deadline = time.monotonic() + 120  # until the loop has committed a batch, then later
    while not stored_offsets(rt, "kcap") and time.monotonic() < deadline:
        assert loop.poll() is None, loop.communicate()[1][-3000:]
        time.sleep(0.5)
    assert stored_offsets(rt, "kcap"), "the capture loop committed nothing in 120 s"
    time.sleep(random.uniform(2.0, 20.0))
    os.kill(loop.pid, signal.SIGKILL)
    loop.wait()
    records = SNAPSHOT_ROWS + 4 * _transactions(bench, timeout=180)
    _wait_records(spark, cfg, records, timeout=600)
    run_kafka_capture(spark, cfg, "kcap")
    _captured_once(cfg, records)
    _propagate_and_apply(spark, cfg, iceberg=True)
    _assert_targets_equal_source(spark, stack["pg"], cfg, "pgl", iceberg=True)
