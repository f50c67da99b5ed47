"""Cost as the work grows on a cluster, and what an object store costs per batch.

* ``cluster.propagate``: the propagation of one batch of ``rows`` LCRs (full: 5 million;
  rules and quality on, as ``pipeline.propagate``) run as its job file
  (``jobs/propagation.py``) on three Spark standalone layouts (:data:`LAYOUTS`): one
  worker of one core, two workers of one core, one worker of two cores. Judged: two
  one-core workers' time over one's, target <= 1.0 (a second worker must not cost time).
  ``cluster.propagate_distribution`` (reported): two one-core workers against one
  two-core worker, the cost of distribution at the same cores.
* ``cluster.apply`` and ``cluster.apply_distribution``: the apply of 100,000 changes
  (small: 10,000) into an Iceberg table of ``2 x rows`` rows (full: 10 million), as its
  job file (``jobs/apply.py``), on the same layouts, judged and reported as above.

Each layout's figures keep a summary of its Spark event log (:func:`event_summary`):
executors, tasks per executor, the tasks' run and CPU seconds, stage-busy and driver-only
seconds. On two cores no layout can show a speed-up: the driver needs one of them
(docs/deploy.md, "One worker or two").
* ``objectstore.batch_commit``, ``objectstore.batch_list``, ``objectstore.batch_read``:
  the per-batch cost of a queue batch of 1,000 LCRs on an S3-compatible server (S3Proxy on
  loopback) against local files, with the same code (Arrow's write and the catalog commit;
  the footer check's listing; Arrow's read), and ``objectstore.spark_commit``: a batch
  written by Spark through the S3A magic committer against Spark's file committer on
  local disk. Reported, not judged (targets are for the code, not for the store): a user
  sizes batches from them.

Job times are the wall time of the job process, JVM start included (as Airflow pays it);
the figures keep each run's seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import apply_bench as ab
from bench import pipeline_bench as pb
from bench.results import entry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent
EXECUTOR_CONF = {"spark.executor.memory": "640m", "spark.driver.memory": "2g",
                 "spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
                 "spark.eventLog.rolling.enabled": "false"}
# (label, workers, cores per worker): 1x1 against 2x1 is the speed-up a second worker
# brings; 1x2 against 2x1 is the cost of distribution at the same two cores.
LAYOUTS = (("1x1", 1, 1), ("2x1", 2, 1), ("1x2", 1, 2))
PROPAGATIONS = {"1x1": "p1", "2x1": "p2", "1x2": "p3"}  # one consumer of the batch each
BATCHES = 30
BATCH_ROWS = 1_000


def _job(kind: str, config: Path, name: str, master: str, conf_dir: Path) -> float:
    """Run a job file on ``master``; its wall seconds. Raises when it fails."""
    env = {**os.environ, "CHANGEFLOW_SPARK_MASTER": master, "SPARK_CONF_DIR": str(conf_dir),
           "CHANGEFLOW_DRIVER_MEMORY": "2g", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    t = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "jobs" / f"{kind}.py"), "--config",
                           str(config), "--name", name, "--lease-wait", "60"], env=env,
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {name} on {master} exited {done.returncode}: "
                           f"{done.stderr[-1500:]}")
    return seconds


def _on_clusters(work: Path, fn: Any) -> dict[str, dict[str, Any]]:
    """``fn(master, conf_dir, label)`` on each of :data:`LAYOUTS`: its seconds and what
    Spark's event log says about it (executors, tasks, busy time)."""
    from changeflow.testing.spark_cluster import SparkStandalone

    out = {}
    for label, workers, cores in LAYOUTS:
        conf, events = work / f"conf{label}", work / f"events{label}"
        conf.mkdir(exist_ok=True)
        events.mkdir(exist_ok=True)
        (conf / "spark-defaults.conf").write_text("".join(
            f"{k} {v}\n" for k, v in {**EXECUTOR_CONF, "spark.executor.cores": str(cores),
                                      "spark.cores.max": str(workers * cores),
                                      "spark.eventLog.dir": events.as_uri()}.items()))
        cluster = SparkStandalone(workers=workers, cores=cores,
                                  root=work / f"spark{label}").start()
        try:
            seconds = fn(cluster.master_url, conf, label)
        finally:
            cluster.stop()
        out[label] = {"s": round(seconds, 2), **event_summary(events)}
    return out


