"""Benchmark: PostgreSQL capture and apply throughput, and end-to-end lag, on pgbench.

Steps, on a throwaway cluster (:class:`changeflow.testing.pg_cluster.PgCluster`):

1. ``pgbench -i`` (tables and keys) in a source and a target database; the capture's
   slot and a second wal2json slot for the baseline are created, then pgbench
   generates its data and runs for ``seconds`` with 4 clients while nothing reads the
   slots: a backlog.
2. **Decoding limit** (the baseline): ``pg_recvlogical`` reads the same backlog from
   the second slot, with the capture's wal2json options, to ``/dev/null``; its rate is
   the backlog's changes (counted on a copy of that slot, outside the timing) over its
   time, and the run must have confirmed the slot up to the backlog's end.
3. **Capture throughput**: the capture job's real path (``runner.run_component``:
   its rule sets from the pipeline's rules file, quality checks on: the ``lcr_batch``
   GX suite on every batch) drains the slot into a queue. Ratio to the decoding
   limit; target ≥ 0.5. Like the Spark session, the process's GX context is set up
   before the timed run (``make bench`` has it from the quality suite already); its
   cost is reported as ``gx_setup_seconds``.
4. **Apply throughput**: the apply job's real path (rule sets, quality) applies that
   queue into the target database. Ratio to the decoding limit; target ≥ 0.5.
5. **End-to-end lag**: a second pgbench run while a capture and an apply loop run
   concurrently; lag is source commit time → applied in the target (seconds).

Published Debezium figures are reported beside them (see ``docs/postgres.md``): about
6,000 changes/s captured (16 vCPUs) and 2,300 events/s for the JDBC sink (8 cores).

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
        rules: rules.yaml
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
    (root / "rules.yaml").write_text(_rules())
    return load_config(path)


def _rules() -> str:
    """Table rules for the capture (pgbench's four tables), a schema rule for the apply."""
    import yaml

    from changeflow.rules import templates as tpl

    tables = ["PGBENCH_ACCOUNTS", "PGBENCH_BRANCHES", "PGBENCH_TELLERS", "PGBENCH_HISTORY"]
    rules = {f"T_{t}": {"condition": tpl.system_condition("dml", "TABLE", "PUBLIC", t, False,
                                                         None), "rule_type": "TABLE"}
             for t in tables}
    rules["S_PUBLIC"] = {"condition": tpl.system_condition("dml", "SCHEMA", "PUBLIC", None,
                                                          False, None), "rule_type": "SCHEMA"}
    return yaml.safe_dump({
        "rules": rules,
        "rule_sets": {"CAP_RULES": {"rules": [f"T_{t}" for t in tables]},
                      "APPLY_RULES": {"rules": ["S_PUBLIC"]}},
        "clients": {"cap": {"type": "capture", "queue": "strm.q",
                            "positive_rule_set": "CAP_RULES"},
                    "topg": {"type": "apply", "queue": "strm.q",
                             "positive_rule_set": "APPLY_RULES"}},
    }, sort_keys=False)


RECV_SLOT = "bench_recv"
WAL2JSON_OPTIONS = ["format-version=2", "include-xids=1", "include-timestamp=1",
                    "include-type-oids=1", "include-types=0", "include-origin=1",
                    "include-transaction=1"]


def _decoding_limit(pg: PgCluster) -> tuple[float, int]:
    """``(seconds, changes)``: pg_recvlogical reading the baseline slot's backlog to
    /dev/null, and how many changes that backlog holds.

    The changes (wal2json documents other than begins and commits) are counted before
    the timed run, on a temporary copy of the slot with the same options, outside the
    timing. After the run the slot must have been confirmed up to the end position:
    pg_recvlogical stopped at the end of the backlog, not before.
    """
    import subprocess

    end = pg.sql("bsrc", "SELECT pg_current_wal_lsn()").strip()
    options = ", ".join(f"'{k}', '{v}'" for k, v in (o.split("=") for o in WAL2JSON_OPTIONS))
    changes = int(pg.sql("bsrc", f"""
        SELECT pg_copy_logical_replication_slot('{RECV_SLOT}', 'bench_count', true);
        SELECT count(*) FROM pg_logical_slot_get_changes('bench_count', '{end}', NULL,
                                                         {options})
         WHERE left(data, 13) NOT IN ('{{"action":"B"', '{{"action":"C"');
    """).split()[-1])
    argv = pg.argv("pg_recvlogical", "-d", "bsrc", "-S", RECV_SLOT, "--start", "-f",
                   "/dev/null", "-E", end, "--no-loop",
                   *[x for o in WAL2JSON_OPTIONS for x in ("-o", o)])
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, timeout=3600)
    seconds = time.perf_counter() - started
    reached = pg.sql("bsrc", f"SELECT confirmed_flush_lsn >= '{end}' FROM pg_replication_slots "
                             f"WHERE slot_name = '{RECV_SLOT}'").strip()
    if reached != "t":
        raise RuntimeError(f"pg_recvlogical stopped before the end of the backlog ({end})")
    return seconds, changes


