"""One propagation window, run inside one Spark application.

:func:`run_window` keeps propagating until the window ends: whatever is pending is
propagated at once; an empty queue is rechecked every ``latency`` seconds. Every loop
re-reads the schedule row, so ``alter`` (a shorter window, another latency),
``disable`` and ``drop`` take effect within :data:`POLL` seconds while a window runs.

Failures follow seed 002 exactly, with no jitter: the n-th consecutive failure waits
``30 s * 2**(n-1)`` (kept in the store as ``next_retry``); a retry due at or after
the window's end is left to the next window's start; a success resets the count; the
16th consecutive failure disables the schedule and raises an alert. Errors that no
retry can fix mark the messages UNDELIVERABLE (:mod:`.undeliverable`).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow.config import PipelineConfig
from changeflow.errors import ConfigError
from changeflow.pipeline import Pipeline, resolve
from changeflow.schedules import alerts, model
from changeflow.schedules.outages import check_destination
from changeflow.schedules.store import ScheduleRow, ScheduleStore
from changeflow.schedules.undeliverable import (
    disposition,
    mark_undeliverable,
    set_aside_bad_batch,
)
from changeflow.sites import queue_site

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changeflow.propagation import PropagationResult

log = logging.getLogger(__name__)
POLL = 1.0
DEFERRED = "retry deferred to the next window"
IDLE_STOPS = ("disabled", "dropped", DEFERRED)


class Clock:
    """The wall clock; tests pass a fake one."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


@dataclass
class WindowReport:
    """What a window did; ``ok`` is False when it ended on a failure."""

    propagation: str
    start: dt.datetime
    end: dt.datetime
    passes: int = 0
    messages: int = 0
    bytes: int = 0
    undeliverable: int = 0
    errors: list[str] = field(default_factory=list)
    stopped: str = ""
    ok: bool = True
    alerts: list[dict[str, str]] = field(default_factory=list)
    more_pending: bool = False
    late: bool = False

    @property
    def attempted(self) -> bool:
        """Whether this run made any propagation attempt (a pass, or a failed start-up)."""
        return self.passes > 0 or bool(self.errors)

    @property
    def idle(self) -> bool:
        """A run that attempted nothing: disabled, dropped, or waiting for a later retry.

        Such a run is not a failure of its own: the job exits with ``EXIT_IDLE`` and the
        Airflow task ends *skipped*, with the reason in its log and the run's note.
        """
        return not self.attempted and self.stopped in IDLE_STOPS


def schedule_store(cfg: PipelineConfig, name: str) -> ScheduleStore:
    """The schedule store of a propagation: its source site's state store."""
    spec = cfg.component("propagation", name)
    rt, _ = queue_site(cfg, spec.source_queue)
    return ScheduleStore(rt.store)


def ensure_schedule(cfg: PipelineConfig, name: str, now: dt.datetime) -> ScheduleStore:
    """Create the configured (or default) schedule of a propagation if it has none."""
    store = schedule_store(cfg, name)
    if store.get(name) is None:
        sc = cfg.component("propagation", name).schedule
        store.create(model.Schedule(name, start=sc.start or now, duration=sc.duration,
                                    next_time=sc.next_time, latency=sc.latency))
        if not sc.enabled:
            store.set_disabled(name, True, "config")
    return store


def effective_end(row: ScheduleRow, run_end: dt.datetime, now: dt.datetime) -> dt.datetime:
    """The end of this run: the Airflow interval, cut short by an altered schedule."""
    if row.schedule.infinite:
        return run_end
    w = model.window_at(row.schedule, now)
    return min(run_end, w.end) if w is not None else min(run_end, now)


