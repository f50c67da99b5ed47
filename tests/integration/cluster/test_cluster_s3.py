"""A cluster that fails, over an object store: the demo DAG on a standalone cluster with
both sites on S3 buckets, and a worker killed during the propagation and during the
apply (the chaos suite's cluster trial): nothing lost, nothing duplicated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from changeflow.testing import cluster_demo
from changeflow.testing.chaos_cluster import run_cluster_trials

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.postgres, pytest.mark.spark]


@pytest.mark.airflow
def test_demo_dag_on_a_cluster_over_s3(tmp_path: Path) -> None:
    result = cluster_demo.run(tmp_path / "cluster", rounds=1, employees=40, s3=True)
    assert result["returncode"] == 0, f"DAG run failed, see {result['log']}"
    assert {"changeflow-propagation-dbs1_to_dbs2", "changeflow-apply-apply_dbs2"} <= \
        set(result["applications"])
    assert result["objects"] > 0 and result["magic_left"] == []
    assert result["verified"], f"targets differ from the source, see {result['log']}"


def test_a_worker_lost_mid_stage_loses_and_duplicates_nothing(spark: Any) -> None:
    out = run_cluster_trials(spark, rounds=1, seed=11)
    assert out["failures"] == [], out
    assert (out["lost"], out["duplicated"], out["target_mismatches"]) == (0, 0, 0)
    # a worker died while each stage had executors at work (not after it finished)
    assert out["kills"] == 2, out["trials_detail"]
    assert {"changeflow-propagation-p12", "changeflow-apply-ap"} <= set(out["applications"])
    assert out["messages"] > 0
