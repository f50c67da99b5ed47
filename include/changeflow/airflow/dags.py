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
from changeflow.jvm import jars_root

START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
ORDER = ("capture", "propagation", "apply", "verify")
#: Airflow retries of a job that exited transient (75): after 30 s, 60 s, 120 s.
RETRIES = 3


def default_args(kind: str) -> dict[str, Any]:
    """Task defaults: an owner, and exact retries of transient exits only.

    The retry policy reads the job's exit code (:mod:`changeflow.airflow.operators`):
    75 retries after exactly 30 s x 2^(n-1), 65 and 1 fail at once. The demo's
    verification is never retried.
    """
    from changeflow.airflow.operators import FIRST_RETRY, ExitCodeRetryPolicy

    return {
        "owner": "changeflow",
        "retries": RETRIES if kind != "verify" else 0,
        "retry_delay": FIRST_RETRY,
        "retry_policy": ExitCodeRetryPolicy(),
    }


def _callbacks(spec: dict[str, Any], root: Path, component: str) -> dict[str, Any]:
    from changeflow.airflow.notifiers import notifiers

    config = str(root / spec["config"])
    failed = notifiers(spec.get("alerts"), config, component, "task_failed")
    retry = notifiers(spec.get("alerts"), config, component, "task_retry")
    return {"on_failure_callback": failed, "on_retry_callback": retry} if failed else {}


def _task(kind: str, name: str, spec: dict[str, Any], root: Path, task_id: str,
          args: tuple[str, ...] = ()) -> Any:
    from changeflow.airflow.operators import ChangeflowSparkSubmitOperator

    job = SparkJobSpec(
        kind=kind, name=name, config=str(root / spec["config"]), jobs_dir=str(root / "jobs"),
        jars_dir=str(jars_root() / "spark"),
        conn_id=spec.get("conn_id", "spark_default"), conf=spec.get("spark", {}), args=args,
    )
    extra: dict[str, Any] = {"retries": 0} if kind == "verify" else {}
    return ChangeflowSparkSubmitOperator(task_id=task_id, **operator_kwargs(job), **extra,
                                         **_callbacks(spec, root, f"{kind} {name}"))


def component_dag(kind: str, name: str, spec: dict[str, Any], root: Path) -> Any:
    """The DAG of one capture, propagation or apply (triggered, or on its schedule)."""
    from airflow.sdk import DAG

    dag_id = f"changeflow_{spec['pipeline']}__{kind}__{name}"
    sched = spec.get("schedules", {}).get(name) if kind == "propagation" else None
    kept = spec.get("keep_running", {}).get(name) if kind == "apply" else None
    schedule: Any = None
    if sched is not None:  # one run per propagation window (see changeflow.schedules)
        from changeflow.schedules import airflow_ops

        schedule = airflow_ops.timetable_for(sched, config=str(root / spec["config"]),
                                             propagation=name)
    elif kept is not None:  # an apply that keeps running: one job per period
        schedule = dt.timedelta(minutes=kept["minutes"])
    with DAG(
        dag_id=dag_id,
        description=f"changeflow {kind} {name} ({spec['config']})",
        doc_md=_doc(kind, name, spec, sched, kept),
        start_date=START,
        schedule=schedule,
        catchup=False,
        max_active_runs=1,
        default_args=default_args(kind),
        tags=["changeflow", kind, spec["pipeline"]],
    ) as dag:
        if sched is not None:
            window_task(name, spec, root, **_callbacks(spec, root, name))
        else:
            _task(kind, name, spec, root, task_id=kind, args=() if kept is None else (
                "--every", f"{kept['every']:g}", "--for", f"{kept['for']:g}"))
    return dag


def window_task(name: str, spec: dict[str, Any], root: Path, **callbacks: Any) -> Any:
    """The one task of a window run: the Spark window job (see ``PropagationWindowOperator``).

    Only a start-up failure the job could not count (exit 75) is retried by Airflow, at
    exactly 30 s, 60 s, 120 s; failures inside the window follow the schedule's own
    backoff (seed 002), so the job's exit 1 is never retried by Airflow.
    """
    from changeflow.airflow.operators import PropagationWindowOperator

    config = str(root / spec["config"])
    job = SparkJobSpec(kind="propagation_window", name=name, config=config,
                       jobs_dir=str(root / "jobs"), jars_dir=str(jars_root() / "spark"),
                       conn_id=spec.get("conn_id", "spark_default"),
                       conf=spec.get("spark", {}))
    return PropagationWindowOperator(task_id="window", config=config, propagation=name,
                                     **operator_kwargs(job), **callbacks)


def _doc(kind: str, name: str, spec: dict[str, Any], sched: dict[str, Any] | None,
         kept: dict[str, Any] | None = None) -> str:
    if kept is not None:
        return (f"Keeps the apply **{name}** of `{spec['config']}` running: a DAG run every "
                f"{kept['minutes']:g} minutes, whose job applies every {kept['every']:g} s "
                f"in one Spark session for {kept['for']:g} s (`--every`, `--for`; see "
                "`docs/operations.md`). Pause the DAG to stop after this run; marking the task "
                "failed kills the job (a pass it kills is redone by the next: exactly once).")
    if sched is None:
        return f"Runs the {kind} **{name}** of `{spec['config']}` once per run."
    return (f"Propagation **{name}** of `{spec['config']}`: one run per window of its "
            "schedule. The `window` task runs the window as one Spark application; it is "
            "*skipped* (not failed) when the schedule is disabled or its next retry is due in "
            "a later window. Manage the schedule in **changeflow** (main navigation) or with "
            "`changeflow schedules`; see `docs/schedules.md`.")


def _pipeline_doc(spec: dict[str, Any]) -> str:
    steps = " → ".join(f"{k} ({', '.join(spec['components'][k])})" for k in ORDER
                       if spec["components"].get(k))
    return (f"The **{spec['pipeline']}** pipeline of `{spec['config']}`, every component "
            f"once, in order: {steps}. Each task is a spark-submit job.")


def pipeline_dag(spec: dict[str, Any], root: Path) -> Any:
    """The DAG that runs every component of the pipeline once, in order."""
    from airflow.sdk import DAG

    dag_id = f"changeflow_{spec['pipeline']}__pipeline"
    with DAG(
        dag_id=dag_id,
        description=f"changeflow pipeline {spec['pipeline']}: capture, propagate, apply",
        doc_md=spec.get("doc") or _pipeline_doc(spec),
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
        for name, ups in spec.get("upstream", {}).items():  # directed networks
            for up in ups:
                dag.get_task(f"propagation__{up}") >> dag.get_task(f"propagation__{name}")
    return dag


def build_dags(spec: dict[str, Any], project_root: Path) -> dict[str, Any]:
    """Every DAG of a rendered pipeline spec, by DAG id."""
    dags = [pipeline_dag(spec, project_root)]
    for kind in ("capture", "propagation", "apply"):
        for name in spec["components"].get(kind, []):
            dags.append(component_dag(kind, name, spec, project_root))
    return {d.dag_id: d for d in dags}
