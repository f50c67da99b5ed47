"""Benchmark: PostgreSQL capture and apply throughput, and end-to-end lag, on pgbench.

Steps, on a throwaway cluster (:class:`changeflow.testing.pg_cluster.PgCluster`, fsync
off for every database in it: the same durability on every side):

1. ``pgbench -i`` (tables and keys) in a source, a target and a subscriber database; a
   publication of pgbench's four tables; the capture's slot, a second wal2json slot for
   the decoding baseline and a ``pgoutput`` slot for PostgreSQL's own logical
   replication are created; then pgbench generates its data and runs for ``seconds``
   with 4 clients while nothing reads the slots: one backlog, three readers.
2. **Decoding limit** (the capture's baseline): ``pg_recvlogical`` reads the backlog
   from the second slot, with the capture's wal2json options, to ``/dev/null``.
3. **Capture throughput**: the capture job's real path (``runner.run_component``: its
   rule sets, quality checks on) drains the slot into a queue. Ratio to the decoding
   limit, target >= 0.5, warm (the GX context set up before, as in a long-lived
   process); the *one-shot* figure adds what a spark-submit job pays first (a Spark
   session and the GX context, measured in fresh processes: :mod:`bench.startup`).
   **Debezium's PostgreSQL connector** (the peer a user would pick) reads the same
   backlog from its own ``pgoutput`` slot, created with the others before the backlog
   was written, in Kafka Connect into a KRaft broker (:mod:`bench.kafka_peers`): timed
   from adding the connector until the topics hold every row change of the backlog.
   Target: the capture >= 1.5x its throughput. Then, while it streams, a steady pgbench
   run (300 tps) gives its lag: source commit to appended to the topic.
4. **Apply throughput**: the apply job's real path (rule sets, quality) applies that
   queue into the target database. Its anchor is **PostgreSQL's own logical
   replication**: ``CREATE SUBSCRIPTION`` (``copy_data = false``, the ``pgoutput`` slot,
   ``synchronous_commit = on`` as the apply's sessions commit) catching up the same
   backlog into the subscriber database, timed until the subscriber's replication
   origin reached the backlog's last commit. Target >= 1.0.
5. **End-to-end lag**: a second pgbench run (300 tps) while a capture and an apply loop
   run concurrently; lag is source commit time -> applied in the target (seconds, p50
   and p95).

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

from bench import kafka_peers, startup
from bench.results import entry, skipped
from changeflow.apply.postgres import apply_pg_once
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import PipelineConfig, load_config
from changeflow.testing.pg_cluster import PgCluster

SCALES = {"small": {"scale": 1, "seconds": 15}, "full": {"scale": 5, "seconds": 60}}
DEBEZIUM_CAPTURE = 6000.0
DEBEZIUM_SINK = 2300.0
PUBLICATION, SUB_SLOT, DBZ_SLOT = "bench_pub", "bench_sub", "dbz_bench"
LAG_RATE = 300
TABLES = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"]


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


def _decoding_limit(pg: PgCluster) -> tuple[float, int, str, int]:
    """``(seconds, changes, last commit, row changes)``: pg_recvlogical reading the
    baseline slot's backlog to /dev/null, how many changes that backlog holds, the LSN of
    its last commit (where the subscription's catching up ends) and how many of the
    changes are row changes (inserts, updates, deletes: what Debezium writes; it skips
    the truncates of ``pgbench -i``).

    The changes (wal2json documents other than begins and commits) are counted before
    the timed run, on a temporary copy of the slot with the same options, outside the
    timing. After the run the slot must have been confirmed up to the end position:
    pg_recvlogical stopped at the end of the backlog, not before.
    """
    import subprocess

    end = pg.sql("bsrc", "SELECT pg_current_wal_lsn()").strip()
    options = ", ".join(f"'{k}', '{v}'" for k, v in (o.split("=") for o in WAL2JSON_OPTIONS))
    counted = pg.sql("bsrc", f"""
        SELECT pg_copy_logical_replication_slot('{RECV_SLOT}', 'bench_count', true);
        SELECT count(*) FILTER (WHERE left(data, 13) NOT IN ('{{"action":"B"',
                                                             '{{"action":"C"')),
               max(lsn) FILTER (WHERE left(data, 13) = '{{"action":"C"'),
               count(*) FILTER (WHERE left(data, 13) IN ('{{"action":"I"', '{{"action":"U"',
                                                         '{{"action":"D"'))
          FROM pg_logical_slot_get_changes('bench_count', '{end}', NULL, {options});
    """).split()[-1]
    changes_text, last_commit, rows = counted.split("|")
    changes = int(changes_text)
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
    return seconds, changes, last_commit, int(rows)


def _logical_replication(pg: PgCluster, last_commit: str) -> float:
    """Seconds for PostgreSQL's logical replication to apply the backlog: from ``CREATE
    SUBSCRIPTION`` until the subscriber's origin reached the backlog's last commit."""
    conninfo = f"host={pg.sock} port={pg.port} dbname=bsrc user=postgres"
    with pg.connect("bsub") as conn:
        started = time.perf_counter()
        conn.execute(f"CREATE SUBSCRIPTION {SUB_SLOT} CONNECTION '{conninfo}' PUBLICATION "
                     f"{PUBLICATION} WITH (create_slot = false, slot_name = '{SUB_SLOT}', "
                     "copy_data = false, synchronous_commit = 'on')")
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            # the origin of this subscription only (origins are cluster-wide: the apply
            # under test keeps its own in the target database)
            row = conn.execute(
                "SELECT o.remote_lsn >= %s::pg_lsn FROM pg_replication_origin_status o "
                "JOIN pg_subscription s ON o.external_id = 'pg_' || s.oid "
                "WHERE s.subname = %s", (last_commit, SUB_SLOT)).fetchone()
            if row is not None and row[0]:
                seconds = time.perf_counter() - started
                break
            time.sleep(0.02)
        else:
            raise RuntimeError("the subscription did not catch up within an hour")
        conn.execute(f"ALTER SUBSCRIPTION {SUB_SLOT} DISABLE")
    return seconds


def _prepare(pg: PgCluster, cfg: PipelineConfig, scale: int, seconds: int) -> None:
    for db in ("bsrc", "bdst", "bsub"):
        pg.createdb(db)
        pg.tool("pgbench", "-q", "-i", "-I", "dtp", "-s", str(scale), db=db)
        pg.sql(db, "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")
    pg.sql("bsrc", f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {', '.join(TABLES)}")
    run_pg_capture(None, cfg, "cap")  # creates the slot
    pg.sql("bsrc", f"SELECT pg_create_logical_replication_slot('{RECV_SLOT}', 'wal2json')")
    pg.sql("bsrc", f"SELECT pg_create_logical_replication_slot('{SUB_SLOT}', 'pgoutput')")
    pg.sql("bsrc", f"SELECT pg_create_logical_replication_slot('{DBZ_SLOT}', 'pgoutput')")
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


def _debezium(spark: Any, pg: PgCluster, rows: int, seconds: int) -> dict[str, Any] | str:
    """Debezium's connector on the backlog (``rows`` row changes), then streaming a
    steady pgbench run of ``seconds``: its time, its lags; or why it could not run.

    Connect and the broker stop before returning (they take no CPU from what follows).
    """
    peer = kafka_peers.DebeziumPeer(TABLES)
    try:
        peer.start()
        took = peer.stream(spark, pg, "bsrc", slot=DBZ_SLOT, publication=PUBLICATION,
                           expected=rows)
        since = kafka_peers.end_offsets(spark, peer.broker.bootstrap, peer.topics)
        report = pg.tool("pgbench", "-n", "-c", "4", "-j", "2", "-T", str(seconds), "-R",
                         str(LAG_RATE), db="bsrc")
        # tpcb-like: three updates and an insert per transaction
        peer.wait(spark, rows + 4 * kafka_peers.pgbench_transactions(report), timeout=600)
        return {"seconds": took, "rows": rows, "lags": peer.lags(spark, since)}
    except Exception as exc:  # noqa: BLE001  (a failed peer is a miss with its reason)
        return f"{type(exc).__name__}: {exc}"[:400]
    finally:
        peer.stop()


def _drain(cfg: PipelineConfig) -> None:
    """Capture and apply what the slot holds (Debezium's lag run), untimed."""
    while run_pg_capture(None, cfg, "cap").messages:
        pass
    while apply_pg_once(None, cfg, "topg").changes:
        pass


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
    pg.tool("pgbench", "-n", "-c", "4", "-j", "2", "-T", str(seconds), "-R", str(LAG_RATE),
            db="bsrc")
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
        limit_seconds, limit_changes, last_commit, rows = _decoding_limit(pg)
        startup.warm_gx()  # a long-lived process has it; the one-shot figure adds it
        # the same backlog for the streamed capture: a copy of the slot, another queue
        pg.sql("bsrc", f"SELECT pg_copy_logical_replication_slot('bench_slot', '{STREAM_SLOT}')")
        cap = run_component(spark, cfg, "capture", "cap")
        streamed = _streamed_capture(spark, cfg)
        app = run_component(spark, cfg, "apply", "topg")
        try:
            replication: float | str = _logical_replication(pg, last_commit)
        except Exception as exc:  # noqa: BLE001  (a failed peer is a miss with its reason)
            replication = f"{type(exc).__name__}: {exc}"[:400]
        lag_seconds = max(params["seconds"] // 2, 10)
        debezium = _debezium(spark, pg, rows, lag_seconds)
        _drain(cfg)
        lags = _lag_run(pg, cfg, lag_seconds)
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    limit = limit_changes / limit_seconds
    out = _entries(params, cap, streamed, app, limit, limit_seconds, limit_changes,
                   replication, lags)
    out[1:1] = _debezium_entries(params, cap, debezium, lag_seconds)
    return out


def _debezium_entries(params: dict[str, int], cap: Any, dbz: dict[str, Any] | str,
                      lag_seconds: int) -> list[dict[str, Any]]:
    what = ("Debezium 3.6.1.Final's PostgreSQL connector (Kafka Connect 4.3 standalone, "
            "JsonConverter with schemas, pgoutput, snapshot.mode no_data) streaming the same "
            "backlog from its own slot into a KRaft broker on this machine; timed from "
            "adding the connector until the topics' end offsets hold every row change of "
            "the backlog (connector start included, nothing subtracted)")
    common = {"pgbench_scale": params["scale"], "pgbench_seconds": params["seconds"],
              "published_changes_per_s": DEBEZIUM_CAPTURE}
    if isinstance(dbz, str):
        return [skipped("pg_capture.vs_debezium_connector", f"the connector failed: {dbz}",
                        unit="changes/s", baseline=what, target=1.5, direction=">=",
                        value=cap.rate, headline=True, figures=common)]
    lags = dbz["lags"]
    p50, p95 = kafka_peers.percentile(lags, 0.5), kafka_peers.percentile(lags, 0.95)
    spark_start, gx = startup.spark_session(), startup.gx_context()
    theirs = dbz["rows"] / dbz["seconds"]
    return [
        entry("pg_capture.vs_debezium_connector", value=cap.rate, unit="changes/s",
              baseline=what, baseline_value=theirs, target=1.5, direction=">=",
              headline=True, figures={
                  "debezium_changes": dbz["rows"], "debezium_seconds": round(dbz["seconds"], 2),
                  "capture_changes": cap.messages, "capture_seconds": round(cap.seconds, 2),
                  "one_shot_ratio": round(cap.messages / (cap.seconds + spark_start + gx)
                                          / theirs, 3),
                  "capture": "warm (Spark session and GX context up, as in a long-lived "
                             "process); one_shot_ratio adds both to the capture",
                  **common}),
        entry("pg_capture.debezium_lag", value=p50, unit="s",
              baseline="Debezium's connector streaming a steady pgbench run: source commit "
                       "(source.ts_ms) to appended to its topic (LogAppendTime), p50",
              figures={"p50_s": None if p50 is None else round(p50, 3),
                       "p95_s": None if p95 is None else round(p95, 3),
                       "max_s": round(max(lags), 3) if lags else None, "samples": len(lags),
                       "pgbench_rate_tps": LAG_RATE, "pgbench_seconds": lag_seconds,
                       "note": "commit to Kafka only; pg_end_to_end_lag is commit to applied "
                               "in the target database"})]


def _entries(params: dict[str, int], cap: Any, streamed: Any, app: Any, limit: float,
             limit_seconds: float, limit_changes: int, replication: float | str,
             lags: list[float]) -> list[dict[str, Any]]:
    common = {"pgbench_scale": params["scale"], "pgbench_seconds": params["seconds"]}
    spark_start, gx = startup.spark_session(), startup.gx_context()
    recv = (f"pg_recvlogical reading the same backlog from a wal2json slot to /dev/null, "
            f"same run ({limit_changes:,} changes in {limit_seconds:.2f} s)")
    one_shot_cap = cap.messages / (cap.seconds + spark_start + gx)
    out = [entry("pg_capture_throughput", value=cap.rate, unit="changes/s", baseline=recv,
                 baseline_value=limit, target=0.5, direction=">=", headline=True, figures={
                     "changes": cap.messages, "seconds": round(cap.seconds, 2),
                     "batches": cap.batches, "rules": "4 table rules",
                     "quality": "on (lcr_batch suite, every batch)",
                     "one_shot_changes_per_s": round(one_shot_cap),
                     "one_shot_ratio": round(one_shot_cap / limit, 3),
                     "spark_session_seconds": round(spark_start, 2),
                     "gx_context_seconds": round(gx, 2), **common}),
           entry("pg_capture_streamed_throughput", value=streamed.rate, unit="changes/s",
                 baseline=recv, baseline_value=limit, figures={
                     "changes": streamed.messages, "seconds": round(streamed.seconds, 2),
                     "batches": streamed.batches, "vs_peeking": round(
                         streamed.rate / cap.rate, 3) if cap.rate else None,
                     "note": "the same capture streaming a slot copy (stream_changes=True)",
                     **common})]
    apply_figures = {"changes": app.changes, "transactions": app.transactions,
                     "seconds": round(app.seconds, 2), "rules": "1 schema rule",
                     "vs_pg_recvlogical": round(app.rate / limit, 3),
                     "one_shot_changes_per_s": round(app.changes / (app.seconds + spark_start
                                                                     + gx)),
                     "published_debezium_jdbc_sink_per_s": DEBEZIUM_SINK, **common}
    what = ("PostgreSQL's own logical replication (CREATE SUBSCRIPTION, pgoutput, "
            "synchronous_commit on) applying the same backlog into another database")
    if isinstance(replication, str):
        out.append(skipped("pg_apply_throughput", f"logical replication failed: {replication}",
                           unit="changes/s", baseline=what, target=1.0, direction=">=",
                           value=app.rate, figures=apply_figures, headline=True))
    else:
        rate = limit_changes / replication
        apply_figures.update(replication_seconds=round(replication, 2),
                             end_to_end_ratio=round(replication / (cap.seconds + app.seconds),
                                                    3))
        out.append(entry("pg_apply_throughput", value=app.rate, unit="changes/s",
                         baseline=what, baseline_value=rate, target=1.0, direction=">=",
                         headline=True, figures=apply_figures))
        # replication decodes and applies; our apply only applies what the capture
        # decoded: the whole pipeline against it, beside (reported)
        out.append(entry("pg_capture_and_apply.vs_logical_replication",
                         value=app.changes / (cap.seconds + app.seconds), unit="changes/s",
                         baseline=what + " (decoding included)", baseline_value=rate,
                         headline=True, figures={"capture_seconds": round(cap.seconds, 2),
                                                 "apply_seconds": round(app.seconds, 2),
                                                 "replication_seconds": round(replication,
                                                                              2)}))
    out.append(entry("pg_end_to_end_lag", value=statistics.median(lags) if lags else None,
                     unit="s", baseline="source commit time to applied (p50)", figures={
                         "p50_s": round(statistics.median(lags), 3) if lags else None,
                         "p95_s": round(kafka_peers.percentile(lags, 0.95) or 0.0, 3)
                         if lags else None, "max_s": round(max(lags), 3) if lags else None,
                         "samples": len(lags), "pgbench_rate_tps": LAG_RATE}))
    return out


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING)
    size = sys.argv[1] if len(sys.argv) > 1 else "small"
    print(json.dumps(run(None, size), indent=2, default=str))

