"""Structured job logs: JSON lines with the component, run id, batch, counts and seconds.

Every run of a capture, propagation or apply writes its *run events* (``start``,
``progress``, ``end``, ``error``) as JSON lines on standard error, through the
``changeflow.run`` logger (:func:`event`). With ``CHANGEFLOW_LOG_FORMAT=json`` every
other log record of the job is a JSON line too, carrying the same run context
(:func:`use_json_logs`).

>>> import io, json, logging
>>> buf = io.StringIO()
>>> h = logging.StreamHandler(buf); h.setFormatter(JsonFormatter())
>>> log = logging.getLogger("doctest.obs"); log.addHandler(h); log.propagate = False
>>> with context(component="capture:c1", run_id="r1"):
...     log.warning("captured", extra={"fields": {"messages": 3}})
>>> rec = json.loads(buf.getvalue()); (rec["component"], rec["run_id"], rec["messages"])
('capture:c1', 'r1', 3)
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_CONTEXT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "changeflow_run", default=None)
RUN_LOGGER = "changeflow.run"


@contextmanager
def context(**fields: Any) -> Iterator[None]:
    """Add fields (component, run id, ...) to every structured record inside the block."""
    token = _CONTEXT.set({**(_CONTEXT.get() or {}), **fields})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current() -> dict[str, Any]:
    """The run context of the calling code."""
    return dict(_CONTEXT.get() or {})


def _plain(v: Any) -> Any:
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    return v if isinstance(v, str | int | float | bool | type(None)) else str(v)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, run context, fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage(), **current(),
        }
        for k, v in (getattr(record, "fields", None) or {}).items():
            out[k] = _plain(v) if not isinstance(v, dict | list) else v
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(out, default=str)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def run_logger() -> logging.Logger:
    """The ``changeflow.run`` logger, writing JSON lines to standard error (set up once)."""
    log = logging.getLogger(RUN_LOGGER)
    if not any(getattr(h, "_changeflow", False) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(JsonFormatter())
        handler._changeflow = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def event(what: str, /, **fields: Any) -> None:
    """Write one run event (``start``, ``progress``, ``end``, ``error``) as a JSON line."""
    run_logger().info(what, extra={"fields": {"event": what, **fields}})


def use_json_logs(force: bool = False) -> bool:
    """Switch the root logger's handlers to JSON lines when ``CHANGEFLOW_LOG_FORMAT=json``."""
    if not force and os.environ.get("CHANGEFLOW_LOG_FORMAT", "").lower() != "json":
        return False
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO)
    for h in root.handlers:
        h.setFormatter(JsonFormatter())
    return True