def event_summary(events: Path) -> dict[str, Any]:
    """Executors, tasks and busy seconds from the Spark event logs under ``events``.

    ``driver_only_s`` is the application's span outside any stage (JVM and session
    start, planning, commits on the driver); ``first_executor_s`` is how long after the
    application started its first executor registered.
    """
    import json

    ex: dict[str, int] = {}
    start = end = None
    first_ex: float | None = None
    tasks: dict[str, int] = {}
    run_ms = cpu_ns = 0
    stages: list[tuple[int, int]] = []
    for log in sorted(p for p in events.rglob("*") if p.is_file()):
        for line in log.read_text().splitlines():
            ev = json.loads(line)
            kind = ev.get("Event")
            if kind == "SparkListenerApplicationStart":
                start = ev["Timestamp"]
            elif kind == "SparkListenerApplicationEnd":
                end = ev["Timestamp"]
            elif kind == "SparkListenerExecutorAdded":
                ex[ev["Executor ID"]] = ev["Executor Info"]["Total Cores"]
                first_ex = ev["Timestamp"] if first_ex is None else min(first_ex,
                                                                        ev["Timestamp"])
            elif kind == "SparkListenerTaskEnd":
                eid = ev["Task Info"]["Executor ID"]
                tasks[eid] = tasks.get(eid, 0) + 1
                m = ev.get("Task Metrics") or {}
                run_ms += m.get("Executor Run Time", 0)
                cpu_ns += m.get("Executor CPU Time", 0)
            elif kind == "SparkListenerStageCompleted":
                info = ev["Stage Info"]
                if info.get("Submission Time") and info.get("Completion Time"):
                    stages.append((info["Submission Time"], info["Completion Time"]))
    busy, last = 0, 0
    for a, b in sorted(stages):  # the union of the stages' windows
        a = max(a, last)
        if b > a:
            busy, last = busy + b - a, b
    span = (end - start) / 1000 if start and end else None
    return {"executors": len(ex), "cores": sum(ex.values()), "stages": len(stages),
            "tasks": sum(tasks.values()), "tasks_per_executor": tasks,
            "task_run_s": round(run_ms / 1000, 2), "task_cpu_s": round(cpu_ns / 1e9, 2),
            "stages_busy_s": round(busy / 1000, 2),
            "app_s": round(span, 2) if span else None,
            "driver_only_s": round(span - busy / 1000, 2) if span else None,
            "first_executor_s": round((first_ex - start) / 1000, 2)
            if first_ex and start else None}


def propagate(spark: SparkSession, rows: int) -> dict[str, dict[str, Any]]:
    """The same propagation of one source batch on each layout (one consumer each)."""
    with tempfile.TemporaryDirectory(prefix="cluster-bench-prop-") as tmp:
        work = Path(tmp)
        pb.setup(spark, work, rows)
        return _on_clusters(work, lambda m, c, w: _job(
            "propagation", work / "pipeline.yaml", PROPAGATIONS[w], m, c))


def apply(spark: SparkSession, rows: int, changes: int) -> dict[str, dict[str, Any]]:
    """The same number of changes applied into the same table on each layout."""
    from changeflow.queues import io as qio
    from changeflow.sites import queue_site

    with tempfile.TemporaryDirectory(prefix="cluster-bench-apply-") as tmp:
        work = Path(tmp)
        cfg, targets = ab.setup(spark, work)
        ab.make_table(spark, targets, ab.TABLE, rows)
        rt, q = queue_site(cfg, cfg.component("apply", "a").queue)

        def one(master: str, conf: Path, label: str) -> float:
            seed = [x[0] for x in LAYOUTS].index(label) + 1
            qio.enqueue(spark, rt.catalog, q, ab.changes(spark, rows, changes, seed),
                        producer="bench")
            return _job("apply", work / "pipeline.yaml", "a", master, conf)

        return _on_clusters(work, one)


