"""Propagation schedules: windows, latency, backoff, auto-disable, statistics, alerts.

- :mod:`~changeflow.schedules.model`: the schedule, its windows, the failure policy and
  the statistics, as pure functions of the time given.
- :mod:`~changeflow.schedules.store`: schedules and their statistics in a site's state store.
- :mod:`~changeflow.schedules.window`: one window's loop, in one Spark application.
- :mod:`~changeflow.schedules.alerts`: email and webhook notifications.
- :mod:`~changeflow.schedules.timetable`: the Airflow timetable (one DAG run per window).
- :mod:`~changeflow.schedules.airflow_ops`: pausing and unpausing the DAG of a schedule.
- :mod:`~changeflow.schedules.forms`: altering and backfilling a schedule from a form.

See ``docs/schedules.md``.
"""

from __future__ import annotations

from changeflow.schedules.model import (
    DEFAULT_LATENCY,
    INFINITE_SEGMENT,
    MAX_FAILURES,
    FailureState,
    Schedule,
    Stats,
    Window,
    next_attempt,
    next_window,
    retry_delay,
    window_at,
    windows_between,
)

__all__ = [
    "DEFAULT_LATENCY", "INFINITE_SEGMENT", "MAX_FAILURES", "FailureState", "Schedule", "Stats",
    "Window", "next_attempt", "next_window", "retry_delay", "window_at", "windows_between",
]
