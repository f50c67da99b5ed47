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
from changeflow.schedules import alerts, model
from changeflow.schedules.store import ScheduleRow, ScheduleStore
from changeflow.schedules.undeliverable import (
    disposition,
    mark_undeliverable,
    set_aside_bad_batch,
)
from changeflow.sites import open_pipeline, queue_site

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changeflow.propagation import PropagationResult

log = logging.getLogger(__name__)
POLL = 1.0


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


def run_window(
    spark: SparkSession, cfg: PipelineConfig, name: str, *, start: dt.datetime,
    end: dt.datetime, clock: Clock | None = None,
    propagate: Callable[..., PropagationResult] | None = None,
    rule_filter: Callable[[Any], Any] | None = None,
) -> WindowReport:
    """Run one window ``[start, end)`` of a propagation's schedule.

    A window whose end has passed (a backfilled or late run) makes one pass and
    stops: re-propagating is harmless, the destination's dedup keys drop a range it
    already holds.

    Args:
        propagate: the pass to run (default :func:`changeflow.propagation.propagate_once`).
    """
    from changeflow.propagation import propagate_once

    clock = clock or Clock()
    propagate = propagate or propagate_once
    open_pipeline(cfg)
    store = ensure_schedule(cfg, name, clock.now())
    report = WindowReport(name, start, end)
    store.set_process(name, f"{socket.gethostname()}:{os.getpid()}")
    try:
        _loop(spark, cfg, name, store, report, clock, propagate, rule_filter)
    finally:
        row = store.get(name)
        nxt = model.next_window(row.schedule, end).start if row else None
        store.set_process(name, None, next_run=nxt) if row else None
    log.info("window of %s ended (%s): %d passes, %d messages", name, report.stopped,
             report.passes, report.messages)
    return report


def _loop(spark: SparkSession, cfg: PipelineConfig, name: str, store: ScheduleStore,
          report: WindowReport, clock: Clock, propagate: Callable[..., PropagationResult],
          rule_filter: Callable[[Any], Any] | None) -> None:
    while True:
        now = clock.now()
        row = store.get(name)
        if row is None or row.disabled:
            report.stopped = "dropped" if row is None else "disabled"
            return
        end = effective_end(row, report.end, now)
        if report.passes and now >= end:
            report.stopped = "window end"
            return
        retry = row.state.next_retry
        if retry is not None and now < retry:
            if retry >= end:
                report.stopped, report.ok = "retry deferred to the next window", False
                return
            clock.sleep(min(POLL, (retry - now).total_seconds()))
            continue
        found = _attempt(spark, cfg, name, store, report, clock, propagate, rule_filter)
        if not found and report.ok:
            _idle(store, name, report.end, clock)


def _attempt(spark: SparkSession, cfg: PipelineConfig, name: str, store: ScheduleStore,
             report: WindowReport, clock: Clock, propagate: Callable[..., PropagationResult],
             rule_filter: Callable[[Any], Any] | None) -> bool:
    """One propagation pass. Returns whether it found anything to propagate."""
    report.passes += 1
    try:
        res = propagate(spark, cfg, name, rule_filter=rule_filter)
    except Exception as exc:  # noqa: BLE001 (every failure is classified, then handled)
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
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
        report.ok = False
        row = store.record_failure(name, message, clock.now())
        _alert(cfg, report, alerts.Alert(alerts.WINDOW_FAILED, name, row.state.failures,
                                         message, clock.now(), row.state.next_retry))
        if row.disabled and row.disabled_reason == "failures":
            log.error("schedule of %s disabled after %d consecutive failures", name,
                      row.state.failures)
            _alert(cfg, report, alerts.Alert(alerts.DISABLED, name, row.state.failures,
                                             message, clock.now()))
        return False
    report.ok = True
    report.messages += res.messages_propagated
    report.bytes += res.bytes_propagated
    row = store.require(name)
    if res.batches_read or row.state.failures or row.stats.window_start != report.start:
        store.record_success(name, report.start, res.messages_propagated,
                             res.bytes_propagated, res.seconds, clock.now())
    return bool(res.batches_read or res.more_pending)


def _idle(store: ScheduleStore, name: str, end: dt.datetime, clock: Clock) -> None:
    """Wait ``latency`` seconds (or until the window ends), rereading the schedule."""
    row = store.get(name)
    if row is None:
        return
    until = min(clock.now() + dt.timedelta(seconds=row.schedule.latency), end)
    while (left := (until - clock.now()).total_seconds()) > 0:
        clock.sleep(min(POLL, left))
        fresh = store.get(name)
        if fresh is None or fresh.disabled or fresh.schedule != row.schedule:
            return


def _alert(cfg: PipelineConfig, report: WindowReport, alert: alerts.Alert) -> None:
    report.alerts.append({"event": alert.event, **alerts.notify(cfg.alerts, alert)})
