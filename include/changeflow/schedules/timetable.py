"""The Airflow timetable of a propagation schedule: one DAG run per window.

A run's data interval is the window ``[start, end)`` and the run is created at the
window's *start* (not after its end, as interval timetables do): the run is the
window. An infinite window (``duration`` NULL) is a series of back-to-back bounded
segments of :data:`~changeflow.schedules.model.INFINITE_SEGMENT`, so the UI, retries
and backfill all deal with bounded runs; the window loop carries failures and a
pending retry across segments. With ``catchup=False`` the first run is the window
open now (so "start now" starts at once); a backfill creates one run per window
starting in the range. Registered by :class:`changeflow.airflow.plugin.ChangeflowPlugin`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pendulum
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction, Timetable

from changeflow.schedules import model

#: Where windows are counted from when the schedule has no fixed start ("now").
EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _std(t: dt.datetime) -> dt.datetime:
    # Airflow hands pendulum datetimes (possibly naive UTC); the model works in stdlib UTC.
    t = t if t.tzinfo else t.replace(tzinfo=dt.UTC)
    return dt.datetime.fromtimestamp(t.timestamp(), dt.UTC)


def _pdt(t: dt.datetime) -> pendulum.DateTime:
    return pendulum.instance(t).in_timezone("UTC")


class PropagationWindowTimetable(Timetable):
    """Runs a propagation once per window of its schedule.

    Args:
        start: ISO start of the first window; None counts windows from :data:`EPOCH`.
        duration: window length in seconds (None: infinite, run as segments).
        next_time: seconds between window starts (None: back to back).
        latency: the schedule's latency in seconds (shown in the summary).
        config: the pipeline configuration (for the plugin's listener, which finds the
            schedule of a finished run through it).
        propagation: the propagation whose schedule this is.
    """

    def __init__(self, start: str | None = None, duration: float | None = None,
                 next_time: float | None = None, latency: float = model.DEFAULT_LATENCY,
                 config: str | None = None, propagation: str | None = None):
        self.start, self.duration, self.next_time, self.latency = (
            start, duration, next_time, latency)
        self.config, self.propagation = config, propagation
        anchor = dt.datetime.fromisoformat(start) if start else EPOCH
        self.schedule = model.Schedule("timetable", start=anchor, duration=duration,
                                       next_time=next_time, latency=latency)
        self.description = self.schedule.summary

    @property
    def summary(self) -> str:
        return self.schedule.summary

    def serialize(self) -> dict[str, Any]:
        return {"start": self.start, "duration": self.duration, "next_time": self.next_time,
                "latency": self.latency, "config": self.config, "propagation": self.propagation}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> Timetable:
        return cls(**data)

    def _info(self, w: model.Window) -> DagRunInfo:
        start, end = _pdt(w.start), _pdt(w.end)
        return DagRunInfo(run_after=start, data_interval=DataInterval(start, end))

    def infer_manual_data_interval(self, *, run_after: pendulum.DateTime) -> DataInterval:
        """A manual run is the window open at ``run_after``; between windows, one pass."""
        w = model.window_at(self.schedule, _std(run_after))
        if w is None:
            return DataInterval(run_after, run_after)
        return DataInterval(_pdt(w.start), _pdt(w.end))

    def next_dagrun_info(self, *, last_automated_data_interval: DataInterval | None,
                         restriction: TimeRestriction) -> DagRunInfo | None:
        s = self.schedule
        earliest = _std(restriction.earliest) if restriction.earliest is not None else None
        if last_automated_data_interval is not None:
            w = model.next_window(s, _std(last_automated_data_interval.start) + dt.timedelta(
                microseconds=1))
            if earliest is not None and not restriction.catchup:
                now = max(dt.datetime.now(dt.UTC), earliest)
                if w.end <= now:  # skipped windows (paused DAG): resume at the open one
                    w = model.window_at(s, now) or model.next_window(s, now)
        elif earliest is None:
            return None
        elif restriction.catchup:
            w = model.next_window(s, earliest)
        else:
            now = max(dt.datetime.now(dt.UTC), earliest)
            w = model.window_at(s, now) or model.next_window(s, now)
        if restriction.latest is not None and w.start > _std(restriction.latest):
            return None
        return self._info(w)
