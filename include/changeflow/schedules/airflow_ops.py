"""The Airflow side of a schedule: its DAG and window task, pausing, triggering, backfill.

A schedule's DAG is paused when the schedule is disabled, without stranding work:
Airflow examines no run of a paused DAG (a running run would never finish, queued
backfill runs would never start), so the DAG is paused only once it has no run in
flight. :func:`toggle` (the CLI and the UI page) disables the schedule first (the open
window ends within a second, its run ends green), waits for the DAG's in-flight runs,
then pauses it; runs still in flight after the wait are left to finish, and the
plugin's listener (:mod:`changeflow.airflow.listener`) pauses the DAG when the last one
ends, as it does after an auto-disable. Enabling unpauses at once. A toggle changes
both the schedule and the DAG, or neither: Airflow is checked first, and the schedule
is restored if Airflow refuses.

Everything here uses Airflow's metadata database, so it runs where that is allowed:
the CLI (after :func:`changeflow.airflow.home.prepare`), the API server (the UI page)
and the scheduler (the listener); never inside a task.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from changeflow.config import PipelineConfig
from changeflow.errors import ConfigError

log = logging.getLogger(__name__)
IN_FLIGHT = ("queued", "running")


def dag_id(pipeline: str, propagation: str) -> str:
    """The DAG id of a propagation's schedule (as :mod:`changeflow.airflow.dags` names it).

    >>> dag_id("demo", "dbs1_to_dbs2")
    'changeflow_demo__propagation__dbs1_to_dbs2'
    """
    return f"changeflow_{pipeline}__propagation__{propagation}"


def timetable_for(sched: dict[str, Any], config: str | None = None,
                  propagation: str | None = None) -> Any:
    """The timetable of a rendered schedule literal."""
    from changeflow.schedules.timetable import PropagationWindowTimetable

    return PropagationWindowTimetable(start=sched.get("start"), duration=sched.get("duration"),
                                      next_time=sched.get("next_time"),
                                      latency=sched.get("latency", 3.0), config=config,
                                      propagation=propagation)


def _retry_locked(fn: Any, *args: Any, tries: int = 6, **kwargs: Any) -> Any:
    """Call ``fn``, retrying while Airflow's SQLite database is locked by the scheduler.

    The embedded metadata database has one writer at a time; a busy scheduler can hold it
    longer than SQLite's wait. Each try is its own transaction, so a retry repeats nothing.
    """
    for attempt in range(tries):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if "database is locked" not in str(exc) or attempt == tries - 1:
                raise
            log.info("Airflow's database is locked; retrying (%d)", attempt + 1)
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass
class DagState:
    """What Airflow knows of a DAG: whether it exists, is paused, which runs are in flight."""

    dag_id: str
    known: bool
    paused: bool | None = None
    in_flight: list[str] = field(default_factory=list)
    #: runs in flight that have not started (queued: a paused DAG's never start)
    waiting: list[str] = field(default_factory=list)


def dag_state(dag: str) -> DagState:
    """The DAG's pause state and its queued or running runs."""
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        model = session.get(DagModel, dag)
        if model is None:
            return DagState(dag, False)
        runs = session.execute(select(DagRun.run_id, DagRun.state, DagRun.start_date).where(
            DagRun.dag_id == dag, DagRun.state.in_(IN_FLIGHT))).all()
        return DagState(dag, True, bool(model.is_paused), [r[0] for r in runs],
                        [r[0] for r in runs if r[1] == "queued" and r[2] is None])


def require_dag(dag: str) -> DagState:
    """The DAG's state; raises when Airflow does not know the DAG (nothing is changed)."""
    state = dag_state(dag)
    if not state.known:
        raise ConfigError(
            f"Airflow does not know the DAG {dag} (not parsed yet, or another pipeline name: "
            "--pipeline / CHANGEFLOW_PIPELINE); nothing was changed")
    return state


def set_paused(dag: str, paused: bool) -> None:
    """Pause or unpause a DAG (Airflow's own ``airflow dags pause`` code path)."""
    _retry_locked(_set_paused, dag, paused)


def _set_paused(dag: str, paused: bool) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        model = session.get(DagModel, dag)
        if model is None:
            raise ConfigError(f"Airflow does not know the DAG {dag}")
        model.is_paused = paused


def is_paused(dag: str) -> bool | None:
    """Whether a DAG is paused (None when Airflow does not know it)."""
    state = dag_state(dag)
    return state.paused if state.known else None


