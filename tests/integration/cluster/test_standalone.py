"""Scale-out, proven: the demo DAG against a Spark standalone cluster (a master and two
workers) through the same ``spark_default`` connection, state stores on PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from changeflow.testing import cluster_demo

ENV_SH = cluster_demo.ROOT / "scripts" / "env.sh"


def test_env_sh_passes_the_connection_a_user_set_unchanged() -> None:
    """What the cluster demo (and a user moving to a cluster) sets reaches Airflow as is."""
    conn = json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1:7077"})
    out = subprocess.run([str(ENV_SH), "printenv", "AIRFLOW_CONN_SPARK_DEFAULT"], check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "AIRFLOW_CONN_SPARK_DEFAULT": conn}).stdout
    assert json.loads(out) == json.loads(conn)
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW_CONN_SPARK_DEFAULT"}
    out = subprocess.run([str(ENV_SH), "printenv", "AIRFLOW_CONN_SPARK_DEFAULT"], check=True,
                         capture_output=True, text=True, env=env).stdout
    assert json.loads(out) == {"conn_type": "spark", "host": "local[2]"}


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.airflow
@pytest.mark.postgres
@pytest.mark.spark
def test_demo_dag_runs_on_a_standalone_cluster(tmp_path: Path) -> None:
    result = cluster_demo.run(tmp_path / "cluster", rounds=1, employees=40)
    assert result["returncode"] == 0, f"DAG run failed, see {result['log']}"
    assert result["workers"] == 2
    # every job was an application of the cluster, not a local Spark
    assert {"changeflow-capture-capture_hr", "changeflow-propagation-dbs1_to_dbs2",
            "changeflow-apply-apply_dbs2", "changeflow-verify-apply_dbs2"} <= \
        set(result["applications"])
    # and recorded its run in the PostgreSQL state stores
    assert {"capture:capture_hr:succeeded", "propagation:dbs1_to_dbs2:succeeded",
            "apply:apply_dbs2:succeeded"} <= set(result["runs"])
    assert result["verified"], f"targets differ from the source, see {result['log']}"