def this_process() -> str:
    """How the ``process`` column names the running window: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def process_alive(process: str | None) -> bool | None:
    """Whether a ``host:pid`` process entry is alive (None when it is on another host).

    >>> process_alive(this_process())
    True
    """
    if not process:
        return False
    host, _, pid = process.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_stale_process(store: ScheduleStore, name: str) -> str | None:
    """Clear the ``process`` entry of a window job that no longer exists (killed, crashed).

    Returns the entry that was cleared, or None.
    """
    row = store.get(name)
    if row is None or not row.process or process_alive(row.process) is not False:
        return None
    store.set_process(name, None, only_if=row.process)
    log.warning("schedule of %s: process %s is gone; stale entry cleared", name, row.process)
    return row.process


def run_window(
    spark: SparkSession, pipeline: PipelineConfig | Pipeline, name: str, *, start: dt.datetime,
    end: dt.datetime, clock: Clock | None = None,
    propagate: Callable[..., PropagationResult] | None = None,
    rule_filter: Callable[[Any], Any] | None = None,
    alive: Callable[[], bool] | None = None,
) -> WindowReport:
    """Run one window ``[start, end)`` of a propagation's schedule.

    A window whose end had passed when it started (a backfilled or late run) drains
    what is pending (pass by pass, up to the pass limits) and stops: re-propagating is
    harmless, the destination's dedup keys drop a range it already holds.

    Only the schedule's own store (the source site) must answer at start-up; an
    unreachable destination is a counted failure with the schedule's backoff and
    alerts, like any failed pass. A configuration the catalog refuses (a queue moved
    without ``changeflow queues relocate``) is refused at start-up (``ConfigError``).

    Args:
        pipeline: the run's resolved pipeline (or a configuration to resolve); every
            pass of the window gets the same one.
        propagate: the pass to run (default :func:`changeflow.propagation.propagate_once`).
        rule_filter: the propagation's rule sets (None: no filter).
        alive: called between passes and while waiting; when it returns False (the
            Airflow task that started the job is gone) the window stops.
    """
    from changeflow.propagation import propagate_once

    clock = clock or Clock()
    propagate = propagate or propagate_once
    pipe = resolve(pipeline)
    cfg = pipe.cfg
    store = ensure_schedule(cfg, name, clock.now())
    clear_stale_process(store, name)
    report = WindowReport(name, start, end, late=clock.now() >= end)
    store.set_process(name, this_process())
    try:
        _start_up(pipe, name, store, report, clock)
        _loop(spark, pipe, name, store, report, clock, propagate, rule_filter,
              alive or (lambda: True))
    finally:
        row = store.get(name)
        nxt = model.next_window(row.schedule, end).start if row else None
        store.set_process(name, None, next_run=nxt, only_if=this_process()) if row else None
    log.info("window of %s ended (%s): %d passes, %d messages", name, report.stopped,
             report.passes, report.messages)
    return report


def _start_up(pipe: Pipeline, name: str, store: ScheduleStore, report: WindowReport,
              clock: Clock) -> None:
    """Check the destination and open every site; an outage is a counted failure.

    The loop then waits for the retry (30 s after the first failure) as after any
    failed pass.

    Raises:
        ConfigError: the configuration is refused (terminal, nothing is counted).
    """
    row = store.get(name)
    if row is None or row.disabled:
        return  # the loop reports it
    if row.state.next_retry is not None and clock.now() < row.state.next_retry:
        return  # a retry is pending: the loop waits for it
    cfg = pipe.cfg
    try:
        check_destination(cfg, name)
        pipe.open()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 (classified below)
        if disposition(exc) not in ("retry", "fail"):
            raise
        _count_failure(cfg, name, store, report, clock, _message(exc))


def _message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _loop(spark: SparkSession, pipe: Pipeline, name: str, store: ScheduleStore,
          report: WindowReport, clock: Clock, propagate: Callable[..., PropagationResult],
          rule_filter: Callable[[Any], Any] | None, alive: Callable[[], bool]) -> None:
    while True:
        if not alive():
            report.stopped = "task gone"
            return
        now = clock.now()
        row = store.get(name)
        if row is None or row.disabled:
            report.stopped = "dropped" if row is None else "disabled"
            return
        end = effective_end(row, report.end, now)
        if report.passes and now >= end and not (report.late and report.more_pending
                                                  and report.ok):
            report.stopped = "window end"
            return
        retry = row.state.next_retry
        if retry is not None and now < retry:
            if retry >= end:
                report.stopped = DEFERRED
                return
            clock.sleep(min(POLL, (retry - now).total_seconds()))
            continue
        found = _attempt(spark, pipe, name, store, report, clock, propagate, rule_filter)
        if not found and report.ok:
            _idle(store, name, report.end, clock, alive)


def _attempt(spark: SparkSession, pipe: Pipeline, name: str, store: ScheduleStore,
             report: WindowReport, clock: Clock, propagate: Callable[..., PropagationResult],
             rule_filter: Callable[[Any], Any] | None) -> bool:
    """One propagation pass. Returns whether it found anything to propagate."""
    cfg = pipe.cfg
    report.passes += 1
    try:
        check_destination(cfg, name)
        res = propagate(spark, pipe, name, rule_filter=rule_filter)
    except Exception as exc:  # noqa: BLE001 (every failure is classified, then handled)
        message = _message(exc)
        what = disposition(exc)
        if what == "busy":
            log.info("propagation %s: %s; waiting", name, message)
            return False
        report.errors.append(message)
        if what == "quality":
            _alert(cfg, report, alerts.Alert("batch_quarantined", name, 0, message, clock.now()))
            return True
        if what == "bad_batch" and set_aside_bad_batch(cfg, name, exc) is not None:
            _alert(cfg, report, alerts.Alert("batch_quarantined", name, 0, message, clock.now()))
            return True
        if what == "undeliverable":
            report.undeliverable += mark_undeliverable(spark, cfg, name, exc, store)
            _alert(cfg, report, alerts.Alert("messages_undeliverable", name, 0, message,
                                             clock.now()))
            return True
        _count_failure(cfg, name, store, report, clock, message)
        return False
    report.ok = True
    report.more_pending = res.more_pending
    report.messages += res.messages_propagated
    report.bytes += res.bytes_propagated
    row = store.require(name)
    if res.batches_read or row.state.failures or row.stats.window_start != report.start:
        store.record_success(name, report.start, res.messages_propagated,
                             res.bytes_propagated, res.seconds, clock.now())
    return bool(res.batches_read or res.more_pending)


def _count_failure(cfg: PipelineConfig, name: str, store: ScheduleStore, report: WindowReport,
                   clock: Clock, message: str) -> None:
    """Count a failure (backoff, auto-disable) and alert."""
    report.ok = False
    if message not in report.errors:
        report.errors.append(message)
    row = store.record_failure(name, message, clock.now())
    _alert(cfg, report, alerts.Alert(alerts.WINDOW_FAILED, name, row.state.failures,
                                     message, clock.now(), row.state.next_retry))
    if row.disabled and row.disabled_reason == "failures":
        log.error("schedule of %s disabled after %d consecutive failures", name,
                  row.state.failures)
        _alert(cfg, report, alerts.Alert(alerts.DISABLED, name, row.state.failures,
                                         message, clock.now()))


def _idle(store: ScheduleStore, name: str, end: dt.datetime, clock: Clock,
          alive: Callable[[], bool]) -> None:
    """Wait ``latency`` seconds (or until the window ends), rereading the schedule."""
    row = store.get(name)
    if row is None:
        return
    until = min(clock.now() + dt.timedelta(seconds=row.schedule.latency), end)
    while (left := (until - clock.now()).total_seconds()) > 0:
        clock.sleep(min(POLL, left))
        fresh = store.get(name)
        if fresh is None or fresh.disabled or fresh.schedule != row.schedule or not alive():
            return


def _alert(cfg: PipelineConfig, report: WindowReport, alert: alerts.Alert) -> None:
    report.alerts.append({"event": alert.event, **alerts.notify(cfg.alerts, alert)})
