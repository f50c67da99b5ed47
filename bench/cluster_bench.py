"""Cost as the work grows on a cluster, and what an object store costs per batch.

* ``cluster.propagate``: the propagation of one batch of ``rows`` LCRs (full: 5 million;
  rules and quality on, as ``pipeline.propagate``) run as its job file
  (``jobs/propagation.py``) on a Spark standalone cluster of two workers, against the
  same propagation on a cluster of one worker. Executors are ``local[1]``-sized (one
  core, 640 MiB), so the comparison is fair on two cores. Judged: two workers' time over
  one worker's, target <= 1.0 (a second worker must not cost time).
* ``cluster.apply``: the apply of 100,000 changes (small: 10,000) into an Iceberg table of
  ``2 x rows`` rows (full: 10 million), as its job file (``jobs/apply.py``), two workers
  against one. Judged as above.
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
EXECUTOR_CONF = {"spark.executor.memory": "640m", "spark.executor.cores": "1",
                 "spark.driver.memory": "2g"}
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


def _on_clusters(work: Path, fn: Any) -> dict[int, float]:
    """``fn(master, conf_dir)`` on a one-worker and on a two-worker cluster: seconds each."""
    from changeflow.testing.spark_cluster import SparkStandalone

    out = {}
    for workers in (1, 2):
        conf = work / f"conf{workers}"
        conf.mkdir(exist_ok=True)
        (conf / "spark-defaults.conf").write_text("".join(
            f"{k} {v}\n" for k, v in {**EXECUTOR_CONF, "spark.cores.max": str(workers)}.items()))
        cluster = SparkStandalone(workers=workers, root=work / f"spark{workers}").start()
        try:
            out[workers] = fn(cluster.master_url, conf, workers)
        finally:
            cluster.stop()
    return out


def propagate(spark: SparkSession, rows: int) -> dict[int, float]:
    """The same propagation (``p1``, ``p2`` of one source batch) on one and two workers."""
    with tempfile.TemporaryDirectory(prefix="cluster-bench-prop-") as tmp:
        work = Path(tmp)
        pb.setup(spark, work, rows)
        return _on_clusters(work, lambda m, c, w: _job(
            "propagation", work / "pipeline.yaml", f"p{w}", m, c))


def apply(spark: SparkSession, rows: int, changes: int) -> dict[int, float]:
    """The same number of changes applied into the same table on one and two workers."""
    from changeflow.queues import io as qio
    from changeflow.sites import queue_site

    with tempfile.TemporaryDirectory(prefix="cluster-bench-apply-") as tmp:
        work = Path(tmp)
        cfg, targets = ab.setup(spark, work)
        ab.make_table(spark, targets, ab.TABLE, rows)
        rt, q = queue_site(cfg, cfg.component("apply", "a").queue)

        def one(master: str, conf: Path, workers: int) -> float:
            qio.enqueue(spark, rt.catalog, q, ab.changes(spark, rows, changes, workers),
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
            catalog.commit_batch("bench.q", arrow_io.write_arrow_batch(
                catalog, "bench.q", table, producer="bench"))
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
    out = [
        entry("cluster.propagate", value=prop[2], unit="s", baseline_value=prop[1],
              baseline=f"the same propagation of {rows:,} LCRs on one worker",
              target=1.0, direction="<=", figures={"one_worker_s": round(prop[1], 2),
                                                  "two_workers_s": round(prop[2], 2),
                                                  "executor": EXECUTOR_CONF}),
        entry("cluster.apply", value=appl[2], unit="s", baseline_value=appl[1],
              baseline=f"the same apply of {n_changes:,} changes into {2 * rows:,} rows "
                       "on one worker",
              target=1.0, direction="<=", figures={"one_worker_s": round(appl[1], 2),
                                                  "two_workers_s": round(appl[2], 2)}),
    ]
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
