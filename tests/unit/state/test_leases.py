"""Leases: one active run per component, expiry, takeover fencing, dead local holders."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import update

from changeflow.errors import LeaseHeldError, LeaseLostError
from changeflow.state import StateStore, schema
from changeflow.state.leases import Lease, holder


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(f"sqlite:///{tmp_path}/s.db")


def test_a_second_run_is_refused_with_the_holder_named(store: StateStore) -> None:
    held = pytest.raises(LeaseHeldError,
                         match="propagation:p is already running in host:1:airflow:aaaa")
    with Lease(store, "propagation:p", owner="host:1:airflow:aaaa"), held:
        Lease(store, "propagation:p", wait=0.3).acquire()
    # Released: the next run gets it.
    with Lease(store, "propagation:p") as lease:
        assert holder(store, "propagation:p")["owner"] == lease.owner


def test_a_waiting_run_starts_when_the_holder_ends(store: StateStore) -> None:
    first = Lease(store, "apply:a").acquire()
    started = time.monotonic()
    import threading

    threading.Timer(0.5, first.release).start()
    with Lease(store, "apply:a", wait=10):
        assert 0.3 < time.monotonic() - started < 9


def test_an_expired_lease_is_taken_over_and_the_old_holder_cannot_commit(
        store: StateStore) -> None:
    old = Lease(store, "capture:c", owner="elsewhere:9:cli:x", ttl=60).acquire()
    old._stop.set()  # a stalled holder: no more heartbeats
    with store.begin() as conn:
        conn.execute(update(schema.leases).values(
            expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)))
    new = Lease(store, "capture:c").acquire()
    try:
        new.check()
        with pytest.raises(LeaseLostError, match="taken over"):
            old.check()
        assert old.renew() is False
    finally:
        new.release()
        old.release()


def test_a_killed_local_holder_is_taken_over_at_once(store: StateStore) -> None:
    script = ("import sys, time; from changeflow.state import StateStore;"
              "from changeflow.state.leases import Lease;"
              "l = Lease(StateStore(sys.argv[1]), 'propagation:p', ttl=600).acquire();"
              "print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", script, store.url], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    with pytest.raises(LeaseHeldError):
        Lease(store, "propagation:p").acquire()
    proc.kill()
    proc.wait()
    with Lease(store, "propagation:p") as lease:  # no 600 s wait for the expiry
        assert holder(store, "propagation:p")["owner"] == lease.owner
