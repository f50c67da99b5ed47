"""Delay, expiration, lapsed locks and retention: the time manager (QMON) and dequeue."""

from __future__ import annotations

import datetime as dt
import time

from changeflow.messaging import admin, connect, views
from changeflow.messaging.errors import TransactionExpiredError
from changeflow.messaging.timemanager import run_once, start_background
from changeflow.state import StateStore, utcnow

from .conftest import make_queue


def states(store: StateStore, queue: str = "app.q") -> dict[str, int]:
    q = views.queues(store, queue)[0]
    return {k: q[k] for k in ("READY", "WAITING", "PROCESSED", "EXPIRED", "UNDELIVERABLE")
            if q[k]}


def test_delayed_message_is_invisible_until_its_delay_passes(store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    # A delay long enough that a loaded CI machine cannot pass it between
    # the commit and the second dequeue (0.8 s once did).
    enqueued = time.monotonic()
    s.enqueue("app.q", b"later", delay=3)
    s.enqueue("app.q", b"now")
    s.commit()
    assert states(store) == {"READY": 1, "WAITING": 1}
    assert s.dequeue("app.q", wait=0).payload == b"now"
    assert s.dequeue("app.q", wait=0) is None
    m = s.dequeue("app.q", wait=15)
    assert m.payload == b"later" and 2.9 < time.monotonic() - enqueued < 10
    s.commit()


def test_time_manager_makes_delayed_messages_ready_without_a_dequeue(store: StateStore) -> None:
    make_queue(store)
    connect(store).enqueue("app.q", b"x", delay=30, commit=True)
    assert run_once(store).ready == 0
    assert states(store) == {"WAITING": 1}
    assert run_once(store, utcnow() + dt.timedelta(seconds=31)).ready == 1
    assert states(store) == {"READY": 1}


def test_expired_messages_move_to_the_exception_queue(store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    gone = s.enqueue("app.q", b"stale", expiration=0.2)
    kept = s.enqueue("app.q", b"fresh", expiration=3600)
    s.commit()
    time.sleep(0.3)
    report = run_once(store)
    assert report.expired == 1
    assert states(store) == {"READY": 1}
    (row,) = views.exception_messages(store, "app.q")
    assert (row["msg_id"], row["state"], row["reason"], row["original_queue"]) == (
        gone, "EXPIRED", "expired", "app.q")
    assert s.dequeue("app.q", wait=0).msg_id == kept


def test_expiration_counts_from_the_end_of_the_delay(store: StateStore) -> None:
    make_queue(store)
    connect(store).enqueue("app.q", b"x", delay=100, expiration=10, commit=True)
    now = utcnow()
    assert run_once(store, now + dt.timedelta(seconds=50)).expired == 0
    assert run_once(store, now + dt.timedelta(seconds=105)).expired == 0
    assert run_once(store, now + dt.timedelta(seconds=115)).expired == 1


def test_an_expired_message_is_never_dequeued_before_the_time_manager_runs(
        store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    s.enqueue("app.q", b"stale", expiration=0.1, commit=True)
    time.sleep(0.2)
    assert s.dequeue("app.q", wait=0) is None


def test_lapsed_lock_comes_back_and_the_late_commit_fails(store: StateStore) -> None:
    make_queue(store)
    connect(store).enqueue("app.q", b"x", commit=True)
    slow = connect(store, lock_timeout=0.3)
    m = slow.dequeue("app.q", wait=0)
    time.sleep(0.5)
    other = connect(store)
    again = other.dequeue("app.q", wait=0)
    assert again is not None and again.msg_id == m.msg_id and again.attempts == 1
    other.commit()
    try:
        slow.commit()
    except TransactionExpiredError as exc:
        assert "lapsed" in str(exc)
    else:
        raise AssertionError("the late commit should fail")
    assert views.messages(store, "app.q") == []


def test_retention_purge(store: StateStore) -> None:
    make_queue(store, retention_time=10)
    s = connect(store)
    s.enqueue("app.q", b"x", commit=True)
    s.dequeue("app.q", wait=0, commit=True)
    assert run_once(store).purged == 0
    assert run_once(store, utcnow() + dt.timedelta(seconds=11)).purged == 1
    assert states(store) == {}


def test_background_time_manager(sqlite_store: StateStore) -> None:
    make_queue(sqlite_store)
    connect(sqlite_store).enqueue("app.q", b"x", expiration=0.1, commit=True)
    stop = start_background([sqlite_store], interval=0.05)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and states(sqlite_store) != {}:
            time.sleep(0.05)
    finally:
        stop.set()
    assert views.queues(sqlite_store, "app.aq$_q_qt_e")[0]["EXPIRED"] == 1
    assert admin.delete_exceptions(sqlite_store, "app.aq$_q_qt_e") == 1


def test_time_manager_process_runs_until_the_process_it_watches_is_gone(
        store_url: str, tmp_path) -> None:
    import subprocess
    import sys

    from changeflow.messaging.timemanager import has_work

    (tmp_path / "p.yaml").write_text(
        "version: 1\nsites:\n  s1: {staging_root: st, target_root: t, "
        f'state_url: "{store_url}", database: D1}}\n')
    store = StateStore(store_url)
    make_queue(store)
    assert not has_work(store, utcnow())  # an idle store: a pass writes nothing
    connect(store).enqueue("app.q", b"x", expiration=0.1, commit=True)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    qmon = subprocess.Popen([sys.executable, "-m", "changeflow.messaging.timemanager",
                             "--config", str(tmp_path / "p.yaml"), "--interval", "0.2",
                             "--watch", str(owner.pid)])
    try:
        deadline = time.monotonic() + 30
        while not views.exception_messages(store, "app.q"):
            assert time.monotonic() < deadline, "the expired message never moved"
            assert qmon.poll() is None, "the time manager exited"
            time.sleep(0.2)
        assert not has_work(store, utcnow())
        time.sleep(2)
        assert qmon.poll() is None  # runs while its owner lives
        owner.kill()
        owner.wait()
        assert qmon.wait(timeout=15) == 0  # its owner is gone: it stops
    finally:
        for p in (owner, qmon):
            if p.poll() is None:
                p.kill()
