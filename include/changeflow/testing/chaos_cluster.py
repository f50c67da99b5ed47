"""The chaos suite's cluster trial: a Spark worker lost in the middle of a stage.

The rig's staging roots and Iceberg targets are on an S3-compatible server (S3Proxy on
loopback), its state stores on PostgreSQL, and the stage under test runs as its job file
on a Spark standalone cluster (a master and two one-core workers, ``local[1]``-sized
executors). While the stage holds its lease and the application has executors, one
worker is killed with its executors (``SIGKILL`` of the worker's process group: a lost
node). Spark reruns the lost tasks on the other worker; if the job fails anyway, it is
run again, as Airflow's retry would. Then the worker comes back, every stage runs to
completion and the chaos invariants are checked: every message crossed exactly once,
the targets equal the source.

Part of ``make chaos`` (``--cluster-kills N``) and ``tests/integration/cluster``.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changeflow.testing.chaos_rig import NAMES, STAGES, Figures, Rig, reap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changeflow.testing.spark_cluster import SparkStandalone

#: executors as small as ``local[1]``: one core each, one per worker
EXECUTOR_CONF = {"spark.executor.memory": "640m", "spark.executor.cores": "1",
                 "spark.cores.max": "2", "spark.task.maxFailures": "4"}


def worker_kill_trial(rig: Rig, figures: Figures, cluster: SparkStandalone, kind: str, *,
                      rng: random.Random) -> dict[str, Any]:
    """A round of changes; ``kind`` runs on the cluster and loses a worker meanwhile."""
    rig.new_round()
    out: dict[str, Any] = {"kind": kind}
    for stage in STAGES:
        if stage != kind:
            rig.run(stage)
            continue
        proc = rig.job(kind)
        deadline = time.monotonic() + 300
        victim = None
        while proc.poll() is None and time.monotonic() < deadline:
            if rig.lease_holder(kind) is not None and (victim := cluster.busy_worker()) \
                    is not None:
                break
            time.sleep(0.1)
        if victim is not None and proc.poll() is None:
            time.sleep(rng.uniform(0.0, 1.5))  # somewhere in the stage's tasks
            cluster.kill_worker(victim)
            figures.kills += 1
            out["killed_worker"] = victim
        else:
            figures.finished_before_kill += 1
        code, err = reap(proc, timeout=900)
        out["exit"] = code
        if victim is not None:
            cluster.restart_worker(victim)
        if code != 0:  # Spark gave up on the lost tasks: the retry Airflow would make
            out["error"] = err[-600:]
            rig.run(kind)
    figures.count(f"worker kill during {kind}")
    rig.check(figures, f"worker kill during {kind}", targets=kind == "apply")
    return out


def run_cluster_trials(spark: SparkSession, *, rounds: int, seed: int, progress: bool = False,
                       employees: int = 400, changes: int = 200) -> dict[str, Any]:
    """Start the object store, PostgreSQL and the cluster; run ``rounds`` rounds, each
    killing a worker during the propagation and during the apply. Returns the figures."""
    from changeflow.testing.pg_cluster import PgCluster
    from changeflow.testing.s3_server import S3Server
    from changeflow.testing.spark_cluster import SparkStandalone

    rng = random.Random(seed)
    figures = Figures(progress=progress)
    trials: list[dict[str, Any]] = []
    saved = dict(os.environ)
    work = Path(tempfile.mkdtemp(prefix="changeflow-chaos-cluster-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)  # runs last
        s3 = S3Server(root=work / "s3").start()
        stack.callback(s3.stop)
        pg = PgCluster().start()
        stack.callback(pg.stop)
        cluster = SparkStandalone(workers=2, root=work / "spark").start()
        stack.callback(cluster.stop, keep_logs=False)
        stack.callback(_restore_environ, saved)
        conf = work / "spark-conf"
        conf.mkdir()
        (conf / "spark-defaults.conf").write_text(
            "".join(f"{k} {v}\n" for k, v in EXECUTOR_CONF.items()))
        os.environ.update({**s3.env(), "CHANGEFLOW_SPARK_MASTER": cluster.master_url,
                           "SPARK_CONF_DIR": str(conf)})
        bucket = s3.create_bucket("chaos")
        urls = tuple(pg.createdb(f"cluster_s{i}").replace(
            "postgresql://", "postgresql+psycopg://", 1) for i in (1, 2))
        (work / "rig").mkdir()
        rig = Rig(work / "rig", spark, state_urls=urls, employees=employees,  # type: ignore[arg-type]
                  changes=changes, roots=bucket)
        rig.run("capture")
        rig.check(figures, "initial load")
        for _ in range(rounds):
            for kind in ("propagation", "apply"):
                trials.append(worker_kill_trial(rig, figures, cluster, kind, rng=rng))
        apps = [a["name"] for a in cluster.status().get("completedapps", [])]
    return {**figures.as_dict(), "trials_detail": trials,
            "applications": sorted(set(apps)), "names": NAMES}


def _restore_environ(saved: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(saved)
