"""The plugin's listener: after a propagation run ends, note why and pause when disabled.

Runs in the scheduler, inside the transaction that records the run's end, so it only
touches that transaction (no second connection: SQLite would deadlock on itself):

- a run whose window was not attempted (task skipped) gets a note saying why: the
  schedule is disabled (and why), or its next retry is due in a later window (with the
  failure count and the last error); a failed run gets the schedule's last error;
- a disabled schedule's DAG is paused once no other run of it is queued or running:
  the deferred half of ``changeflow schedules disable``, and the pause that follows an
  auto-disable after 16 consecutive failures.

The schedule is found through the DAG's timetable, which carries the configuration
file and the propagation's name. A listener must never break the scheduler: every
error is logged and swallowed.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)


def _timetable(dag_run: Any, session: Any) -> Any:
    dag = getattr(dag_run, "dag", None)
    if dag is None:
        from airflow.models.serialized_dag import SerializedDagModel

        dag = SerializedDagModel.get_dag(dag_run.dag_id, session=session)
    return getattr(dag, "timetable", None)


def note_for(row: Any, skipped: bool, failed: bool) -> str | None:
    """The note a finished window run gets, from its schedule's row (None: no note)."""
    if row is None:
        return "schedule dropped: nothing propagated" if skipped else None
    if skipped and row.disabled:
        return f"not attempted: schedule disabled ({row.disabled_reason})"
    if skipped and row.state.next_retry is not None:
        return (f"not attempted: waiting for retry {row.state.failures + 1}, due "
                f"{row.state.next_retry.isoformat(timespec='seconds')} in a later window "
                f"(last error: {row.state.last_error_msg})")
    if failed and row.state.last_error_msg:
        note = f"failure {row.state.failures}: {row.state.last_error_msg}"
        if row.disabled:
            note += f" — schedule disabled ({row.disabled_reason})"
        return note
    return None


def after_run(dag_run: Any, failed: bool) -> None:
    """Note the run and pause its DAG when its schedule is disabled and nothing is in flight."""
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from sqlalchemy import func, select
    from sqlalchemy.orm import object_session

    if "__propagation__" not in str(dag_run.dag_id):
        return
    session = object_session(dag_run)
    tt = _timetable(dag_run, session) if session is not None else None
    config, name = getattr(tt, "config", None), getattr(tt, "propagation", None)
    if session is None or not config or not name:
        return
    from changeflow.config import load_config
    from changeflow.schedules.window import schedule_store

    row = schedule_store(load_config(config), name).get(name)
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances(session=session)}
    note = note_for(row, states.get("window", "").endswith("skipped"), failed)
    if note and not dag_run.note:
        dag_run.note = note[:1000]
    if row is not None and not row.disabled:
        return
    others = session.scalar(select(func.count()).select_from(DagRun).where(
        DagRun.dag_id == dag_run.dag_id, DagRun.id != dag_run.id,
        DagRun.state.in_(("queued", "running"))))
    model = session.get(DagModel, dag_run.dag_id)
    if not others and model is not None and not model.is_paused:
        model.is_paused = True
        log.warning("changeflow: schedule of %s is disabled (%s): DAG %s paused", name,
                    row.disabled_reason if row else "dropped", dag_run.dag_id)


def _safe(dag_run: Any, failed: bool) -> None:
    try:
        after_run(dag_run, failed)
    except Exception:  # noqa: BLE001 (a listener must never break the scheduler)
        log.exception("changeflow listener failed for %s", getattr(dag_run, "run_id", "?"))


@hookimpl
def on_dag_run_success(dag_run: Any, msg: str) -> None:
    """A run ended green (or skipped): note it, pause a disabled schedule's DAG."""
    _safe(dag_run, failed=False)


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    """A run ended red: note the schedule's error, pause a disabled schedule's DAG."""
    _safe(dag_run, failed=True)
