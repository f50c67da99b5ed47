"""Benchmarks of operations (issue 17).

* ``ops.debezium_capture``: capturing Debezium change-event files (the PostgreSQL
  connector's JSON with schemas, as a Kafka Connect sink writes them) into a queue, in
  the default configuration (quality checks on, a capture rule set), as a throughput
  ratio to a raw copy of the same files by the same engine in the same run, reading
  them with the capture's own read schema declared (``spark.read.schema(<the
  capture's read schema>).json(...).write.parquet(...)``: no inference pass). Three
  runs each, alternating; warm is the best of the second and third, the first runs are
  the cold figure, and the one-shot figure adds a Spark session and the GX context
  (:mod:`bench.startup`). Target >= 0.6 (warm).
* ``ops.view.<name>``: each dictionary view over a state store holding 10,000 batches
  and 100 consumers (and runs, lag histograms, capture progress); the time of the view
  as a ratio to the existing ``queues show`` read of the same store (``catalog.info``).
  Target: every view under 0.5 s.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench import startup
from bench.results import entry

SCHEMA = {"type": "struct", "optional": False, "name": "pg1.shop.orders.Envelope", "fields": [
    {"type": "struct", "optional": True, "field": f, "name": "pg1.shop.orders.Value", "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "customer"},
        {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2"}, "field": "amount"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp",
         "field": "placed"},
        {"type": "boolean", "optional": True, "field": "paid"},
        {"type": "float64", "optional": True, "field": "weight"}]} for f in ("before", "after")]}


def _amount(cents: int) -> str:
    return base64.b64encode(cents.to_bytes(max(1, (cents.bit_length() + 8) // 8), "big",
                                           signed=True)).decode()


def write_events(root: Path, n: int, files: int = 8) -> None:
    """``n`` create/update events of one table, schemas included, in ``files`` files."""
    head = json.dumps(SCHEMA, separators=(",", ":"))
    rng = random.Random(7)
    per = n // files
    lsn = 10_000
    for f in range(files):
        d = root / "pg1.shop.orders"
        d.mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(f * per, (f + 1) * per):
            lsn += 100
            row = {"id": i % (n // 2), "customer": f"customer-{rng.randint(1, 5000)}",
                   "amount": _amount(rng.randint(-10**6, 10**8)),
                   "placed": 1_700_000_000_000_000 + i * 1000, "paid": i % 3 == 0,
                   "weight": rng.random() * 10}
            op = "c" if i < n // 2 else "u"
            tx = i // 4  # four changes per transaction: one commit position and time each
            src = {"version": "2.7.0.Final", "connector": "postgresql", "name": "pg1",
                   "ts_ms": 1_700_000_000_000 + tx, "snapshot": "false", "db": "shop",
                   "sequence": f'["{100_000 + tx * 1000}","{lsn}"]', "schema": "shop",
                   "table": "orders", "txId": 1000 + tx, "lsn": lsn, "xmin": None}
            payload = {"before": None, "after": row, "source": src, "op": op,
                       "ts_ms": 1_700_000_000_500 + i}
            lines.append('{"schema":' + head + ',"payload":' +
                         json.dumps(payload, separators=(",", ":")) + "}")
        (d / f"pg1.shop.orders+0+{f * per:010d}.json").write_text("\n".join(lines) + "\n")


PIPELINE = """
version: 1
rules: rules.yaml
sites:
  s1: {{staging_root: s1/staging, target_root: s1/targets, state_url: "sqlite:///s1/state.db",
       database: DBS1.EXAMPLE.COM}}
queues: [{{name: bench.q, site: s1}}]
captures:
  - name: dbz
    queue: bench.q@s1
    source: {{type: debezium, database: PG1.EXAMPLE.COM, root: {root},
              tables: [{{name: shop.orders, key: [id]}}]}}
"""
RULES = """
rules:
  SHOP: {condition: "((:dml.get_object_owner() = 'SHOP') and :dml.is_null_tag() = 'Y' )"}
