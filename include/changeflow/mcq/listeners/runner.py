"""Running a listener: the seed's Push_Queue loop (Figure 4), once or continuously.

:func:`drain` gets the listener's changes until the end-of-queue record, handing each
to the handler and acknowledging it (a *batch* run: a daily listener's Airflow task).
:func:`poll` drains, sleeps ``frequency`` seconds when the queue is empty, and drains
again, for a given time or until stopped (a *real-time* listener: ``changeflow mcq
listen``, or the task of a sub-minute listener's DAG).

A change the handler fails on is put back with a hold that doubles with its
``retry_count`` (``base_backoff`` up to ``max_backoff``), and the run goes on: a
problem record cycles slowly instead of blocking the queue, and ``changeflow mcq
status`` shows its retries. A transient failure (the target is unreachable) puts the
change back and ends the run with that error: the rest waits in the queue
(:func:`ends_run` tells the two apart).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow.mcq.model import ChangeRec

if TYPE_CHECKING:
    from changeflow.config import PipelineConfig
    from changeflow.mcq.config import McqListener
    from changeflow.mcq.consume import Worker
    from changeflow.mcq.listeners.handlers import Handler

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What a listener run did."""

    listener: str
    processed: int = 0
    put_back: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ended: str = "empty"  # empty | time | limit | unavailable | stopped

    def as_dict(self) -> dict[str, Any]:
        """For JSON output."""
        return {"listener": self.listener, "processed": self.processed,
                "put_back": self.put_back, "errors": self.errors[-20:],
                "seconds": round(self.seconds, 3), "ended": self.ended}


def backoff(retry_count: int, base: float = 30.0, limit: float = 3600.0) -> float:
    """The hold of a put-back change: doubles with each retry, up to ``limit``.

    >>> [backoff(n) for n in (0, 1, 2, 10)]
    [30.0, 60.0, 120.0, 3600.0]
    """
    return min(limit, base * 2 ** min(retry_count, 30))


_UNREACHABLE = ("ConnectionError", "OperationalError", "InterfaceError", "TimeoutError")


def ends_run(exc: BaseException) -> bool:
    """Whether a handler's error means its system is unreachable (end the run), rather
    than that this one change failed (put it back, go on).

    Unlike :func:`changeflow.errors.is_transient`, an unknown error is the change's: a
    handler bug on one record must not stop every run at that record.

    >>> ends_run(ConnectionRefusedError()), ends_run(ValueError("bad phone"))
    (True, False)
    """
    from changeflow.errors import ChangeflowError

    if isinstance(exc, ChangeflowError):
        return exc.transient
    names = {k.__name__ for k in type(exc).__mro__}
    return bool(names & set(_UNREACHABLE))


def _fail(worker: Worker, rec: ChangeRec, exc: Exception, result: RunResult,
          base: float, limit: float) -> bool:
    """Put a failed change back. Returns True when the run must end (unreachable)."""
    transient = ends_run(exc)
    hold = min(base, 30.0) if transient else backoff(rec.retry_count, base, limit)
    worker.put_back(rec, delay=hold)
    result.put_back += 1
    msg = (f"entry {rec.entry_number} ({rec.tname}/{rec.subtype or '-'}, retry "
           f"{rec.retry_count + 1}): {type(exc).__name__}: {exc}")
    result.errors.append(msg)
    log.error("listener %s: %s; held %.0f s", worker.listener, msg, hold)
    return transient


def drain(worker: Worker, handler: Handler, *, tname: str | None = None,
          max_entries: int | None = None, deadline: float | None = None,
          base_backoff: float = 30.0, max_backoff: float = 3600.0,
          result: RunResult | None = None) -> RunResult:
    """Process the listener's changes until the queue is empty (or a limit is reached).

    Raises:
        Exception: the transient error that ended the run (after putting its change back).
    """
    result = result or RunResult(worker.listener)
    start = time.monotonic()
    try:
        while True:
            if max_entries is not None and result.processed + result.put_back >= max_entries:
                result.ended = "limit"
                break
            if deadline is not None and time.monotonic() >= deadline:
                result.ended = "time"
                break
            rec = worker.get_changes(tname)
            if rec.is_end:
                result.ended = "empty"
                break
            try:
                handler.handle(rec)
            except Exception as exc:  # noqa: BLE001 (each change's failure is handled)
                if _fail(worker, rec, exc, result, base_backoff, max_backoff):
                    result.ended = "unavailable"
                    raise
                continue
            worker.ack_change(rec)
            result.processed += 1
    finally:
        result.seconds += time.monotonic() - start
    return result


