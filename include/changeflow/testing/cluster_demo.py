"""The demo pipeline on a Spark standalone cluster, state stores on PostgreSQL (``make cluster``).

Starts a throwaway PostgreSQL (one state-store database per site), a Spark standalone
master with two workers from the installed pyspark, generates the HR demo source, and
runs ``airflow dags test changeflow_demo__pipeline`` with nothing changed but the
environment: ``AIRFLOW_CONN_SPARK_DEFAULT`` points the ``spark_default`` connection at
``spark://…``, ``CHANGEFLOW_SITE*_STATE_URL`` at PostgreSQL, and ``SPARK_CONF_DIR`` at
a ``spark-defaults.conf`` with small executors (this machine has two cores). Then it
reads back what ran where: the master's finished applications and the runs recorded
in the PostgreSQL state stores.

With ``--s3`` (``make cluster``), both sites' staging roots and Iceberg targets are on a
bucket of a real S3-compatible server (S3Proxy on loopback) instead of local files.

``python -m changeflow.testing.cluster_demo [--s3] [WORKDIR]`` exits non-zero unless the DAG
run succeeded, every job ran as an application of the cluster and the verification
passed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from changeflow.testing.pg_cluster import PgCluster
from changeflow.testing.s3_server import S3Server
from changeflow.testing.spark_cluster import SparkStandalone

ROOT = Path(__file__).resolve().parents[3]
EXECUTOR_CONF = {"spark.executor.memory": "640m", "spark.executor.cores": "1",
                 "spark.cores.max": "2"}


def environment(work: Path, pg: PgCluster, master: str,
                s3: S3Server | None = None) -> dict[str, str]:
    """What a user sets to move the embedded demo onto a cluster (and nothing else).

    With ``s3``, both sites' staging roots and targets are on its bucket ``demo``.
    """
    env = dict(os.environ)
    for n in (1, 2):
        db = f"state{n}"
        env[f"CHANGEFLOW_SITE{n}_STATE_URL"] = (
            f"postgresql+psycopg://postgres@/{db}?host={pg.sock}&port={pg.port}")
        base = f"s3a://demo/site{n}" if s3 is not None else str(work / f"site{n}")
        env[f"CHANGEFLOW_SITE{n}_STAGING"] = f"{base}/staging"
        env[f"CHANGEFLOW_SITE{n}_TARGETS"] = f"{base}/targets"
    if s3 is not None:
        env.update(s3.env())
    conf = work / "spark-conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "spark-defaults.conf").write_text(
        "".join(f"{k} {v}\n" for k, v in EXECUTOR_CONF.items()))
    env.update({
        "CHANGEFLOW_DEMO_SOURCE": str(work / "source"), "CHANGEFLOW_WORK": str(work),
        "AIRFLOW_HOME": str(work / "airflow"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{work / 'airflow' / 'airflow.db'}",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(work / "airflow" / "logs"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": master}),
        "SPARK_CONF_DIR": str(conf), "CHANGEFLOW_PROGRESS_SECONDS": "5",
    })
    return env


def _runs(url: str) -> list[dict[str, Any]]:
    from sqlalchemy import select

    from changeflow.state import StateStore, schema_obs

    with StateStore(url).read() as c:
        return [dict(r._mapping) for r in c.execute(select(schema_obs.runs))]


def run(work: Path, *, rounds: int = 1, employees: int = 60, s3: bool = False
        ) -> dict[str, Any]:
    """Run the demo DAG on a fresh cluster under ``work``. Returns what happened.

    ``s3``: staging roots and targets on a bucket of a real S3-compatible server.
    """
    from changeflow.demo.hr import generate

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pg = PgCluster().start()  # under /tmp: the postgres user must reach its directory
    spark = SparkStandalone(workers=2, root=work / "spark")
    store = S3Server(root=work / "s3") if s3 else None
    try:
        for n in (1, 2):
            pg.createdb(f"state{n}")
        if store is not None:
            store.start().create_bucket("demo")
        spark.start()
        env = environment(work, pg, spark.master_url, store)
        generate(str(work / "source"), rounds=rounds, employees=employees, changes=30)
        sh = [str(ROOT / "scripts" / "env.sh")]
        subprocess.run([*sh, "airflow", "db", "migrate"], cwd=ROOT, env=env, check=True,
                       capture_output=True)
        done = subprocess.run([*sh, "airflow", "dags", "test", "changeflow_demo__pipeline"],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        log = done.stdout + done.stderr
        (work / "dagrun.log").write_text(log)
        status = spark.status()
        apps = [a["name"] for a in status.get("completedapps", []) + status.get("activeapps", [])]
        runs = [r for n in (1, 2) for r in _runs(env[f"CHANGEFLOW_SITE{n}_STATE_URL"])]
        objects = store.objects("demo") if store is not None else []
        return {"returncode": done.returncode, "log": str(work / "dagrun.log"),
                "objects": len(objects),
                "magic_left": [k for k in objects if "__magic" in k],
                "master": spark.master_url, "workers": len(status.get("workers", [])),
                "applications": sorted(apps),
                "runs": sorted(f"{r['kind']}:{r['name']}:{r['status']}" for r in runs),
                "verified": "verification: PASSED" in log}
    finally:
        spark.stop(keep_logs=True)
        pg.stop()
        if store is not None:
            store.stop(keep=True)


def main(argv: list[str] | None = None) -> int:
    args = list(argv if argv is not None else sys.argv[1:])
    s3 = "--s3" in args
    args = [a for a in args if a != "--s3"]
    work = Path(args[0] if args else ROOT / "work" / "cluster").resolve()
    result = run(work, s3=s3)
    print(json.dumps(result, indent=2))
    expected = {"changeflow-capture-capture_hr", "changeflow-propagation-dbs1_to_dbs2",
                "changeflow-apply-apply_dbs2", "changeflow-verify-apply_dbs2"}
    ok = result["returncode"] == 0 and result["verified"] and \
        expected <= set(result["applications"]) and not result["magic_left"] and \
        (not s3 or result["objects"] > 0)
    print("cluster demo " + ("PASSED" if ok else f"FAILED (see {result['log']})"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
