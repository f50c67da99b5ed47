"""Benchmark: PostgreSQL capture and apply throughput, and end-to-end lag, on pgbench.

Steps, on a throwaway cluster (:class:`changeflow.testing.pg_cluster.PgCluster`):

1. ``pgbench -i`` (tables and keys) in a source and a target database; the capture's
   slot is created, then pgbench generates its data and runs for ``seconds`` with
   4 clients while nothing reads the slot: a backlog.
2. **Capture throughput**: drain the slot into a queue (changes/s).
3. **Apply throughput**: apply that queue into the target database (changes/s).
4. **End-to-end lag**: a second pgbench run while a capture and an apply loop run
   concurrently; lag is source commit time → applied in the target (seconds).

Baselines are published Debezium figures (see ``docs/postgres.md``): about 6,000
changes/s captured (16 vCPUs) and 2,300 events/s for the JDBC sink (8 cores).

Run it alone with ``python -m bench.pg_bench [small|full]``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from changeflow.apply.postgres import apply_pg_once
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import PipelineConfig, load_config
from changeflow.testing.pg_cluster import PgCluster

SCALES = {"small": {"scale": 1, "seconds": 15}, "full": {"scale": 5, "seconds": 60}}
DEBEZIUM_CAPTURE = 6000.0
DEBEZIUM_SINK = 2300.0


def _pipeline(root: Path, pg: PgCluster) -> PipelineConfig:
    import os

    os.environ["CF_BENCH_PG_SRC"] = pg.url("bsrc")
    os.environ["CF_BENCH_PG_DST"] = pg.url("bdst")
    path = root / "pipeline.yaml"
    path.write_text(textwrap.dedent("""
        version: 1
        sites:
          s1: {staging_root: staging, target_root: targets, state_url: "sqlite:///state.db",
               database: PG1.EXAMPLE.COM}
        queues:
          - {name: strm.q, site: s1}
        captures:
          - name: cap
            queue: strm.q
            source: {type: postgres, database: PG1.EXAMPLE.COM, url_env: CF_BENCH_PG_SRC,
                     slot: bench_slot, schemas: [public]}
        applies:
          - name: topg
            queue: strm.q
            target: {type: postgres, url_env: CF_BENCH_PG_DST}
    """))
    return load_config(path)


def _prepare(pg: PgCluster, cfg: PipelineConfig, scale: int, seconds: int) -> None:
    for db in ("bsrc", "bdst"):
        pg.createdb(db)
        pg.tool("pgbench", "-q", "-i", "-I", "dtp", "-s", str(scale), db=db)
        pg.sql(db, "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")
    run_pg_capture(None, cfg, "cap")  # creates the slot
    pg.tool("pgbench", "-q", "-i", "-I", "g", "-s", str(scale), db="bsrc")
    pg.tool("pgbench", "-n", "-c", "4", "-j", "2", "-T", str(seconds), db="bsrc")


def _entry(name: str, value: float, unit: str, baseline: float | None, target: float | None,
           **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "figures": {unit: round(value, 3), **extra},
        "baseline": baseline,
        "ratio": round(value / baseline, 3) if baseline else None,
        "target": target,
    }


def _lag_run(pg: PgCluster, cfg: PipelineConfig, seconds: int) -> list[float]:
    lags: list[float] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            got = run_pg_capture(None, cfg, "cap", max_seconds=1.0)
            lags.extend(apply_pg_once(None, cfg, "topg").lags)
            if not got.messages:
                time.sleep(0.2)

    worker = threading.Thread(target=loop)
    worker.start()
    pg.tool("pgbench", "-n", "-c", "4", "-j", "2", "-T", str(seconds), "-R", "300", db="bsrc")
    stop.set()
    worker.join()
    return lags


def run(spark: Any, scale: str = "small") -> list[dict[str, Any]]:
    """Run the benchmark and return its entries (``spark`` is not needed here)."""
    params = SCALES.get(scale, SCALES["small"])
    pg = PgCluster().start()
    root = Path(tempfile.mkdtemp(prefix="changeflow-pgbench-"))
    try:
        cfg = _pipeline(root, pg)
        _prepare(pg, cfg, params["scale"], params["seconds"])
        cap = run_pg_capture(None, cfg, "cap")
        app = apply_pg_once(None, cfg, "topg", batches_per_round=4)
        lags = _lag_run(pg, cfg, max(params["seconds"] // 2, 10))
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    common = {"pgbench_scale": params["scale"], "pgbench_seconds": params["seconds"]}
    lag = {"p50_s": round(statistics.median(lags), 3) if lags else None,
           "max_s": round(max(lags), 3) if lags else None, "samples": len(lags),
           "pgbench_rate_tps": 300}
    return [
        _entry("pg_capture_throughput", cap.rate, "changes_per_s", DEBEZIUM_CAPTURE, 20000.0,
               changes=cap.messages, seconds=round(cap.seconds, 2), **common),
        _entry("pg_apply_throughput", app.rate, "changes_per_s", DEBEZIUM_SINK, 10000.0,
               changes=app.changes, transactions=app.transactions,
               seconds=round(app.seconds, 2), **common),
        {"name": "pg_end_to_end_lag", "figures": lag, "baseline": None, "ratio": None,
         "target": None},
    ]


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING)
    size = sys.argv[1] if len(sys.argv) > 1 else "small"
    print(json.dumps(run(None, size), indent=2, default=str))
