"""The Airflow side of a schedule: its DAG, pausing and unpausing it, the window tasks.

Disabling a schedule pauses its DAG and enabling it unpauses it, through Airflow's
metadata database (the same code path as ``airflow dags pause``). Inside a running
Airflow task, where Airflow 3 forbids direct database access, the ``airflow dags
pause`` command is run instead.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def dag_id(pipeline: str, propagation: str) -> str:
    """The DAG id of a propagation's schedule (as :mod:`changeflow.airflow.dags` names it)."""
    return f"changeflow_{pipeline}__propagation__{propagation}"


def set_paused(dag: str, paused: bool) -> bool:
    """Pause or unpause a DAG. Returns False when Airflow does not know the DAG (yet)."""
    try:
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session

        with create_session() as session:
            model = session.get(DagModel, dag)
            if model is None:
                return False
            model.is_paused = paused
        return True
    except RuntimeError as exc:  # inside a task: the ORM is off limits
        log.info("pausing %s through the CLI (%s)", dag, exc)
    cmd = ["airflow", "dags", "pause" if paused else "unpause", dag, "-y"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log.error("%s failed: %s", " ".join(cmd), done.stderr.strip()[-500:])
    return done.returncode == 0


def is_paused(dag: str) -> bool | None:
    """Whether a DAG is paused (None when Airflow does not know it)."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        model = session.get(DagModel, dag)
        return None if model is None else bool(model.is_paused)


def sync_pause(config: str, name: str, dag: str) -> str:
    """After a window: pause the DAG when the schedule is disabled (the auto-disable).

    Airflow's own auto-pause calls nothing back, so the schedule store decides.
    """
    from changeflow.config import load_config
    from changeflow.schedules.window import schedule_store

    row = schedule_store(load_config(config), name).get(name)
    if row is None or not row.disabled:
        return "enabled"
    set_paused(dag, True)
    return f"disabled ({row.disabled_reason}): DAG {dag} paused"


def timetable_for(sched: dict[str, Any]) -> Any:
    """The timetable of a rendered schedule literal."""
    from changeflow.schedules.timetable import PropagationWindowTimetable

    return PropagationWindowTimetable(start=sched.get("start"), duration=sched.get("duration"),
                                      next_time=sched.get("next_time"),
                                      latency=sched.get("latency", 3.0))


def window_tasks(name: str, spec: dict[str, Any], root: Path, dag: str) -> Any:
    """The tasks of a window run: the Spark window job, then the pause check."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.providers.standard.operators.python import PythonOperator

    from changeflow.airflow.submit import SparkJobSpec, operator_kwargs

    config = str(root / spec["config"])
    job = SparkJobSpec(kind="propagation_window", name=name, config=config,
                       jobs_dir=str(root / "jobs"), conn_id=spec.get("conn_id", "spark_default"),
                       conf=spec.get("spark", {}))
    kw = operator_kwargs(job)
    kw["application_args"] += ["--start", "{{ data_interval_start }}",
                               "--end", "{{ data_interval_end }}"]
    # The window job retries by itself with the exact backoff; a retry beyond the window
    # is the next run. So no Airflow retries (its backoff has jitter).
    window = SparkSubmitOperator(task_id="window", retries=0, **kw)
    sync = PythonOperator(task_id="sync_schedule", python_callable=sync_pause,
                          op_args=[config, name, dag], trigger_rule="all_done", retries=0)
    window >> sync
    return window