rule_sets: {S: {rules: [SHOP]}}
clients: {dbz: {type: capture, positive_rule_set: S}}
"""


def debezium_capture(spark: Any, n: int) -> dict[str, Any]:
    """The capture of ``n`` events against a declared-schema raw copy of the files."""
    from changeflow.clients import rule_filter
    from changeflow.config import load_config
    from changeflow.debezium.capture import run_debezium_capture
    from changeflow.debezium.reader import read_schema

    work = Path(tempfile.mkdtemp(prefix="cf-bench-dbz-"))
    write_events(work / "events", n)
    schema = read_schema(True)
    raw_times, cap_times, jobs = [], [], []
    tracker = spark.sparkContext.statusTracker()
    startup.warm_gx()
    for attempt in range(3):
        out = work / f"raw{attempt}"
        t = time.perf_counter()
        spark.read.schema(schema).json(str(work / "events" / "pg1.shop.orders")) \
            .write.parquet(str(out))
        raw_times.append(time.perf_counter() - t)
        run = work / f"run{attempt}"
        run.mkdir()
        (run / "rules.yaml").write_text(textwrap.dedent(RULES))
        (run / "p.yaml").write_text(textwrap.dedent(PIPELINE.format(root=work / "events")))
        cfg = load_config(run / "p.yaml")
        before = set(tracker.getJobIdsForGroup(None))
        t = time.perf_counter()
        result = run_debezium_capture(spark, cfg, "dbz", rule_filter(cfg, "capture", "dbz"))
        cap_times.append(time.perf_counter() - t)
        jobs.append(len(set(tracker.getJobIdsForGroup(None)) - before))
        if result.messages != n:
            raise RuntimeError(f"the capture took {result.messages} of {n} events")
    raw, cap = min(raw_times[1:]), min(cap_times[1:])
    spark_start, gx = startup.spark_session(), startup.gx_context()
    return entry(
        "ops.debezium_capture", value=n / cap, unit="events/s", baseline_value=n / raw,
        baseline="spark.read.schema(<the capture's read schema>).json(files)"
                 ".write.parquet(copy) of the same files (no inference), warm",
        target=0.6, direction=">=", headline=True, figures={
            "events": n, "raw_runs": [round(x, 2) for x in raw_times],
            "capture_runs": [round(x, 2) for x in cap_times], "spark_jobs": jobs,
            "cold_ratio": round(raw_times[0] / cap_times[0], 3),
            "one_shot_ratio": round((raw_times[0] + spark_start)
                                    / (cap_times[0] + spark_start + gx), 3),
            "spark_session_seconds": round(spark_start, 2),
            "gx_context_seconds": round(gx, 2), "read_schema": schema})


def _fill(store_url: str) -> None:
    """10,000 batches of one queue, 100 consumers, runs, lag histograms, progress."""
    from changeflow.state import StateStore, schema, schema_obs, utcnow

    store = StateStore(store_url)
    now = utcnow()
    B, C = schema.queue_batches, schema.queue_consumers
    with store.begin() as c:
        c.execute(B.insert(), [{"queue": "bench.q", "batch_id": f"b{i}", "path": f"/x/b{i}",
                                "n_messages": 1000, "n_bytes": 50_000, "producer": "capture:cap",
                                "dedup_key": f"k{i}", "created_at": now,
                                "oldest_time": now - dt.timedelta(seconds=10_000 - i),
                                "state": "ready" if i % 97 else "quarantined"}
                               for i in range(10_000)])
        c.execute(C.insert(), [{"queue": "bench.q", "consumer": f"user:c{i}", "kind": "user",
                                "position": i * 100, "updated_at": now} for i in range(99)])
        c.execute(C.update().where(C.c.consumer == "apply:app").values(position=5000))
        c.execute(schema_obs.runs.insert(), [
            {"run_id": f"r{i}", "kind": k, "name": n, "started_at": now, "ended_at": now,
             "status": "succeeded", "messages": 1000, "batches": 1, "seconds": 1.0}
            for i in range(2000) for k, n in (("capture", "cap"), ("apply", "app"))])
        c.execute(schema_obs.lag_hist.insert(), [
            {"apply": "app", "source_database": "DBS1", "recorded_at": now, "n": 100,
             "max_seconds": 9.0, "bins": json.dumps({str(300 + j): 5 for j in range(20)})}
            for _ in range(500)])


VIEWS_PIPELINE = """
version: 1
sites:
  s1: {{staging_root: {root}/staging, target_root: {root}/targets,
       state_url: "sqlite:///{root}/state.db", database: DBS1}}
queues: [{{name: bench.q, site: s1}}]
captures:
  - {{name: cap, queue: bench.q, source: {{type: snapshot, database: DBS1, root: {root}/src,
      tables: [{{name: hr.t, key: [id]}}]}}}}
applies: [{{name: app, queue: bench.q}}]
"""


def views(spark: Any, _size: Any) -> list[dict[str, Any]]:
    from changeflow.config import load_config
    from changeflow.sites import site
    from changeflow.views import VIEWS

    root = Path(tempfile.mkdtemp(prefix="cf-bench-views-"))
    (root / "p.yaml").write_text(textwrap.dedent(VIEWS_PIPELINE.format(root=root)))
    cfg = load_config(root / "p.yaml")
    from changeflow.sites import open_pipeline

    open_pipeline(cfg)
    _fill(cfg.sites["s1"].state_url)
    catalog = site(cfg, "s1").catalog

    def best(fn: Any) -> float:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    base = best(lambda: catalog.info("bench.q"))
    out = []
    for name, view in VIEWS.items():
        seconds = best(lambda view=view: view.fetch(cfg))
        out.append(entry(f"ops.view.{name}", value=seconds, unit="s", judged="value",
                         baseline="catalog.info of the same store (queues show)",
                         baseline_value=base, target=0.5, direction="<="))
    return out


def run(spark: Any, rows: int) -> list[dict[str, Any]]:
    """Both benchmarks; ``rows`` (the suite size) scales the Debezium files."""
    return [debezium_capture(spark, max(20_000, rows // 5)), *views(spark, rows)]
