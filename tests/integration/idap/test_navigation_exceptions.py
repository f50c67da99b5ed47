"""IDAP receives of issue 32: group navigation, message_state, exception queues (seed 003)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from changeflow.idap.server import Running
from changeflow.messaging import admin, connect
from changeflow.messaging.timemanager import run_once
from changeflow.state import StateStore

from .conftest import client, fault, idap_config, make_queue, post, receive, running, texts


@pytest.fixture(scope="module")
def server(store: StateStore) -> Iterator[Running]:
    make_queue(store, "app.plain")
    admin.create_queue_table(store, "app.grp_qt", "RAW", sort_list="commit_time",
                             message_grouping="transactional")
    admin.create_queue(store, "app.grp", "app.grp_qt", start=True)
    make_queue(store, "app.late")
    make_queue(store, "app.exp")
    with running(store, idap_config()) as r:
        yield r


def nav(mode: str, dequeue: str = "REMOVE") -> str:
    return f"<dequeue_mode>{dequeue}</dequeue_mode><navigation_mode>{mode}</navigation_mode>"


def test_next_transaction_without_grouping_is_a_fault(server: Running) -> None:
    connect(server.app.service.store).enqueue("app.plain", b"\x01", commit=True)
    with client(server) as a:
        for mode in ("REMOVE", "BROWSE"):
            code, _, message = fault(post(a, receive("app.plain",
                                                     extra=nav("NEXT_TRANSACTION", mode))))
            assert "can only be used if message grouping is enabled" in message, message
        assert texts(post(a, receive("app.plain", commit=True)), "raw") == ["01"]


def test_next_transaction_of_remove_dequeues_over_http(server: Running) -> None:
    s = connect(server.app.service.store)
    for g in range(1, 4):
        for i in range(2):
            s.enqueue("app.grp", bytes([g * 16 + i]))
        s.commit()
    with client(server) as a:
        def raw(mode: str) -> list[str]:
            return texts(post(a, receive("app.grp", extra=nav(mode))), "raw")

        assert raw("FIRST_MESSAGE") == ["10"]
        assert raw("NEXT_TRANSACTION") == ["20"]
        assert raw("NEXT_TRANSACTION") == ["30"]
        assert raw("NEXT_MESSAGE") == ["31"]
        post(a, receive("app.grp", commit=True, extra=nav("NEXT_TRANSACTION")))


def test_a_due_delayed_message_browses_as_ready(server: Running) -> None:
    connect(server.app.service.store).enqueue("app.late", b"\x07", delay=0.2, commit=True)
    time.sleep(0.4)
    with client(server) as a:
        got = post(a, receive("app.late", extra="<dequeue_mode>BROWSE</dequeue_mode>"))
        assert texts(got, "raw") == ["07"] and texts(got, "message_state") == ["0"]


def test_an_exception_queue_is_received_from(server: Running) -> None:
    store = server.app.service.store
    connect(store).enqueue("app.exp", b"\x09", expiration=0.05, commit=True)
    time.sleep(0.1)
    run_once(store)
    admin.start_queue(store, "app.aq$_exp_qt_e")
    with client(server) as a:
        got = post(a, receive("app.aq$_exp_qt_e", commit=True))
        assert got.status_code == 200, got.text
        assert texts(got, "raw") == ["09"] and texts(got, "message_state") == ["3"]
        assert texts(got, "exception_queue") == []  # the default one: NULL
        assert texts(post(a, receive("app.aq$_exp_qt_e")), "raw") == []