def _prepare(pg: PgCluster, cfg: PipelineConfig, scale: int, seconds: int) -> None:
    for db in ("bsrc", "bdst"):
        pg.createdb(db)
        pg.tool("pgbench", "-q", "-i", "-I", "dtp", "-s", str(scale), db=db)
        pg.sql(db, "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")
    run_pg_capture(None, cfg, "cap")  # creates the slot
    pg.sql("bsrc", f"SELECT pg_create_logical_replication_slot('{RECV_SLOT}', 'wal2json')")
    pg.tool("pgbench", "-q", "-i", "-I", "g", "-s", str(scale), db="bsrc")
    pg.tool("pgbench", "-n", "-c", "4", "-j", "2", "-T", str(seconds), db="bsrc")


STREAM_SLOT = "bench_stream"


def _streamed_capture(spark: Any, cfg: PipelineConfig) -> Any:
    """The capture's real path, streaming (``stream_changes=True``) from a slot copy."""
    from changeflow.capture.postgres import run_pg_capture
    from changeflow.runner import rule_filter_for

    spec = cfg.component("capture", "cap")
    cfg.queues.append(cfg.queues[0].model_copy(update={"name": "strm.qs"}))
    copy = spec.model_copy(update={
        "name": "caps", "queue": "strm.qs",
        "source": spec.source.model_copy(update={"slot": STREAM_SLOT})})
    cfg.captures.append(copy)
    return run_pg_capture(spark, cfg, "caps", rule_filter=rule_filter_for(cfg, "capture", "cap"),
                          stream_changes=True)


def _gx_setup() -> float:
    """Seconds to import GX and build the process's context (once per process)."""
    from changeflow.quality import validator

    started = time.perf_counter()
    validator.context()
    validator.pandas_source()
    validator.build_suite("lcr_batch")
    return time.perf_counter() - started


def _entry(name: str, value: float, unit: str, baseline: float | None, target: str | None,
           **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "figures": {unit: round(value, 3), **extra},
        "baseline": (f"pg_recvlogical reading the same backlog from a wal2json slot to "
                     f"/dev/null, same run: {baseline:,.0f} changes/s") if baseline else None,
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
    """Run the benchmark and return its entries."""
    from changeflow.runner import run_component

    if spark is None:
        from changeflow.spark import get_session

        spark = get_session("pg-bench")
    params = SCALES.get(scale, SCALES["small"])
    pg = PgCluster().start()
    root = Path(tempfile.mkdtemp(prefix="changeflow-pgbench-"))
    try:
        cfg = _pipeline(root, pg)
        _prepare(pg, cfg, params["scale"], params["seconds"])
        limit_seconds, limit_changes = _decoding_limit(pg)
        gx_setup = _gx_setup()
        # the same backlog for the streamed capture: a copy of the slot, another queue
        pg.sql("bsrc", f"SELECT pg_copy_logical_replication_slot('bench_slot', '{STREAM_SLOT}')")
        cap = run_component(spark, cfg, "capture", "cap")
        streamed = _streamed_capture(spark, cfg)
        app = run_component(spark, cfg, "apply", "topg")
        lags = _lag_run(pg, cfg, max(params["seconds"] // 2, 10))
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    common = {"pgbench_scale": params["scale"], "pgbench_seconds": params["seconds"]}
    lag = {"p50_s": round(statistics.median(lags), 3) if lags else None,
           "max_s": round(max(lags), 3) if lags else None, "samples": len(lags),
           "pgbench_rate_tps": 300}
    limit = limit_changes / limit_seconds if limit_seconds else 0.0
    return [
        _entry("pg_capture_throughput", cap.rate, "changes_per_s", limit, ">= 0.5",
               changes=cap.messages, seconds=round(cap.seconds, 2), rules="4 table rules",
               quality="on (lcr_batch suite, every batch)", batches=cap.batches,
               gx_setup_seconds=round(gx_setup, 2), decoding_limit_per_s=round(limit),
               decoding_limit_seconds=round(limit_seconds, 2),
               decoding_limit_changes=limit_changes,
               debezium_published_per_s=DEBEZIUM_CAPTURE, **common),
        _entry("pg_capture_streamed_throughput", streamed.rate, "changes_per_s", limit, None,
               changes=streamed.messages, seconds=round(streamed.seconds, 2),
               batches=streamed.batches, streamed_batches=streamed.streamed,
               vs_peeking=round(streamed.rate / cap.rate, 3) if cap.rate else None,
               note="the same capture streaming a temporary slot copy (stream_changes=True), "
                    "same backlog, after the peeking run", **common),
        _entry("pg_apply_throughput", app.rate, "changes_per_s", limit, ">= 0.5",
               changes=app.changes, transactions=app.transactions,
               seconds=round(app.seconds, 2), rules="1 schema rule",
               decoding_limit_per_s=round(limit), debezium_published_per_s=DEBEZIUM_SINK,
               **common),
        {"name": "pg_end_to_end_lag", "figures": lag, "baseline": None, "ratio": None,
         "target": None},
    ]


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING)
    size = sys.argv[1] if len(sys.argv) > 1 else "small"
    print(json.dumps(run(None, size), indent=2, default=str))

