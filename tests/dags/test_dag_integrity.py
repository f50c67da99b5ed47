"""DAG integrity: every DAG file loads without errors and follows the project's policies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def dagbag():  # type: ignore[no-untyped-def]
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


def test_no_import_errors(dagbag) -> None:  # type: ignore[no-untyped-def]
    assert dagbag.import_errors == {}
    assert "changeflow_demo__pipeline" in dagbag.dag_ids


def test_one_dag_per_component_plus_pipeline(dagbag) -> None:  # type: ignore[no-untyped-def]
    demo = sorted(d for d in dagbag.dag_ids if d.startswith("changeflow_demo__"))
    assert demo == [
        "changeflow_demo__apply__apply_dbs2",
        "changeflow_demo__capture__capture_hr",
        "changeflow_demo__pipeline",
        "changeflow_demo__propagation__dbs1_to_dbs2",
    ]
    pipeline = dagbag.dags["changeflow_demo__pipeline"]
    order = [t.task_id for t in pipeline.topological_sort()]
    assert order == ["capture__capture_hr", "propagation__dbs1_to_dbs2", "apply__apply_dbs2",
                     "verify__apply_dbs2"]


def test_policies(dagbag) -> None:  # type: ignore[no-untyped-def]
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowException

    from changeflow.airflow.operators import (
        ChangeflowSparkSubmitOperator,
        ExitCodeRetryPolicy,
        TerminalJobError,
        TransientJobError,
    )

    for dag_id, dag in dagbag.dags.items():
        assert "changeflow" in dag.tags, dag_id
        assert dag.max_active_runs == 1, dag_id
        assert not dag.catchup, dag_id
        for task in dag.tasks:
            assert task.owner == "changeflow", (dag_id, task.task_id)
            if not isinstance(task, SparkSubmitOperator):
                continue  # e.g. the MCQ pump: a Python task, no job exit codes
            assert isinstance(task, ChangeflowSparkSubmitOperator), (dag_id, task.task_id)
            assert task.application.startswith(str(ROOT / "jobs")), task.application
            assert isinstance(task.retry_policy, ExitCodeRetryPolicy), (dag_id, task.task_id)
            assert task.retries == (0 if task.task_id.startswith("verify") else 3), task.task_id
            # what the task does with each exit code of its job
            transient = task.classify(AirflowException("Cannot execute: x. Error code is: 75."))
            assert isinstance(transient, TransientJobError)
            decisions = [task.retry_policy.evaluate(transient, n, 4) for n in (1, 2, 3)]
            assert [d.retry_delay.total_seconds() for d in decisions] == [30, 60, 120]
            terminal = task.classify(AirflowException("Cannot execute: x. Error code is: 65."))
            assert isinstance(terminal, TerminalJobError)
            assert task.retry_policy.evaluate(terminal, 1, 4).action.value == "fail"


def test_window_task_skips_idle_windows_and_has_documented_dags(dagbag) -> None:  # type: ignore[no-untyped-def]
    from airflow.sdk.exceptions import AirflowException, AirflowSkipException

    window = dagbag.dags["changeflow_demo__propagation__dbs1_to_dbs2"].get_task("window")
    idle = window.classify(AirflowException("Cannot execute: x. Error code is: 99."))
    assert isinstance(idle, AirflowSkipException)
    pipeline = dagbag.dags["changeflow_demo__pipeline"]
    for word in ("capture_hr", "dbs1_to_dbs2", "apply_dbs2", "config/demo.yaml"):
        assert word in pipeline.doc_md, word
    assert "skipped" in dagbag.dags["changeflow_demo__propagation__dbs1_to_dbs2"].doc_md


def test_window_of_a_run_without_logical_date(dagbag) -> None:  # type: ignore[no-untyped-def]
    import datetime as dt
    from types import SimpleNamespace

    dag = dagbag.dags["changeflow_demo__propagation__dbs1_to_dbs2"]
    window = dag.get_task("window")
    after = dt.datetime(2026, 5, 1, 10, 20, tzinfo=dt.UTC)
    start, end = window.window({"dag": dag, "dag_run": SimpleNamespace(run_after=after)})
    # the demo's infinite window runs as 1-hour segments: the one open at run_after
    assert (start, end) == (dt.datetime(2026, 5, 1, 10, tzinfo=dt.UTC),
                            dt.datetime(2026, 5, 1, 11, tzinfo=dt.UTC))


def test_rendered_dag_file_is_current(tmp_path: Path) -> None:
    from changeflow.airflow.render import render
    from changeflow.config import load_config

    cfg = load_config(ROOT / "config" / "demo.yaml")
    text = render(cfg, project_root=str(ROOT), pipeline="demo", verify=["apply_dbs2"])
    assert (ROOT / "dags" / "changeflow_demo.py").read_text() == text, "run `make render`"


def test_dag_files_do_no_io_at_import() -> None:
    """A DAG file may only build DAGs: no open(), no Spark, no connections at module level."""
    for path in (ROOT / "dags").glob("*.py"):
        text = path.read_text()
        for banned in ("open(", "SparkSession", "get_connection", "Variable.get", "load_config"):
            assert banned not in text, (path.name, banned)
