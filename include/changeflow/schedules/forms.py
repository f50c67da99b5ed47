"""Schedule changes from a form: the changeflow page's alter and backfill (no HTTP here).

The HTTP side is :mod:`changeflow.airflow.ui.app`; what the page shows of schedules is
:mod:`changeflow.views.schedules`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from changeflow.config import PipelineConfig
from changeflow.errors import ConfigError


def _seconds(value: Any, what: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} must be a number of seconds, got {value!r}") from exc
    return v


def alter(cfg: PipelineConfig, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Alter a schedule's window and latency from a form (``duration``, ``next_time``,
    ``latency`` in seconds; ``infinite`` true sets duration NULL)."""
    from changeflow.schedules.window import ensure_schedule

    cfg.component("propagation", name)
    changes: dict[str, Any] = {}
    for key in ("duration", "next_time", "latency"):
        if key in body:
            changes[key] = _seconds(body[key], key)
    if body.get("infinite"):
        changes["duration"] = None
    if "latency" in changes and changes["latency"] is None:
        raise ConfigError("latency cannot be empty")
    store = ensure_schedule(cfg, name, dt.datetime.now(dt.UTC))
    return store.alter(name, **changes).as_dict()


def parse_time(value: Any, what: str) -> dt.datetime:
    """An ISO time from a form, UTC when no zone is given.

    >>> parse_time("2024-03-01T00:00", "from").isoformat()
    '2024-03-01T00:00:00+00:00'
    """
    if not value:
        raise ConfigError(f"{what} is required (ISO time, e.g. 2024-03-01T00:00Z)")
    try:
        t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"{what}: not an ISO time: {value!r}") from exc
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)
