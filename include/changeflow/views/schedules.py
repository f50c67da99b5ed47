"""The schedules as the changeflow page and ``changeflow schedules`` show them.

:func:`schedule_rows` is the ``user_queue_schedules`` view of every configured
propagation, completed with what an operator needs at a glance: the schedule's
*state* (``running``, ``enabled``, ``failing`` with the next retry, ``disabled``,
``auto-disabled`` with the reason), its DAG (paused, runs in flight) and a stale
``process`` entry cleared. Listing creates the configured schedule of a propagation
that has none, as the CLI does, so there is never a "(no schedule)" row.
:func:`undeliverable_rows` lists the UNDELIVERABLE records. The page's registry
(:mod:`changeflow.airflow.ui.registry`) shows both; the CLI uses the same functions.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from changeflow.config import PipelineConfig

UNDELIVERABLE_COLUMNS = (
    ("propagation", "text"), ("source_queue", "text", "source queue"),
    ("source_seq", "count", "source batch"), ("n_messages", "count", "messages"),
    ("exception_queue", "text", "exception queue"),
    ("exception_seq", "count", "exception batch"), ("state", "state"),
    ("error_message", "text", "error"), ("created_at", "time", "when"),
)


def state_of(row: dict[str, Any]) -> str:
    """The one-word state of a schedule row (with its DAG's pause state, when known).

    >>> state_of({"disabled": True, "disabled_reason": "failures"})
    'auto-disabled'
    >>> state_of({"disabled": False, "failures": 2, "process": None})
    'failing'
    >>> state_of({"disabled": False, "dag_paused": True})
    'paused'
    """
    if row.get("disabled"):
        return "auto-disabled" if row.get("disabled_reason") == "failures" else "disabled"
    if row.get("dag_paused"):
        return "paused"  # enabled, but its DAG is paused in Airflow: no window runs
    if row.get("process"):
        return "running"
    if row.get("failures"):
        return "failing"
    return "enabled"


def schedule_rows(cfg: PipelineConfig, pipeline: str | None = None,
                  with_airflow: bool = True) -> list[dict[str, Any]]:
    """Every configured propagation's schedule, with its state and its DAG's state.

    Args:
        pipeline: the DAG id prefix (for the DAG columns); None leaves them out.
        with_airflow: read the DAGs' pause state and runs from Airflow's database.
    """
    from changeflow.schedules.airflow_ops import dag_id, dag_state
    from changeflow.schedules.window import clear_stale_process, ensure_schedule

    now = dt.datetime.now(dt.UTC)
    out = []
    for p in cfg.propagations:
        store = ensure_schedule(cfg, p.name, now)
        stale = clear_stale_process(store, p.name)
        row = store.require(p.name)
        d = row.as_dict()
        d["stale_process_cleared"] = stale
        d["source_queue"], d["destination_queue"] = p.source_queue, p.destination_queue
        if not row.disabled and (row.next_run is None or row.next_run < now):
            d["next_run"] = _next_window_start(row, now)
        if pipeline is not None:
            d["dag_id"] = dag_id(pipeline, p.name)
            if with_airflow:
                try:
                    st = dag_state(d["dag_id"])
                    d["dag_known"], d["dag_paused"], d["runs_in_flight"] = (
                        st.known, st.paused, len(st.in_flight))
                except Exception as exc:  # noqa: BLE001 (shown, never fatal to the listing)
                    d["dag_error"] = str(exc).splitlines()[0][:300]
        d["state"] = state_of(d)
        out.append(d)
    return out


def _next_window_start(row: Any, now: dt.datetime) -> dt.datetime:
    """The start of the next window after ``now`` (an open window is not "next")."""
    from changeflow.schedules import model

    return model.next_window(row.schedule, now + dt.timedelta(microseconds=1)).start


def undeliverable_rows(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """The UNDELIVERABLE records of every configured propagation, newest first."""
    from changeflow.schedules.window import schedule_store

    out: list[dict[str, Any]] = []
    for p in cfg.propagations:
        out.extend(schedule_store(cfg, p.name).undeliverable(p.name))
    return sorted(out, key=lambda r: r["id"], reverse=True)