def poll(worker: Worker, handler: Handler, *, frequency: float, duration: float | None = None,
         stop: threading.Event | None = None, **kw: Any) -> RunResult:
    """Drain, sleep ``frequency`` seconds when empty, repeat, for ``duration`` seconds (None:
    until ``stop`` is set). A transient failure waits ``frequency`` and tries again."""
    result = RunResult(worker.listener)
    stop = stop or threading.Event()
    end = None if duration is None else time.monotonic() + duration
    while not stop.is_set():
        try:
            drain(worker, handler, deadline=end, result=result, **kw)
        except Exception as exc:  # noqa: BLE001 (keep polling: the target may come back)
            if not ends_run(exc):
                raise
            log.warning("listener %s: %s; polling again in %.0f s", worker.listener, exc,
                        frequency)
        if end is not None and time.monotonic() >= end:
            result.ended = "time"
            break
        wait = frequency if end is None else min(frequency, max(0.0, end - time.monotonic()))
        if stop.wait(wait):
            result.ended = "stopped"
    return result


def run_listener(cfg: PipelineConfig, name: str, *, duration: float | None = None,
                 once: bool | None = None, max_entries: int | None = None,
                 stop: threading.Event | None = None) -> RunResult:
    """Run a configured listener with its handler: drained once (batch listeners, or
    ``once``), or polled for ``duration`` seconds (real-time listeners; None: forever).

    Raises:
        ConfigError: no such listener, or it has no handler.
        Exception: the transient error that ended a batch run.
    """
    from changeflow.errors import ConfigError
    from changeflow.mcq.config import seconds
    from changeflow.mcq.store import open_mcq, section

    m = section(cfg)
    try:
        spec = m.listener(name)
    except KeyError:
        raise ConfigError(f"no listener {name!r} under mcq.listeners",
                          file=cfg.source_path) from None
    mcq = open_mcq(cfg)
    worker = mcq.worker(name)
    handler = build_handler(cfg, spec)
    limit = seconds(spec.max_backoff)
    try:
        if once if once is not None else spec.runs_as == "batch":
            result = drain(worker, handler, max_entries=max_entries, max_backoff=limit)
        else:
            result = poll(worker, handler, frequency=spec.seconds, duration=duration,
                          stop=stop, max_backoff=limit)
    finally:
        handler.close()
    if worker.marker is not None:  # a completed run, as the seed's Mark_Proc after the loop
        worker.marker.mark(force=True)
    log.info("listener %s: %d processed, %d put back in %.1f s (%s)", name, result.processed,
             result.put_back, result.seconds, result.ended)
    return result


def build_handler(cfg: PipelineConfig, listener: McqListener) -> Handler:
    """The handler a listener's configuration describes.

    Raises:
        ConfigError: the listener has no handler, or a source cannot be resolved.
    """
    from changeflow.errors import ConfigError
    from changeflow.mcq.listeners.handlers import PythonHandler
    from changeflow.mcq.store import resolve_path, source_url

    h = listener.handler
    if h is None:
        raise ConfigError(f"listener {listener.proc_name!r} has no handler (it is run by "
                          "its own program through get_changes/ack_change)",
                          file=cfg.source_path, key="mcq.listeners")
    if h.type == "xml":
        from changeflow.mcq.listeners.xml import XmlFeed

        return XmlFeed(listener.proc_name,
                       directory=resolve_path(cfg, h.directory) if h.directory else None,
                       url=h.url, source_url=source_url(cfg, h.source) if h.source else None,
                       queries=dict(h.queries))
    if h.type == "pg_import":
        from changeflow.mcq.listeners.pg_import import PgImport

        return PgImport(source_url(cfg, h.source), source_url(cfg, h.target), h.import_table,
                        dict(h.queries), key_columns=dict(h.key_columns),
                        on_missing=h.on_missing)
    return PythonHandler(h.callable)
