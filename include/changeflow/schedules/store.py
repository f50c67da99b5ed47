"""Schedules, their failure state and statistics in a site's state store.

A schedule lives in the state store of its propagation's *source* site (the queue
owner runs the propagation job, as in seed 002). A running window re-reads its row
on every loop, which is how ``alter``/``disable``/``drop`` take effect within a few
seconds while a window runs. Rows are changed only inside transactions, and failure
accounting is a read-modify-write in one transaction, so two writers cannot lose a
failure.
"""

from __future__ import annotations

import builtins
import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from changeflow.errors import ConfigError
from changeflow.schedules import model
from changeflow.state import StateStore, insert_if_absent, utcnow
from changeflow.state.schema_schedules import schedules, undeliverable


def _aware(t: dt.datetime | None) -> dt.datetime | None:
    # SQLite hands back naive datetimes; every stored time is UTC.
    return t.replace(tzinfo=dt.UTC) if t is not None and t.tzinfo is None else t


@dataclass(frozen=True)
class ScheduleRow:
    """A schedule with its failure state, statistics and run information."""

    schedule: model.Schedule
    disabled: bool = False
    disabled_reason: str | None = None
    state: model.FailureState = field(default_factory=model.FailureState)
    stats: model.Stats = field(default_factory=model.Stats)
    last_run: dt.datetime | None = None
    next_run: dt.datetime | None = None
    process: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``user_queue_schedules`` view of this schedule, for JSON and the UI."""
        s, st, f = self.schedule, self.stats, self.state
        return {
            "propagation": s.propagation, "start": s.start, "duration": s.duration,
            "next_time": s.next_time, "latency": s.latency, "summary": s.summary,
            "disabled": self.disabled, "disabled_reason": self.disabled_reason,
            "failures": f.failures, "last_error_msg": f.last_error_msg,
            "last_error_time": f.last_error_time, "next_retry": f.next_retry,
            "total_time": round(st.total_time, 3), "total_number": st.total_number,
            "total_bytes": st.total_bytes, "windows": st.windows,
            "avg_time": round(st.avg_time, 6), "avg_number": round(st.avg_number, 3),
            "avg_size": round(st.avg_size, 3), "max_number": st.max_number,
            "max_bytes": st.max_bytes, "last_run": self.last_run, "next_run": self.next_run,
            "process": self.process,
        }


def _row(r: Any) -> ScheduleRow:
    m = r._mapping
    sched = model.Schedule(m["propagation"], start=_aware(m["start"]),  # type: ignore[arg-type]
                           duration=m["duration"], next_time=m["next_time"],
                           latency=m["latency"])
    state = model.FailureState(
        failures=m["failures"], last_error_msg=m["last_error_msg"],
        last_error_time=_aware(m["last_error_time"]), disabled=m["disabled"],
        next_retry=_aware(m["next_retry"]))
    stats = model.Stats(
        total_time=m["total_time"], total_number=m["total_number"],
        total_bytes=m["total_bytes"], windows=m["windows"], max_number=m["max_number"],
        max_bytes=m["max_bytes"], window_start=_aware(m["window_start"]),
        window_number=m["window_number"], window_bytes=m["window_bytes"])
    return ScheduleRow(sched, m["disabled"], m["disabled_reason"], state, stats,
                       _aware(m["last_run"]), _aware(m["next_run"]), m["process"])


class ScheduleStore:
    """Schedules kept in one state store.

    Args:
        store: the state store of the propagations' source site.
    """

    def __init__(self, store: StateStore):
        self.store = store

    def get(self, name: str, conn: Connection | None = None) -> ScheduleRow | None:
        """A schedule by propagation name, or ``None`` when it has none (dropped)."""
        if conn is None:
            with self.store.read() as c:
                return self.get(name, c)
        r = conn.execute(select(schedules).where(schedules.c.propagation == name)).first()
        return _row(r) if r is not None else None

    def require(self, name: str, conn: Connection | None = None) -> ScheduleRow:
        """Like :meth:`get`, raising when the propagation has no schedule."""
        row = self.get(name, conn)
        if row is None:
            raise ConfigError(f"propagation {name!r} has no schedule")
        return row

    def list(self) -> list[ScheduleRow]:
        """Every schedule, by propagation name."""
        with self.store.read() as c:
            rows = c.execute(select(schedules).order_by(schedules.c.propagation)).all()
        return [_row(r) for r in rows]

    def create(self, s: model.Schedule, *, replace_existing: bool = False) -> bool:
        """Create a schedule (``SCHEDULE_PROPAGATION``). Returns False if one existed.

        With ``replace_existing`` an existing schedule's parameters are replaced
        (its statistics and failures are kept).
        """
        values = {"start": s.start, "duration": s.duration, "next_time": s.next_time,
                  "latency": s.latency, "updated_at": utcnow()}
        with self.store.begin() as c:
            if self.get(s.propagation, c) is not None:
                if replace_existing:
                    c.execute(update(schedules)
                              .where(schedules.c.propagation == s.propagation).values(**values))
                return False
            # another process (a listing, the first window) may create it at the same time
            return insert_if_absent(c, schedules, {
                "propagation": s.propagation, "disabled": False, "failures": 0, **values})

    def alter(self, name: str, **changes: Any) -> ScheduleRow:
        """Change ``start``, ``duration``, ``next_time`` or ``latency`` (validated first)."""
        allowed = {"start", "duration", "next_time", "latency"}
        if unknown := set(changes) - allowed:
            raise ConfigError(f"cannot alter {sorted(unknown)} of a schedule")
        with self.store.begin() as c:
            current = self.require(name, c)
            new = replace(current.schedule, **changes)  # validates
            c.execute(update(schedules).where(schedules.c.propagation == name).values(
                start=new.start, duration=new.duration, next_time=new.next_time,
                latency=new.latency, updated_at=utcnow()))
        return self.require(name)

    def set_disabled(self, name: str, disabled: bool, reason: str | None = None, *,
                     reset_failures: bool = True) -> ScheduleRow:
        """Disable or enable. Enabling also clears the failure count and pending retry.

        Args:
            reset_failures: False keeps the failure state (undoing a change).
        """
        values: dict[str, Any] = {"disabled": disabled, "updated_at": utcnow(),
                                  "disabled_reason": reason if disabled else None}
        if not disabled and reset_failures:
            values.update(failures=0, next_retry=None)
        with self.store.begin() as c:
            self.require(name, c)
            c.execute(update(schedules).where(schedules.c.propagation == name).values(**values))
        return self.require(name)

    def drop(self, name: str) -> bool:
        """Drop a schedule (``UNSCHEDULE_PROPAGATION``). Returns whether one existed."""
        with self.store.begin() as c:
            n = c.execute(delete(schedules).where(schedules.c.propagation == name)).rowcount
        return bool(n)

    def record_success(self, name: str, window_start: dt.datetime, number: int, nbytes: int,
                       seconds: float, at: dt.datetime) -> ScheduleRow:
        """Add one successful pass to the statistics and reset the failure count."""
        with self.store.begin() as c:
            row = self.require(name, c)
            st = model.add_run(row.stats, window_start, number, nbytes, seconds)
            c.execute(update(schedules).where(schedules.c.propagation == name).values(
                failures=0, next_retry=None, last_run=at, updated_at=utcnow(),
                **_stats_values(st)))
        return self.require(name)

    def record_failure(self, name: str, message: str, at: dt.datetime) -> ScheduleRow:
        """Count one failure; the 16th consecutive one disables the schedule."""
        with self.store.begin() as c:
            row = self.require(name, c)
            state = model.on_failure(row.schedule, row.state, message[:4000], at)
            values: dict[str, Any] = {
                "failures": state.failures, "last_error_msg": state.last_error_msg,
                "last_error_time": state.last_error_time, "next_retry": state.next_retry,
                "updated_at": utcnow()}
            if state.disabled and not row.disabled:
                values.update(disabled=True, disabled_reason="failures")
            c.execute(update(schedules).where(schedules.c.propagation == name).values(**values))
        return self.require(name)

    def set_process(self, name: str, process: str | None,
                    next_run: dt.datetime | None = None, *, only_if: str | None = None) -> None:
        """Record which process runs the schedule now (``None`` when no window runs).

        Args:
            only_if: clear or replace the entry only while it still names this process
                (a window never clears the entry of a newer window).
        """
        values: dict[str, Any] = {"updated_at": utcnow()}
        if next_run is not None:
            values["next_run"] = next_run
        with self.store.begin() as c:
            where = schedules.c.propagation == name
            c.execute(update(schedules).where(where).values(**values))
            if only_if is not None:
                where = where & (schedules.c.process == only_if)
            c.execute(update(schedules).where(where).values(process=process))

    def add_undeliverable(self, **values: Any) -> None:
        """Record source batches marked UNDELIVERABLE (moved to the exception queue)."""
        with self.store.begin() as c:
            c.execute(undeliverable.insert().values(created_at=utcnow(), state="UNDELIVERABLE",
                                                    **values))

    def undeliverable(self, name: str) -> builtins.list[dict[str, Any]]:
        """The UNDELIVERABLE records of a propagation, oldest first."""
        with self.store.read() as c:
            rows = c.execute(select(undeliverable).where(undeliverable.c.propagation == name)
                             .order_by(undeliverable.c.id)).all()
        return [dict(r._mapping) for r in rows]


def _stats_values(st: model.Stats) -> dict[str, Any]:
    return {"total_time": st.total_time, "total_number": st.total_number,
            "total_bytes": st.total_bytes, "windows": st.windows, "max_number": st.max_number,
            "max_bytes": st.max_bytes, "window_start": st.window_start,
            "window_number": st.window_number, "window_bytes": st.window_bytes}
