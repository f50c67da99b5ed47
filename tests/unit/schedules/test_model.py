"""The schedule model: windows, backoff, deferral, auto-disable, statistics (pure)."""

from __future__ import annotations

import datetime as dt

import pytest

from changeflow.errors import ConfigError
from changeflow.schedules import model
from changeflow.schedules.model import FailureState, Schedule, Window

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def test_default_schedule_is_seed_001() -> None:
    s = Schedule("p", start=T0)
    assert (s.duration, s.next_time, s.latency) == (None, None, 3.0)
    assert s.infinite
    assert s.summary == "infinite window (runs of 1 h), latency 3 s"


def test_summary_of_seed_002_example() -> None:
    assert Schedule("p", start=T0, duration=300, next_time=3600, latency=20).summary == \
        "window 5 min every 1 h, latency 20 s"
    assert Schedule("p", start=T0, duration=600, latency=0).summary == \
        "window 10 min back to back, latency 0 s"


def test_window_boundaries_periodic() -> None:
    s = Schedule("p", start=T0, duration=300, next_time=3600)
    assert model.window_at(s, at(-1)) is None
    assert model.window_at(s, at(0)) == Window(at(0), at(5), 0)
    assert model.window_at(s, at(4.99)) == Window(at(0), at(5), 0)
    assert model.window_at(s, at(5)) is None  # the end is exclusive
    assert model.window_at(s, at(59)) is None
    assert model.window_at(s, at(60)) == Window(at(60), at(65), 1)
    assert model.next_window(s, at(5)) == Window(at(60), at(65), 1)
    assert model.next_window(s, at(60)) == Window(at(60), at(65), 1)
    assert [w.start for w in model.windows_between(s, at(0), at(180))] == [at(0), at(60), at(120)]


def test_back_to_back_and_infinite_windows() -> None:
    s = Schedule("p", start=T0, duration=600)
    assert model.window_at(s, at(10)) == Window(at(10), at(20), 1)
    inf = Schedule("p", start=T0)
    assert model.window_at(inf, at(90)) == Window(at(60), at(120), 1)  # one-hour segments


def test_invalid_schedules() -> None:
    with pytest.raises(ConfigError, match="overlap"):
        Schedule("p", start=T0, duration=600, next_time=60)
    with pytest.raises(ConfigError, match="latency"):
        Schedule("p", start=T0, latency=-1)
    with pytest.raises(ConfigError, match="timezone"):
        Schedule("p", start=dt.datetime(2024, 1, 1))


def test_retry_delays_sequence() -> None:
    delays = [model.retry_delay(n).total_seconds() for n in range(1, 17)]
    assert delays[:5] == [30, 60, 120, 240, 480]
    assert delays == [30 * 2 ** i for i in range(16)]
    with pytest.raises(ValueError):
        model.retry_delay(0)


def test_retry_inside_window_and_deferred_to_next_window() -> None:
    s = Schedule("p", start=T0, duration=300, next_time=3600)
    assert model.next_attempt(s, 1, at(1)) == at(1.5)
    assert model.next_attempt(s, 3, at(2)) == at(4)  # 120 s, still inside [0, 5)
    assert model.next_attempt(s, 3, at(3)) == at(60)  # would be at 5 min: next window
    assert model.next_attempt(s, 1, at(4.9)) == at(60)
    inf = Schedule("p", start=T0)
    assert model.next_attempt(inf, 4, at(59)) == at(63)  # segments never defer


def test_disable_at_16th_consecutive_failure_across_windows() -> None:
    s = Schedule("p", start=T0, duration=300, next_time=3600)
    st = FailureState()
    for n in range(1, 16):
        st = model.on_failure(s, st, f"boom {n}", at(60 * n))  # one failure per window
        assert (st.failures, st.disabled) == (n, False)
        assert st.next_retry is not None
    st = model.on_failure(s, st, "boom 16", at(60 * 16))
    assert (st.failures, st.disabled, st.next_retry) == (16, True, None)
    assert (st.last_error_msg, st.last_error_time) == ("boom 16", at(960))


def test_success_resets_failures() -> None:
    s = Schedule("p", start=T0)
    st = FailureState()
    for n in range(15):
        st = model.on_failure(s, st, "boom", at(n))
    st = model.on_success(st)
    assert (st.failures, st.next_retry, st.last_error_msg) == (0, None, "boom")
    st = model.on_failure(s, st, "again", at(20))
    assert (st.failures, st.disabled) == (1, False)


def test_statistics_after_known_runs() -> None:
    st = model.Stats()
    st = model.add_run(st, at(0), 10, 1000, 2.0)
    st = model.add_run(st, at(0), 30, 3000, 2.0)   # same window: 40 msgs, 4000 bytes
    st = model.add_run(st, at(60), 20, 1000, 1.0)  # second window
    assert (st.total_number, st.total_bytes, st.total_time, st.windows) == (60, 5000, 5.0, 2)
    assert (st.max_number, st.max_bytes) == (40, 4000)
    assert st.avg_number == 30
    assert st.avg_size == pytest.approx(5000 / 60)
    assert st.avg_time == pytest.approx(5.0 / 60)
