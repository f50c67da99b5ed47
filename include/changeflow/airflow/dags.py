"""Building Airflow DAGs from a rendered pipeline spec.

A pipeline file under ``dags/`` holds its spec as a literal (written by
``changeflow dags render``) and calls :func:`build_dags`, so parsing a DAG file does
no I/O. Each capture, propagation and apply gets its own DAG; the pipeline DAG runs
them all in order (captures, then propagations, then applies, then the optional
verification), which is what ``make demo`` runs with ``airflow dags test``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from changeflow.airflow.submit import SparkJobSpec, operator_kwargs

START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
ORDER = ("capture", "propagation", "apply", "verify")


def default_args(kind: str) -> dict[str, Any]:
    """Task defaults: an owner, and retries for transient failures."""
    return {
        "owner": "changeflow",
        "retries": 2 if kind != "verify" else 0,
        "retry_delay": dt.timedelta(seconds=30),
    }


def _task(kind: str, name: str, spec: dict[str, Any], root: Path, task_id: str) -> Any:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    job = SparkJobSpec(
        kind=kind, name=name, config=str(root / spec["config"]), jobs_dir=str(root / "jobs"),
        conn_id=spec.get("conn_id", "spark_default"), conf=spec.get("spark", {}),
    )
    return SparkSubmitOperator(task_id=task_id, **operator_kwargs(job))


def component_dag(kind: str, name: str, spec: dict[str, Any], root: Path) -> Any:
    """The DAG of one capture, propagation or apply (triggered, or on its schedule)."""
    from airflow.sdk import DAG

    dag_id = f"changeflow_{spec['pipeline']}__{kind}__{name}"
    sched = spec.get("schedules", {}).get(name) if kind == "propagation" else None
    if sched is not None:  # one run per propagation window (see changeflow.schedules)
        from changeflow.schedules import airflow_ops
    with DAG(
        dag_id=dag_id,
        description=f"changeflow {kind} {name} ({spec['config']})",
        doc_md=f"Runs the {kind} **{name}** of `{spec['config']}` once per run.",
        start_date=START,
        schedule=airflow_ops.timetable_for(sched) if sched is not None else None,
        catchup=False,
        max_active_runs=1,
        default_args=default_args(kind),
        tags=["changeflow", kind, spec["pipeline"]],
    ) as dag:
        if sched is not None:
            airflow_ops.window_tasks(name, spec, root, dag_id)
        else:
            _task(kind, name, spec, root, task_id=kind)
    return dag


def pipeline_dag(spec: dict[str, Any], root: Path) -> Any:
    """The DAG that runs every component of the pipeline once, in order."""
    from airflow.sdk import DAG

    dag_id = f"changeflow_{spec['pipeline']}__pipeline"
    with DAG(
        dag_id=dag_id,
        description=f"changeflow pipeline {spec['pipeline']}: capture, propagate, apply",
        doc_md=spec.get("doc", ""),
        start_date=START,
        schedule=None,
        catchup=False,
        max_active_runs=1,
        default_args=default_args("pipeline"),
        tags=["changeflow", "pipeline", spec["pipeline"]],
    ) as dag:
        previous: list[Any] = []
        for kind in ORDER:
            names = spec["components"].get(kind, [])
            tasks = [_task(kind, n, spec, root, task_id=f"{kind}__{n}") for n in names]
            for t in tasks:
                for p in previous:
                    p >> t
            previous = tasks or previous
    return dag


def build_dags(spec: dict[str, Any], project_root: Path) -> dict[str, Any]:
    """Every DAG of a rendered pipeline spec, by DAG id."""
    dags = [pipeline_dag(spec, project_root)]
    for kind in ("capture", "propagation", "apply"):
        for name in spec["components"].get(kind, []):
            dags.append(component_dag(kind, name, spec, project_root))
    return {d.dag_id: d for d in dags}
