"""Real processes: concurrent consumers never share a message; a killed consumer's comes back."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from changeflow.messaging import connect
from changeflow.state import StateStore

from .conftest import make_queue

CONSUMER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from changeflow.messaging import connect
    url, go, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    s = connect(url, lock_timeout=60)
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.005)
    if mode == "hold":
        m = s.dequeue("app.q", wait=10)
        print(m.msg_id, flush=True)
        time.sleep(600)
    while (m := s.dequeue("app.q", wait=0.5)) is not None:
        s.commit()
        print(m.msg_id, flush=True)
        time.sleep(0.002)  # the consumer's work, outside any transaction
""")


def consumers(tmp_path: Path, url: str, n: int, mode: str = "drain") -> list[subprocess.Popen]:
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    procs = [subprocess.Popen([sys.executable, str(script), url, str(tmp_path / "go"), mode],
                              stdout=subprocess.PIPE, text=True) for _ in range(n)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    (tmp_path / "go").touch()
    return procs


def test_two_consumers_never_get_the_same_message(store_url: str, tmp_path: Path) -> None:
    store = StateStore(store_url)
    make_queue(store)
    s = connect(store)
    ids = s.enqueue_array("app.q", [str(i).encode() for i in range(1000)], commit=True)
    procs = consumers(tmp_path, store_url, 2)
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    a, b = set(outs[0]), set(outs[1])
    assert len(outs[0]) == len(a) and len(outs[1]) == len(b)
    assert not a & b, f"{len(a & b)} messages delivered twice"
    assert a | b == set(ids)
    assert a and b, "both consumers should have taken messages"


def test_a_killed_consumers_locked_message_comes_back(store_url: str, tmp_path: Path) -> None:
    store = StateStore(store_url)
    make_queue(store)
    mid = connect(store).enqueue("app.q", b"work", commit=True)
    (proc,) = consumers(tmp_path, store_url, 1, mode="hold")
    assert proc.stdout is not None and proc.stdout.readline().strip() == mid
    other = connect(store)
    assert other.dequeue("app.q", wait=0) is None  # locked by the live consumer
    proc.kill()  # kill -9, holding the lock (its lock_timeout is 60 s)
    proc.wait()
    started = time.monotonic()
    back = other.dequeue("app.q", wait=10)
    assert back is not None and back.msg_id == mid and back.attempts == 1
    assert time.monotonic() - started < 5  # its process is gone: no need to wait 60 s
    other.commit()
