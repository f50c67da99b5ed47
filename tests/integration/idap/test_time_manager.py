"""Expired messages move while only the service runs (issue 32, item 3).

``changeflow serve`` runs the time manager for the store it serves: nobody runs
``changeflow aq time-manager`` here, nobody dequeues.
"""

from __future__ import annotations

import time
from pathlib import Path

from changeflow.messaging import connect, views
from changeflow.state import StateStore

from .conftest import idap_config, make_queue, running


def exception_rows(store: StateStore, queue: str) -> list[dict]:
    return views.exception_messages(store, queue)


def test_the_service_moves_expired_messages(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path}/state.db")
    make_queue(store, "app.q")
    with running(store, idap_config()):
        mid = connect(store).enqueue("app.q", b"x", expiration=0.2, commit=True)
        deadline = time.monotonic() + 10
        while not exception_rows(store, "app.q"):
            assert time.monotonic() < deadline, "the expired message never moved"
            time.sleep(0.1)
    (row,) = exception_rows(store, "app.q")
    assert (row["msg_id"], row["state"], row["queue"]) == (mid, "EXPIRED", "app.aq$_q_qt_e")


def test_time_manager_zero_leaves_it_to_another_process(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path}/state.db")
    make_queue(store, "app.q")
    with running(store, idap_config(time_manager=0)):
        connect(store).enqueue("app.q", b"x", expiration=0.1, commit=True)
        time.sleep(2.5)
        assert exception_rows(store, "app.q") == []


def test_a_clean_stop_spills_the_services_buffered_messages(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path}/state.db")
    make_queue(store, "app.q")
    with running(store, idap_config()):
        # a session of the service's process (as a request's would be)
        connect(store).enqueue("app.q", b"kept", delivery_mode="BUFFERED")
        assert views.queues(store, "app.q")[0]["spilled"] == 0
    assert views.queues(store, "app.q")[0]["spilled"] == 1
    m = connect(store).dequeue("app.q", wait=0, delivery_mode="BUFFERED")
    assert m is not None and m.payload == b"kept"
