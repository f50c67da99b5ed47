"""The window job: ``jobs/propagation_window.py`` parses its arguments and calls :func:`main`.

Exit codes (the Airflow task maps them, see :mod:`changeflow.airflow.operators`):

* 0: the window ran (``EXIT_OK``);
* 1: the window made attempts and ended on a failure it counted itself (backoff, alerts
  and auto-disable are the schedule's): the run is red, Airflow does not retry it;
* 65/75: a terminal/transient error before the schedule could count anything (its own
  state store unreachable, a refused configuration): Airflow's retry policy decides;
* :data:`EXIT_IDLE` (99): nothing attempted, by design (schedule disabled or dropped,
  or a retry due in a later window): the task ends *skipped*, not failed.
* :data:`EXIT_GONE` (143): ended before its end, by SIGTERM or because its task is gone
  (below); a task still there sees a plain failure, and Airflow's retry policy decides.

A window job never outlives the task that started it: ``--watch HOST:PID`` names the
task's process, and the loop stops (cleanly, clearing its ``process`` entry) as soon as
that process or the job's own parent (spark-submit) is gone. The loop can only look
between passes, so a watcher thread covers the rest (:func:`stop_when_gone`): a job
still starting its Spark session, or in a pass that runs on, is ended
:data:`GRACE` seconds after its task went (exit :data:`EXIT_GONE`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType

from changeflow.errors import EXIT_FAILED, EXIT_OK, exit_code, is_transient

log = logging.getLogger("changeflow.job")
EXIT_IDLE = 99
EXIT_GONE = 128 + signal.SIGTERM  # ended by the watcher (or a SIGTERM): the task is gone
GRACE = 10.0  # seconds a pass in flight gets to end on its own once the task is gone


class TaskGone(BaseException):
    """The job was told to stop (its task is gone, or SIGTERM): raised in the main thread.

    A ``BaseException``, so that the window's ``except Exception`` handlers do not count
    it as a failed pass; ``finally`` blocks still run (the ``process`` entry is cleared).
    """


def _when(value: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """``--config --name --start --end [--watch HOST:PID]``."""
    p = argparse.ArgumentParser(prog="changeflow-propagation-window",
                                description="Run one propagation window.")
    p.add_argument("--config", required=True, help="pipeline configuration file (YAML)")
    p.add_argument("--name", required=True, help="the propagation")
    p.add_argument("--start", type=_when, required=True, help="window start (ISO 8601)")
    p.add_argument("--end", type=_when, required=True, help="window end (ISO 8601)")
    p.add_argument("--watch", default=None,
                   help="HOST:PID of the process that owns this job (the Airflow task); "
                        "the window stops when it is gone")
    return p.parse_args(argv)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watchdog(watch: str | None, parent: int | None = None) -> Callable[[], bool]:
    """A check that is True while the owner (``HOST:PID``) and this job's parent live.

    An owner on another host (cluster deploy mode) cannot be checked from here and is
    ignored; the parent check still applies.

    >>> watchdog(f"{socket.gethostname()}:{os.getpid()}")()
    True
    >>> watchdog(f"{socket.gethostname()}:999999999")()
    False
    """
    parent = os.getppid() if parent is None else parent
    host, _, pid = (watch or "").rpartition(":")
    owner = int(pid) if pid.isdigit() and host == socket.gethostname() else None

    def alive() -> bool:
        if os.getppid() != parent:  # spark-submit (our parent) died: we were re-parented
            return False
        return owner is None or _pid_alive(owner)

    return alive


@contextlib.contextmanager
def stop_when_gone(alive: Callable[[], bool], *, grace: float = GRACE,
                   poll: float = 0.5) -> Iterator[None]:
    """While the block runs, watch ``alive`` from a daemon thread; end the block when it
    turns False.

    Enter it in the main thread: SIGTERM then raises :class:`TaskGone` there (the
    previous handler is back when the block ends). Once ``alive()`` is False the watcher
    waits ``grace`` seconds for the work to stop on its own (the window loop looks
    between passes), then sends this process SIGTERM. Stopping mid-pass loses and
    duplicates nothing (a pass's commits are idempotent; the chaos suite kills harder).
    """
    done = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        if not done.is_set():
            done.set()
            raise TaskGone(f"signal {signum}")

    def watch() -> None:
        while not done.wait(poll):
            if not alive():
                log.warning("the task that started this job is gone; stopping")
                if not done.wait(grace):
                    os.kill(os.getpid(), signal.SIGTERM)
                return

    previous = signal.signal(signal.SIGTERM, on_term)
    threading.Thread(target=watch, name="changeflow-watch", daemon=True).start()
    try:
        yield
    finally:
        done.set()
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one window in one Spark application; returns the exit code (see module doc)."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = parse_args(argv)
    alive = watchdog(args.watch)
    try:
        with stop_when_gone(alive):
            return _run(args, alive)
    except TaskGone as gone:
        log.warning("window %s stopped before its end (%s)", args.name, gone)
        return EXIT_GONE


def _run(args: argparse.Namespace, alive: Callable[[], bool]) -> int:
    try:
        from changeflow.clients import check_references, rule_filter
        from changeflow.config import load_config
        from changeflow.schedules.window import run_window
        from changeflow.spark import get_session

        cfg = load_config(args.config)
        check_references(cfg)
        spark = get_session(f"changeflow-window-{args.name}")
        report = run_window(spark, cfg, args.name, start=args.start, end=args.end,
                            rule_filter=rule_filter(cfg, "propagation", args.name),
                            alive=alive)
    except Exception as exc:  # noqa: BLE001  (every failure becomes a classified exit code)
        verdict = "transient, retry later" if is_transient(exc) else "terminal, not retried"
        log.error("window %s failed (%s): %s", args.name, verdict, exc,
                  exc_info=not hasattr(exc, "transient"))
        print(f"changeflow window {args.name}: error ({verdict}): {exc}", file=sys.stderr)
        return exit_code(exc)
    print(json.dumps({"kind": "propagation_window", "name": args.name,
                      "result": dataclasses.asdict(report)}, default=str), flush=True)
    if report.idle:
        print(f"changeflow window {args.name}: nothing attempted ({report.stopped})",
              flush=True)
        return EXIT_IDLE
    return EXIT_OK if report.ok else EXIT_FAILED
