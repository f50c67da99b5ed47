"""The propagation schedule model: windows, the failure policy and statistics (pure).

A schedule (seed 001, seed 002) has a ``start``, a ``duration`` (the window length;
``None`` is one infinite window), a ``next_time`` (seconds from one window's start to
the next; ``None`` restarts as soon as a window ends) and a ``latency`` (how long an
empty queue waits before it is rechecked). Nothing here reads a clock: every function
takes the time it reasons about, so tests drive it with fixed datetimes.

Airflow needs bounded runs, so an infinite window is cut into consecutive *segments*
of :data:`INFINITE_SEGMENT`; each segment is one DAG run, and the propagation carries
on across segments exactly as if the window had never ended (failures, statistics and
a pending retry carry over, and a retry is never deferred by a segment boundary).

>>> import datetime as dt
>>> t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
>>> s = Schedule("p", start=t0, duration=300, next_time=3600, latency=20)
>>> s.summary
'window 5 min every 1 h, latency 20 s'
>>> window_at(s, t0 + dt.timedelta(minutes=62))
Window(start=datetime.datetime(2024, 1, 1, 1, 0, tzinfo=datetime.timezone.utc), \
end=datetime.datetime(2024, 1, 1, 1, 5, tzinfo=datetime.timezone.utc), index=1)
>>> [int(retry_delay(n).total_seconds()) for n in range(1, 6)]
[30, 60, 120, 240, 480]
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace

from changeflow.errors import ConfigError

DEFAULT_LATENCY = 3.0
INFINITE_SEGMENT = dt.timedelta(hours=1)
FIRST_RETRY = dt.timedelta(seconds=30)
MAX_FAILURES = 16


def _fmt(seconds: float) -> str:
    """A short human duration: ``20 s``, ``5 min``, ``1 h``, ``2 d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{seconds:g} s"


@dataclass(frozen=True)
class Schedule:
    """A propagation schedule (``DBMS_AQADM.SCHEDULE_PROPAGATION``'s parameters).

    Attributes:
        propagation: the propagation it schedules.
        start: the first window's start (timezone-aware).
        duration: window length in seconds; ``None`` means one infinite window.
        next_time: seconds from one window's start to the next; ``None`` means the
            next window starts as soon as the previous one ends.
        latency: seconds an empty queue waits before it is checked again.
        disabled: whether the schedule is disabled (its DAG paused).
    """

    propagation: str
    start: dt.datetime
    duration: float | None = None
    next_time: float | None = None
    latency: float = DEFAULT_LATENCY

    def __post_init__(self) -> None:
        key = f"schedule of {self.propagation}"
        if self.start.tzinfo is None:
            raise ConfigError("start must be timezone-aware", key=key)
        if self.duration is not None and self.duration <= 0:
            raise ConfigError(f"duration must be > 0, got {self.duration}", key=key)
        if self.next_time is not None and self.next_time <= 0:
            raise ConfigError(f"next_time must be > 0, got {self.next_time}", key=key)
        if self.duration and self.next_time and self.next_time < self.duration:
            raise ConfigError(
                f"next_time ({self.next_time} s) is shorter than duration ({self.duration} s): "
                "windows would overlap", key=key)
        if self.latency < 0:
            raise ConfigError(f"latency must be >= 0, got {self.latency}", key=key)

    @property
    def infinite(self) -> bool:
        """Whether the window never ends (``duration`` NULL)."""
        return self.duration is None

    @property
    def length(self) -> dt.timedelta:
        """The length of one Airflow run: the window, or a segment of an infinite one."""
        return dt.timedelta(seconds=self.duration) if self.duration else INFINITE_SEGMENT

    @property
    def period(self) -> dt.timedelta:
        """From one run's start to the next."""
        if self.duration and self.next_time:
            return dt.timedelta(seconds=self.next_time)
        return self.length

    @property
    def summary(self) -> str:
        """What the Airflow UI shows, e.g. ``window 5 min every 1 h, latency 20 s``."""
        if self.duration is None:
            return f"infinite window (runs of {_fmt(INFINITE_SEGMENT.total_seconds())}), " \
                   f"latency {_fmt(self.latency)}"
        every = f"every {_fmt(self.next_time)}" if self.next_time else "back to back"
        return f"window {_fmt(self.duration)} {every}, latency {_fmt(self.latency)}"


@dataclass(frozen=True)
class Window:
    """One propagation window (or segment of an infinite window): ``[start, end)``."""

    start: dt.datetime
    end: dt.datetime
    index: int


def window_number(s: Schedule, index: int) -> Window:
    """The ``index``-th window (0 is the one starting at ``s.start``)."""
    start = s.start + index * s.period
    return Window(start, start + s.length, index)


