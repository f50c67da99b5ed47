"""Concurrent first commits: counters and rows made on first use, from several processes.

Issue 32, item 1: on PostgreSQL the first commits into a new commit-time queue raced to
create the queue's counter (``aq:commit:<queue>``), and the losers' messages were lost
with a raw UniqueViolation. Every test here starts its processes together on a fresh
store, queue or name, so that the first use is concurrent.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from changeflow.messaging import connect
from changeflow.state import StateStore

from .conftest import make_queue

PROCS = 5
PER_TXN = 4

COMMITTER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from changeflow.messaging import connect
    url, go, me, queues = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
    s = connect(url)
    for q in queues:  # one transaction across the fresh queues, kept until commit
        for i in range({per}):
            s.enqueue(q, f"{{me}}:{{i}}".encode())
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.0005)
    try:
        s.commit()
        print("committed", flush=True)
    except Exception as exc:  # what the application would see
        print(f"failed {{type(exc).__name__}}: {{exc}}", flush=True)
""").format(per=PER_TXN)

COUNTER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from changeflow.state import StateStore
    url, go, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    store = StateStore(url)
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.0005)
    try:
        print(store.next_counter(name), flush=True)
    except Exception as exc:
        print(f"failed {type(exc).__name__}: {exc}", flush=True)
""")


def together(tmp_path: Path, script: str, argv: list[list[str]]) -> list[str]:
    """Run one process per argv, release them at once, return each one's last line."""
    path = tmp_path / "script.py"
    path.write_text(script)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, str(path), a[0], str(go), *a[1:]],
                              stdout=subprocess.PIPE, text=True) for a in argv]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return outs


def test_first_commits_into_new_commit_time_queues_lose_nothing(
        store_url: str, tmp_path: Path) -> None:
    store = StateStore(store_url)
    queues = [make_queue(store, f"app.ct{i}", sort="commit_time") for i in range(3)]
    outs = together(tmp_path, COMMITTER, [[store_url, f"p{n}", *queues] for n in range(PROCS)])
    assert outs == ["committed"] * PROCS
    s = connect(store)
    for q in queues:
        got = []
        while (m := s.dequeue(q, wait=0)) is not None:
            got.append(m.payload.decode())
        s.commit()
        assert len(got) == PROCS * PER_TXN, f"{q}: {len(got)} messages"
        # commit-time order: each transaction's messages together, in enqueue order
        senders = [g.split(":")[0] for g in got]
        runs = [senders[i] for i in range(len(senders)) if i == 0 or senders[i - 1] != senders[i]]
        assert sorted(runs) == sorted(f"p{n}" for n in range(PROCS)), senders
        assert got == [f"{p}:{i}" for p in runs for i in range(PER_TXN)]


def test_a_new_counter_taken_by_several_processes_at_once(
        store_url: str, tmp_path: Path) -> None:
    StateStore(store_url)  # migrated before the race
    outs = together(tmp_path, COUNTER, [[store_url, "scn:NEW.EXAMPLE.COM"]] * 6)
    assert sorted(outs) == [str(n) for n in range(1, 7)], outs
    assert StateStore(store_url).next_counter("scn:NEW.EXAMPLE.COM") == 7


SCHEDULER = textwrap.dedent("""
    import datetime as dt, sys, time
    from pathlib import Path
    from changeflow.schedules.model import Schedule
    from changeflow.schedules.store import ScheduleStore
    from changeflow.state import StateStore
    url, go = sys.argv[1], Path(sys.argv[2])
    store = ScheduleStore(StateStore(url))
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.0005)
    try:
        made = store.create(Schedule("p1", dt.datetime(2024, 1, 1, tzinfo=dt.UTC)))
        print("created" if made else "existed", flush=True)
    except Exception as exc:
        print(f"failed {type(exc).__name__}: {exc}", flush=True)
""")

EXPIRER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from changeflow.messaging.timemanager import run_once
    from changeflow.state import StateStore
    url, go = sys.argv[1], Path(sys.argv[2])
    store = StateStore(url)
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.0005)
    try:
        print(f"expired {run_once(store).expired}", flush=True)
    except Exception as exc:
        print(f"failed {type(exc).__name__}: {exc}", flush=True)
""")


def test_a_schedule_made_on_first_use_by_several_processes(
        store_url: str, tmp_path: Path) -> None:
    from changeflow.schedules.store import ScheduleStore

    StateStore(store_url)
    outs = together(tmp_path, SCHEDULER, [[store_url]] * 5)
    assert sorted(outs) == ["created"] + ["existed"] * 4, outs
    assert [r.schedule.propagation for r in ScheduleStore(StateStore(store_url)).list()] == ["p1"]


def test_an_exception_queue_made_on_first_use_by_several_processes(
        store_url: str, tmp_path: Path) -> None:
    import time

    from changeflow.messaging import views
    from changeflow.queues.catalog import QueueCatalog

    store = StateStore(store_url)
    # a pipeline's LCR queue: no queue table, so no exception queue until a message expires
    QueueCatalog(store, "").create_queue("strm.q", queue_table="strm.q_table")
    connect(store).enqueue("strm.q", b"x", expiration=0.05, recipients=["a"], commit=True)
    time.sleep(0.1)
    outs = together(tmp_path, EXPIRER, [[store_url]] * 5)
    assert all(o.startswith("expired ") for o in outs), outs
    (row,) = views.exception_messages(store, "strm.q")
    assert (row["queue"], row["state"]) == ("strm.aq$_q_table_e", "EXPIRED")
