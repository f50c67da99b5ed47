"""A window never outlives its owner, and a stale ``process`` entry is cleared.

Real processes: the owner is a real child process that the test kills; the window
loop runs with the watchdog the window job uses (``--watch HOST:PID``).
"""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import threading
import time
from typing import Any

from changeflow.config import PipelineConfig
from changeflow.propagation import PropagationResult
from changeflow.schedules.job import watchdog
from changeflow.schedules.window import ensure_schedule, run_window
from changeflow.views.schedules import schedule_rows


def _empty(spark: Any, cfg: Any, name: str, **_kw: Any) -> PropagationResult:
    return PropagationResult(name)


def test_window_stops_when_its_owner_dies(pipeline: PipelineConfig) -> None:
    owner = subprocess.Popen(["sleep", "300"])
    start = dt.datetime.now(dt.UTC)
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(report=run_window(
        None, pipeline, "p12", start=start, end=start + dt.timedelta(hours=1),  # type: ignore[arg-type]
        propagate=_empty, alive=watchdog(f"{socket.gethostname()}:{owner.pid}"))))
    t.start()
    store = ensure_schedule(pipeline, "p12", start)
    deadline = time.monotonic() + 10
    while store.require("p12").process is None:
        assert time.monotonic() < deadline, "the window never started"
        time.sleep(0.1)
    owner.kill()
    owner.wait()
    killed = time.monotonic()
    t.join(timeout=10)
    assert not t.is_alive(), "the window outlived its owner"
    assert time.monotonic() - killed < 5
    assert out["report"].stopped == "task gone"
    assert store.require("p12").process is None


def test_stale_process_entry_is_detected_and_cleared(pipeline: PipelineConfig) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    store = ensure_schedule(pipeline, "p12", dt.datetime.now(dt.UTC))
    store.set_process("p12", f"{socket.gethostname()}:{gone.pid}")
    [row] = schedule_rows(pipeline)
    assert row["stale_process_cleared"] == f"{socket.gethostname()}:{gone.pid}"
    assert row["process"] is None and store.require("p12").process is None
    # a live entry (this process) and one on another host are left alone
    store.set_process("p12", f"{socket.gethostname()}:{subprocess.os.getpid()}")
    assert schedule_rows(pipeline)[0]["process"] is not None
    store.set_process("p12", "elsewhere.example.com:1")
    assert schedule_rows(pipeline)[0]["process"] == "elsewhere.example.com:1"