def window_at(s: Schedule, t: dt.datetime) -> Window | None:
    """The window open at ``t``, or ``None`` between windows and before the start."""
    if t < s.start:
        return None
    w = window_number(s, math.floor((t - s.start).total_seconds() / s.period.total_seconds()))
    return w if t < w.end else None


def next_window(s: Schedule, t: dt.datetime) -> Window:
    """The first window starting at or after ``t``."""
    if t <= s.start:
        return window_number(s, 0)
    return window_number(s, math.ceil((t - s.start).total_seconds() / s.period.total_seconds()))


def windows_between(s: Schedule, start: dt.datetime, end: dt.datetime) -> list[Window]:
    """Every window starting in ``[start, end)`` (what a backfill of that range runs)."""
    out: list[Window] = []
    w = next_window(s, start)
    while w.start < end:
        out.append(w)
        w = window_number(s, w.index + 1)
    return out


def retry_delay(failures: int) -> dt.timedelta:
    """The wait after the ``failures``-th consecutive failure: 30 s, 60 s, 120 s, ...

    Raises:
        ValueError: ``failures`` is below 1.
    """
    if failures < 1:
        raise ValueError(f"retry_delay needs at least one failure, got {failures}")
    return FIRST_RETRY * (2 ** (failures - 1))


def next_attempt(s: Schedule, failures: int, failed_at: dt.datetime) -> dt.datetime:
    """When to retry after a failure: the backoff, or the next window's start.

    A retry that would fall at or after the end of the window open at ``failed_at``
    waits for the next window's start (seed 002). An infinite window never ends, so
    its segments never defer a retry.
    """
    at = failed_at + retry_delay(failures)
    if s.infinite:
        return at
    current = window_at(s, failed_at)
    if current is not None and at < current.end:
        return at
    if current is None:  # failed between windows: the first window time at or after the backoff
        return at if window_at(s, at) is not None else next_window(s, at).start
    return next_window(s, current.end).start


@dataclass(frozen=True)
class FailureState:
    """Consecutive failures of a schedule and the last error (``user_queue_schedules``)."""

    failures: int = 0
    last_error_msg: str | None = None
    last_error_time: dt.datetime | None = None
    disabled: bool = False
    next_retry: dt.datetime | None = None


def on_failure(s: Schedule, state: FailureState, message: str, at: dt.datetime) -> FailureState:
    """The state after one more failure; the 16th consecutive failure disables."""
    failures = state.failures + 1
    disabled = state.disabled or failures >= MAX_FAILURES
    return FailureState(
        failures=failures, last_error_msg=message, last_error_time=at, disabled=disabled,
        next_retry=None if disabled else next_attempt(s, failures, at),
    )


def on_success(state: FailureState) -> FailureState:
    """Any success resets the failure count (the last error stays visible)."""
    return replace(state, failures=0, next_retry=None)


@dataclass(frozen=True)
class Stats:
    """Running statistics of a schedule (seed 002's ``user_queue_schedules`` figures).

    ``avg_time`` is seconds per propagated message, ``avg_number`` messages per
    window, ``avg_size`` bytes per message; ``max_number``/``max_bytes`` are the
    largest window so far. ``window_start`` identifies the window that
    ``window_number``/``window_bytes`` accumulate.
    """

    total_time: float = 0.0
    total_number: int = 0
    total_bytes: int = 0
    windows: int = 0
    max_number: int = 0
    max_bytes: int = 0
    window_start: dt.datetime | None = None
    window_number: int = 0
    window_bytes: int = 0

    @property
    def avg_time(self) -> float:
        return self.total_time / self.total_number if self.total_number else 0.0

    @property
    def avg_number(self) -> float:
        return self.total_number / self.windows if self.windows else 0.0

    @property
    def avg_size(self) -> float:
        return self.total_bytes / self.total_number if self.total_number else 0.0


def add_run(st: Stats, window_start: dt.datetime, number: int, nbytes: int,
            seconds: float) -> Stats:
    """Statistics after one propagation pass inside the window starting at ``window_start``."""
    new_window = st.window_start != window_start
    w_number = (0 if new_window else st.window_number) + number
    w_bytes = (0 if new_window else st.window_bytes) + nbytes
    return Stats(
        total_time=st.total_time + seconds,
        total_number=st.total_number + number,
        total_bytes=st.total_bytes + nbytes,
        windows=st.windows + (1 if new_window else 0),
        max_number=max(st.max_number, w_number),
        max_bytes=max(st.max_bytes, w_bytes),
        window_start=window_start,
        window_number=w_number,
        window_bytes=w_bytes,
    )