def pause_when_idle(dag: str, timeout: float, poll: float = 0.5) -> DagState:
    """Pause a DAG once no run of it is running (waiting up to ``timeout`` s).

    A run still queued, never started, does not hold the pause: it is deleted once the
    DAG is paused (it would start with the next enable and hold the window job that
    enable resumes behind it; the enable starts a run of its own, :func:`resume`).

    Returns the DAG's state: ``paused`` False when runs were still in flight at the end
    of the wait (the listener pauses it when the last one ends).
    """
    deadline = time.monotonic() + timeout
    while True:
        state = require_dag(dag)
        if not set(state.in_flight) - set(state.waiting):
            set_paused(dag, True)
            if state.waiting:
                _retry_locked(_drop_waiting, dag, state.waiting)
            return DagState(dag, True, True, [])
        if time.monotonic() >= deadline:
            return state
        time.sleep(poll)


def _drop_waiting(dag: str, run_ids: list[str]) -> None:
    """Delete runs of a paused DAG that are still queued and never started."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        for run in session.scalars(select(DagRun).where(
                DagRun.dag_id == dag, DagRun.run_id.in_(run_ids), DagRun.state == "queued",
                DagRun.start_date.is_(None))).all():
            log.info("DAG %s paused: its queued run %s, never started, is removed", dag,
                     run.run_id)
            session.delete(run)


@dataclass
class ToggleResult:
    """What :func:`toggle` did."""

    propagation: str
    dag_id: str
    disabled: bool
    paused: bool | None
    in_flight: list[str]
    message: str


def toggle(cfg: PipelineConfig, name: str, dag: str, disable: bool, *,
           wait: float = 60.0, airflow: bool = True, by: str = "cli",
           user: str | None = None) -> ToggleResult:
    """Enable or disable a schedule and unpause or pause its DAG: both, or neither.

    Enabling also resumes the window open now (``ENABLE_PROPAGATION_SCHEDULE`` resumes
    at once): unless a window job is running, it starts a run of the DAG at once
    (:func:`resume`), instead of leaving the open window to the timetable's next run,
    which may be up to an hour away.

    Args:
        dag: the schedule's DAG id.
        wait: seconds to wait for in-flight runs before pausing.
        airflow: False changes the schedule only (no Airflow at hand).
        by: who asks (Airflow's ``triggered_by`` of a resumed run: ``cli``, ``ui``).

    Raises:
        ConfigError: Airflow does not know the DAG (checked before anything changes).
    """
    from changeflow.schedules.window import ensure_schedule

    if airflow:
        require_dag(dag)
    store = ensure_schedule(cfg, name, dt.datetime.now(dt.UTC))
    before = store.require(name)
    store.set_disabled(name, disable, "user" if disable else None)
    if not airflow:
        return ToggleResult(name, dag, disable, None, [], "schedule only (--no-airflow)")
    resumed: str | None = None
    try:
        if not disable:
            # the run first, while the DAG is paused: the scheduler makes no run of a
            # paused DAG, so it cannot make the open window's run beside the enable's
            resumed = resume(store, name, dag, by=by, user=user)
            set_paused(dag, False)
            return ToggleResult(name, dag, False, False, [], f"enabled; DAG {dag} unpaused"
                                + (f"; the open window resumes in run {resumed}"
                                   if resumed else ""))
        state = pause_when_idle(dag, wait)
    except BaseException:
        store.set_disabled(name, before.disabled, before.disabled_reason, reset_failures=False)
        if resumed is not None and is_paused(dag):
            _retry_locked(_drop_waiting, dag, [resumed])
        raise
    if state.paused:
        return ToggleResult(name, dag, True, True, [], f"disabled; DAG {dag} paused")
    return ToggleResult(
        name, dag, True, False, state.in_flight,
        f"disabled; DAG {dag} is paused as soon as its runs in flight end "
        f"({', '.join(state.in_flight)})")


def resume(store: Any, name: str, dag: str, *, by: str = "cli",
           user: str | None = None) -> str | None:
    """Give the window open now a run, unless a window job is running already.

    Called before the enable unpauses the DAG. The run is the window's own scheduled
    run (logical date the window's start, as the timetable makes it), made now instead
    of at the unpause, when the window has no run yet. Airflow's scheduler makes a run
    for its next logical date unless one with that date exists, and, since the DAG
    processor counts only scheduled and backfill runs when it works out that date, it
    would make that same window's run on the unpause beside a run without a logical
    date; the one that sorts first (the earlier ``run_after``: the scheduler's) takes
    the window and the other waits queued until the window ends (``max_active_runs=1``).

    When the window has its run already (the disable ended it), a run without a logical
    date takes the window up again: the scheduler makes no other for a window that has
    its run. A run of another window still in flight (the disable just stopped its job)
    does not prevent it: the new run starts as soon as that one ends.

    Returns:
        The run's id, or None: no window is open now (the timetable starts the next
        one), a window job runs (it re-reads the schedule every second and goes on), or
        the DAG is unpaused and the scheduler is due to make the window's run itself.
    """
    from changeflow.schedules import model
    from changeflow.schedules.window import process_alive

    row = store.require(name)
    window = model.window_at(row.schedule, dt.datetime.now(dt.UTC))
    if window is None:
        return None
    if row.process and process_alive(row.process) is not False:
        return None
    state = require_dag(dag)
    if state.waiting:  # queued while the DAG was paused: it starts now, and runs the window
        return state.waiting[0]
    return _retry_locked(_resume_run, dag, bool(state.paused), user=user, by=by)


RESUMED = "schedule enabled: the open window resumes"


def _resume_run(dag: str, paused: bool, *, user: str | None, by: str) -> str | None:
    """The open window's run, in one transaction (see :func:`resume`)."""
    import pendulum
    from airflow.models.dag import DagModel
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunType
    from sqlalchemy import select

    with create_session() as session:
        serdag = DBDagBag().get_latest_version_of_dag(dag, session=session)
        model = session.get(DagModel, dag)
        if serdag is None or model is None:
            raise ConfigError(f"Airflow does not know the DAG {dag}")
        # the window as the DAG's timetable counts it (the scheduler's logical dates)
        now = pendulum.now("UTC")
        window = serdag.timetable.infer_manual_data_interval(run_after=now)
        own = session.scalar(select(DagRun.run_id).where(
            DagRun.dag_id == dag, DagRun.logical_date == window.start))
        if own is not None or window.start == window.end:
            return str(_create_run(dag, note=RESUMED, user=user, by=by, session=session).run_id)
        if not paused:
            due = model.next_dagrun_create_after
            if due is not None and due <= now:
                log.info("DAG %s is unpaused: the scheduler makes the open window's run", dag)
                return None
            return str(_create_run(dag, note=RESUMED, user=user, by=by, session=session).run_id)
        run = _create_run(dag, note=RESUMED, user=user, by=by, session=session,
                          run_type=DagRunType.SCHEDULED, logical_date=window.start)
        # the next run to make is the next window's, as the scheduler records after a run
        # (should it still look at this one, it finds the run and makes none)
        model.calculate_dagrun_date_fields(serdag, reference_run=run)
        return str(run.run_id)


def _create_run(dag: str, *, note: str | None, user: str | None, by: str, session: Any,
                run_type: Any = None, logical_date: dt.datetime | None = None) -> Any:
    """A new queued ``DagRun``: without a logical date, or the window's at one."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    run = trigger_dag(dag, triggered_by=DagRunTriggeredByType(by),
                      run_type=run_type or DagRunType.MANUAL, triggering_user_name=user,
                      run_after=logical_date or dt.datetime.now(dt.UTC),
                      logical_date=logical_date, replace_microseconds=False, note=note,
                      session=session)
    if run is None:
        raise ConfigError(f"Airflow did not create a run of {dag}")
    session.flush()
    return run


def trigger(dag: str, *, note: str | None = None, user: str | None = None,
            by: str = "cli") -> str:
    """Start a run now, without a logical date (as the UI's trigger does). Returns its id."""
    from airflow.utils.session import create_session

    state = require_dag(dag)
    if state.paused:
        raise ConfigError(f"the DAG {dag} is paused (its schedule is disabled): Airflow "
                          "would not start the run; enable the schedule first")

    def create() -> str:
        with create_session() as session:
            return str(_create_run(dag, note=note, user=user, by=by, session=session).run_id)

    return str(_retry_locked(create))


def backfill(dag: str, start: dt.datetime, end: dt.datetime, *,
             user: str | None = None) -> dict[str, Any]:
    """Backfill the windows starting in ``[start, end]``: one run per window.

    Refused when the DAG is paused (a disabled schedule): Airflow starts no run of a
    paused DAG, so the backfill would wait unseen. Windows that ran and failed are run
    again; windows that succeeded are not.

    Returns:
        ``{"id": backfill id, "runs": number of runs created}``.
    """
    from airflow.models.backfill import BackfillDagRun, ReprocessBehavior, _create_backfill
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    if end < start:
        raise ConfigError(f"backfill range ends ({end.isoformat()}) before it starts "
                          f"({start.isoformat()})")
    state = require_dag(dag)
    if state.paused:
        raise ConfigError(
            f"the schedule of {dag} is disabled (DAG paused): Airflow runs no run of a paused "
            "DAG, so a backfill would wait unseen. Enable the schedule, then backfill")
    b = _retry_locked(_create_backfill, dag_id=dag, from_date=start, to_date=end,
                      max_active_runs=1, reverse=False, dag_run_conf=None,
                      triggering_user_name=user, reprocess_behavior=ReprocessBehavior.FAILED)
    with create_session() as session:
        n = session.scalar(select(func.count()).select_from(BackfillDagRun).where(
            BackfillDagRun.backfill_id == b.id, BackfillDagRun.dag_run_id.is_not(None)))
    return {"id": b.id, "runs": int(n or 0)}
