"""Structured job logs: JSON lines with the component, run id, batch, counts and seconds.

Every run of a capture, propagation or apply emits its *run events* (``start``,
``progress``, ``end``, ``error``) as log records of the ``changeflow.events`` logger
(:func:`event`), never on standard output, where they would mix with a command's or a
benchmark's own output. Where they go is the ``CHANGEFLOW_EVENTS`` setting
(:func:`events_logger`): JSON lines on standard error (``stderr``, the default), JSON
lines appended to a file (a path), or nowhere (``off``). A program that configures the
``changeflow.events`` logger itself (handlers of its own) keeps its configuration. With
``CHANGEFLOW_LOG_FORMAT=json`` every other log record of the job is a JSON line too,
carrying the same run context (:func:`use_json_logs`).

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
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_CONTEXT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "changeflow_run", default=None)
#: the logger of run events
EVENTS_LOGGER = "changeflow.events"
RUN_LOGGER = EVENTS_LOGGER
#: where run events go: ``stderr`` (default), ``off``, or a file path
EVENTS_ENV = "CHANGEFLOW_EVENTS"
_SETUP = threading.Lock()


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


def events_destination() -> str:
    """Where run events go: ``stderr``, ``off``, or a file path (``CHANGEFLOW_EVENTS``)."""
    value = os.environ.get(EVENTS_ENV, "").strip()
    if not value or value.lower() in ("stderr", "-"):
        return "stderr"
    if value.lower() in ("off", "none", "0", "false"):
        return "off"
    return str(Path(value).expanduser())


def _handler(dest: str) -> logging.Handler:
    """The handler of a destination: JSON lines on stderr, into a file, or none."""
    if dest == "off":
        handler: logging.Handler = logging.NullHandler()
    elif dest == "stderr":
        handler = _StderrHandler()
    else:
        try:
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(dest, mode="a", encoding="utf-8")
        except OSError as exc:  # events never fail a run: say so once, and use stderr
            logging.getLogger(__name__).warning(
                "run events: cannot write %s (%s=%s): %s; using standard error",
                dest, EVENTS_ENV, os.environ.get(EVENTS_ENV), exc)
            handler = _StderrHandler()
    handler.setFormatter(JsonFormatter())
    handler._changeflow = dest  # type: ignore[attr-defined]
    return handler


def events_logger() -> logging.Logger:
    """The ``changeflow.events`` logger, with the handler ``CHANGEFLOW_EVENTS`` asks for.

    Set up on first use, and again when ``CHANGEFLOW_EVENTS`` has changed since. The
    logger does not propagate to the root logger (a command's or Airflow's handlers),
    so an event is written once, where the setting says. Handlers someone else added
    to the logger are left alone, and then none is added.
    """
    log = logging.getLogger(EVENTS_LOGGER)
    ours = [h for h in log.handlers if getattr(h, "_changeflow", None) is not None]
    if log.handlers and not ours:  # configured by the program (logging.config, ...)
        return log
    dest = events_destination()
    if ours and all(h._changeflow == dest for h in ours):  # type: ignore[attr-defined]
        return log
    with _SETUP:
        for h in [h for h in log.handlers if getattr(h, "_changeflow", None) is not None]:
            log.removeHandler(h)
            h.close()
        log.addHandler(_handler(dest))
        if log.level == logging.NOTSET:
            log.setLevel(logging.INFO)
        log.propagate = False
    return log


#: the name :func:`events_logger` had before run events were routed by CHANGEFLOW_EVENTS
run_logger = events_logger


def event(what: str, /, **fields: Any) -> None:
    """Emit one run event (``start``, ``progress``, ``end``, ``error``) as a log record."""
    events_logger().info(what, extra={"fields": {"event": what, **fields}})


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
