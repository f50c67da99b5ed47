"""A window job ends when its task is gone, in every phase (``job.stop_when_gone``).

Real processes and signals: a child Python process runs the job's watcher around work
that either never looks at the owner (a Spark session starting, a long pass) or looks
between short passes, as the window loop does; the test kills the owner.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from changeflow.schedules.job import EXIT_GONE

CHILD = """
import signal, socket, sys, time
from changeflow.schedules.job import TaskGone, stop_when_gone, watchdog

owner, mode, marker, grace = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
alive = watchdog(f"{socket.gethostname()}:{owner}")
note = lambda text: open(marker, "a").write(text + "\\n")
note("started")
try:
    with stop_when_gone(alive, grace=grace, poll=0.1):
        try:
            if mode == "busy":  # start-up or a pass: nothing looks at the owner
                time.sleep(120)
            elif mode == "short":
                time.sleep(1.5)
            else:  # the loop: looks between short passes and stops on its own
                while alive():
                    time.sleep(0.2)
                note("stopped by the loop")
        finally:
            note("finally")
except TaskGone:
    note("gone")
    sys.exit(143)
# the block is over: SIGTERM is back to its default (the process ends, rc -15)
signal.raise_signal(signal.SIGTERM)
"""


def _start(tmp_path: Path, owner: subprocess.Popen[bytes], mode: str,
           grace: float) -> tuple[subprocess.Popen[bytes], Path]:
    marker = tmp_path / f"{mode}.txt"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(owner.pid), mode, str(marker),
                              str(grace)])
    deadline = time.monotonic() + 60
    while not marker.exists() or "started" not in marker.read_text():
        assert time.monotonic() < deadline and child.poll() is None, "the child never started"
        time.sleep(0.05)
    return child, marker


@pytest.fixture
def owner() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def test_work_that_never_looks_is_ended_after_the_grace(tmp_path: Path,
                                                        owner: subprocess.Popen[bytes]) -> None:
    child, marker = _start(tmp_path, owner, "busy", grace=1.0)
    owner.kill()
    owner.wait()
    assert child.wait(timeout=30) == EXIT_GONE == 143
    assert marker.read_text().split() == ["started", "finally", "gone"]


def test_a_loop_that_looks_stops_on_its_own_within_the_grace(
        tmp_path: Path, owner: subprocess.Popen[bytes]) -> None:
    child, marker = _start(tmp_path, owner, "loop", grace=60.0)
    owner.kill()
    owner.wait()
    killed = time.monotonic()
    assert child.wait(timeout=30) == -15  # the handler is gone with the block
    assert time.monotonic() - killed < 30  # not the grace: the loop saw it
    assert marker.read_text().split("\n")[:-1] == ["started", "stopped by the loop", "finally"]


def test_nothing_is_stopped_while_the_owner_lives(tmp_path: Path,
                                                  owner: subprocess.Popen[bytes]) -> None:
    child, marker = _start(tmp_path, owner, "short", grace=0.1)
    assert child.wait(timeout=30) == -15
    assert marker.read_text().split() == ["started", "finally"]