def _per_batch(root: str, spark: SparkSession) -> dict[str, float]:
    """Seconds per batch under a staging root: Arrow write + commit, list, read; Spark write."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from changeflow import lcr
    from changeflow.queues import arrow_io
    from changeflow.queues import io as qio
    from changeflow.queues.catalog import QueueCatalog
    from changeflow.schedules.probe import probe_message
    from changeflow.state import StateStore

    with tempfile.TemporaryDirectory(prefix="objectstore-bench-") as tmp:
        catalog = QueueCatalog(StateStore(f"sqlite:///{tmp}/state.db"), root)
        catalog.create_queue("bench.q")
        catalog.add_consumer("bench.q", "bench", "user")
        table = pa.Table.from_pylist([probe_message(f"m{i}", i) for i in range(BATCH_ROWS)],
                                     schema=lcr.arrow_schema())
        t = time.perf_counter()
        for _ in range(BATCHES):
            written = arrow_io.write_arrow_batch(catalog, "bench.q", table, producer="bench")
            assert written is not None
            catalog.commit_batch("bench.q", written)
        commit = (time.perf_counter() - t) / BATCHES
        batches = catalog.pending("bench.q", "bench")
        t = time.perf_counter()
        files = qio._check_with_arrow(batches)  # noqa: SLF001  (the footer check's listing)
        listing = (time.perf_counter() - t) / BATCHES
        assert files is not None and len(files) == BATCHES
        t = time.perf_counter()
        for b in batches:
            arrow_io.read_arrow_dir(b.path, "bench batch")
        read = (time.perf_counter() - t) / BATCHES
        source = Path(tmp) / "source.parquet"  # Spark reads the same rows Arrow wrote
        pq.write_table(table, source)
        df = spark.read.parquet(str(source)).cache()
        df.count()
        t = time.perf_counter()
        for _ in range(5):
            batch = qio.write_batch(spark, catalog, "bench.q", df, producer="bench")
            assert batch is not None
        spark_commit = (time.perf_counter() - t) / 5
        df.unpersist()
    return {"commit": commit, "list": listing, "read": read, "spark_commit": spark_commit}


def objectstore(spark: SparkSession) -> dict[str, dict[str, float]]:
    """Per-batch costs on local files and on S3Proxy (the same code)."""
    from changeflow.testing.s3_server import S3Server

    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="objectstore-local-") as tmp:
        local = _per_batch(tmp, spark)
    with S3Server() as s3:
        os.environ.update(s3.env())
        try:
            bucket = s3.create_bucket("bench")
            remote = _per_batch(f"{bucket}/staging", spark)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return {"local": local, "s3": remote}


def run(spark: SparkSession, rows: int) -> list[dict[str, Any]]:
    """The cluster entries (``rows`` LCRs propagated, ``2 x rows`` applied) and the
    object store's per-batch entries."""
    n_changes = 100_000 if rows >= 5_000_000 else max(1_000, rows // 50)
    prop = propagate(spark, rows)
    appl = apply(spark, 2 * rows, n_changes)
    store = objectstore(spark)
    out = []
    for name, res, what in (
            ("propagate", prop, f"the same propagation of {rows:,} LCRs"),
            ("apply", appl, f"the same apply of {n_changes:,} changes into {2 * rows:,} rows")):
        figures = {"executor_memory": EXECUTOR_CONF["spark.executor.memory"], **res}
        out.append(entry(f"cluster.{name}", value=res["2x1"]["s"], unit="s",
                         baseline_value=res["1x1"]["s"],
                         baseline=f"{what} on one worker of one core",
                         target=1.0, direction="<=", figures=figures,
                         note="two workers of one core each against one worker of one core"))
        out.append(entry(f"cluster.{name}_distribution", value=res["2x1"]["s"], unit="s",
                         baseline_value=res["1x2"]["s"],
                         baseline=f"{what} on one worker of two cores",
                         figures=figures,
                         note="the same two cores as two executors or one: the cost of "
                              "distribution, reported"))
    for step, what in (("commit", "an Arrow batch written and committed"),
                       ("list", "a batch's listing and footer check"),
                       ("read", "a batch read by Arrow"),
                       ("spark_commit", "a batch written by Spark and measured")):
        out.append(entry(f"objectstore.batch_{step}" if step != "spark_commit"
                         else "objectstore.spark_commit",
                         value=store["s3"][step] * 1000, unit="ms",
                         baseline_value=store["local"][step] * 1000,
                         baseline=f"{what}, {BATCH_ROWS:,} LCRs, on local files",
                         figures={"batches": BATCHES, "rows_per_batch": BATCH_ROWS}))
    return out
