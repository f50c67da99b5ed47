"""The time manager under Airflow: the scheduler starts it, as a process of its own.

Messages expire while nobody dequeues them, and only the time manager moves them to
the exception queue (:mod:`changeflow.messaging.timemanager`). Where Airflow runs the
pipelines (``make airflow``), its scheduler is the one process always running, so the
plugin's lifecycle listener starts the time manager when the scheduler starts:
``python -m changeflow.messaging.timemanager`` over every site of the pipelines the
installation runs (``CHANGEFLOW_PIPELINES``, else ``CHANGEFLOW_CONFIG``:
:mod:`changeflow.airflow.pipelines`), a pass every second. It is a child process, not
a thread of the scheduler: the scheduler forks its executor's workers, and a forked
task must not inherit the time manager's open state-store connections. The child
watches the scheduler and exits when it is gone; the scheduler stops it when it stops.

``CHANGEFLOW_AQ_TIME_MANAGER=0`` (in the scheduler's environment) leaves it out, for an
installation where another process runs it (``changeflow aq time-manager``,
``changeflow serve``). A listener must never break the scheduler: errors are logged.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)
ENV = "CHANGEFLOW_AQ_TIME_MANAGER"
_child: list[subprocess.Popen[bytes]] = []


def is_scheduler(argv: list[str] | None = None) -> bool:
    """Whether this process is ``airflow scheduler`` (what ``airflow standalone`` starts).

    >>> is_scheduler(["/venv/bin/airflow", "scheduler"]), is_scheduler(["airflow", "triggerer"])
    (True, False)
    """
    args = sys.argv if argv is None else argv
    return len(args) > 1 and "airflow" in args[0] and args[1] == "scheduler"


def command(configs: list[str], interval: float = 1.0, watch: int | None = None) -> list[str]:
    """The time manager's command line.

    >>> command(["/p/a.yaml"], watch=42)[1:]
    ['-m', 'changeflow.messaging.timemanager', '--interval', '1', '--watch', '42', \
'--config', '/p/a.yaml']
    """
    argv = [sys.executable, "-m", "changeflow.messaging.timemanager", "--interval",
            f"{interval:g}", "--watch", str(watch if watch is not None else os.getpid())]
    for c in configs:
        argv += ["--config", c]
    return argv


def start() -> subprocess.Popen[bytes] | None:
    """Start the time manager for the configured pipelines (None when there are none)."""
    from changeflow.airflow.pipelines import configured

    if os.environ.get(ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        log.info("changeflow: time manager left out (%s=%s)", ENV, os.environ[ENV])
        return None
    configs = sorted({p.config for p in configured()})
    if not configs:
        log.warning("changeflow: no pipeline configured (CHANGEFLOW_PIPELINES or "
                    "CHANGEFLOW_CONFIG): the AQ time manager does not run")
        return None
    proc = subprocess.Popen(command(configs), stdin=subprocess.DEVNULL)
    _child.append(proc)
    log.info("changeflow: AQ time manager started (pid %d) for %s", proc.pid, ", ".join(configs))
    return proc


def stop() -> None:
    """Stop the time manager this process started."""
    while _child:
        proc = _child.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


@hookimpl
def on_starting(component: Any) -> None:
    """The scheduler is starting: start the time manager beside it."""
    try:
        if is_scheduler() and not _child:
            start()
    except Exception:  # noqa: BLE001 (a listener must never break the scheduler)
        log.exception("changeflow: the AQ time manager could not be started")


@hookimpl
def before_stopping(component: Any) -> None:
    """The scheduler is stopping: stop the time manager."""
    try:
        stop()
    except Exception:  # noqa: BLE001
        log.exception("changeflow: the AQ time manager could not be stopped")
