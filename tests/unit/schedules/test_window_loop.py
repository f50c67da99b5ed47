"""The window loop with a fake clock and a fake propagation pass (no Spark, no waits)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from changeflow.config import PipelineConfig, load_config
from changeflow.errors import StateStoreError
from changeflow.propagation import PropagationResult
from changeflow.schedules import model
from changeflow.schedules.window import ensure_schedule, run_window

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)

PIPELINE = """
version: 1
sites:
  s1: {staging_root: st, target_root: tg, state_url: "sqlite:///s.db", database: DB1.X.COM}
queues:
  - {name: a.q1, site: s1}
  - {name: a.q2, site: s1}
propagations:
  - name: p
    source_queue: a.q1
    destination_queue: a.q2
    schedule: {start: "2024-01-01T00:00:00Z", duration: 300, next_time: 3600, latency: 20}
"""


class FakeClock:
    def __init__(self, t: dt.datetime):
        self.t = t
        self.slept: list[float] = []

    def now(self) -> dt.datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += dt.timedelta(seconds=seconds)


class Scripted:
    """Propagation passes that fail, or find ``n`` messages, in a given order."""

    def __init__(self, outcomes: list[object], clock: FakeClock):
        self.outcomes, self.clock, self.calls = list(outcomes), clock, []  # type: ignore[var-annotated]

    def __call__(self, spark, cfg, name, **_kw) -> PropagationResult:  # type: ignore[no-untyped-def]
        self.calls.append(self.clock.now())
        out = self.outcomes.pop(0) if self.outcomes else 0
        if isinstance(out, Exception):
            raise out
        return PropagationResult(name, batches_read=int(bool(out)), messages_read=out,
                                 messages_propagated=out, bytes_propagated=100 * out,
                                 seconds=0.5 if out else 0.0)


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PipelineConfig:
    (tmp_path / "p.yaml").write_text(PIPELINE)
    return load_config(tmp_path / "p.yaml")


def window(cfg: PipelineConfig, clock: FakeClock, fake: Scripted, index: int = 0):  # type: ignore[no-untyped-def]
    s = ensure_schedule(cfg, "p", clock.now()).require("p").schedule
    w = model.window_number(s, index)
    return run_window(None, cfg, "p", start=w.start, end=w.end, clock=clock,  # type: ignore[arg-type]
                      propagate=fake)


def test_window_polls_every_latency_and_ends_at_window_end(cfg: PipelineConfig) -> None:
    clock = FakeClock(T0)
    fake = Scripted([5, 0, 7], clock)
    rep = window(cfg, clock, fake)
    assert rep.ok and rep.stopped == "window end"
    assert clock.now() == T0 + dt.timedelta(minutes=5)
    offsets = [(c - T0).total_seconds() for c in fake.calls]
    assert offsets[:4] == [0, 0, 20, 20]  # found, empty -> wait latency, found, ...
    assert rep.messages == 12
    row = ensure_schedule(cfg, "p", T0).require("p")
    assert (row.stats.total_number, row.stats.total_bytes, row.stats.windows) == (12, 1200, 1)
    assert row.next_run == T0 + dt.timedelta(hours=1) and row.process is None


def test_retries_back_off_exactly_and_defer_to_next_window(cfg: PipelineConfig) -> None:
    clock = FakeClock(T0)
    err = StateStoreError("destination unreachable")
    fake = Scripted([err, err, err, err], clock)
    rep = window(cfg, clock, fake)
    offsets = [(c - T0).total_seconds() for c in fake.calls]
    assert offsets == [0, 30, 90, 210]  # waits of 30, 60, 120; the next (240 s) is past 300
    assert not rep.ok and rep.stopped == "retry deferred to the next window"
    row = ensure_schedule(cfg, "p", T0).require("p")
    assert row.state.failures == 4
    assert row.state.next_retry == T0 + dt.timedelta(hours=1)
    assert row.state.last_error_msg == "StateStoreError: destination unreachable"
    # the next window starts with the deferred retry, which succeeds and resets the count
    clock.t = T0 + dt.timedelta(hours=1)
    rep2 = window(cfg, clock, Scripted([3], clock), index=1)
    assert rep2.ok
    assert ensure_schedule(cfg, "p", T0).require("p").state.failures == 0


def test_sixteenth_consecutive_failure_disables(cfg: PipelineConfig) -> None:
    clock = FakeClock(T0)
    err = OSError("network down")
    fake = Scripted([err] * 40, clock)
    index = 0
    while not (row := ensure_schedule(cfg, "p", T0).require("p")).disabled:
        clock.t = max(clock.t, model.window_number(row.schedule, index).start)
        window(cfg, clock, fake, index)
        index += 1
    assert row.state.failures == 16 and row.disabled_reason == "failures"
    assert len(fake.calls) == 16
    rep = window(cfg, clock, fake, index)
    assert rep.stopped == "disabled" and len(fake.calls) == 16


def test_disable_and_alter_take_effect_inside_a_window(cfg: PipelineConfig) -> None:
    clock = FakeClock(T0)
    store = ensure_schedule(cfg, "p", T0)

    class Altering(Scripted):
        def __call__(self, spark, cfg, name, **kw):  # type: ignore[no-untyped-def]
            if len(self.calls) == 2:
                store.alter("p", duration=120)
            return super().__call__(spark, cfg, name, **kw)

    fake = Altering([], clock)
    rep = window(cfg, clock, fake)
    assert rep.stopped == "window end" and clock.now() == T0 + dt.timedelta(minutes=2)
    store.set_disabled("p", True, "user")
    assert window(cfg, clock, Scripted([], clock)).stopped == "disabled"
