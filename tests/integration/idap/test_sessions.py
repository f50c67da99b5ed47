"""Sessions over HTTP: idle rollback, forged and expired cookies (a short idle timeout)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from changeflow.idap.config import IdapConfig
from changeflow.idap.server import Running
from changeflow.messaging import connect
from changeflow.state import StateStore

from .conftest import (
    COMMIT,
    client,
    fault,
    idap_config,
    make_queue,
    post,
    receive,
    running,
    send,
    texts,
)

IDLE = 1.0


@pytest.fixture(scope="module")
def server(store: StateStore) -> Iterator[Running]:
    make_queue(store, "app.q")
    with running(store, idap_config(idle_timeout=IDLE)) as r:
        yield r


def test_the_default_idle_timeout_is_the_seeds_120_seconds() -> None:
    assert IdapConfig().idle_timeout == 120.0


def wait_rolled_back(server: Running, before: int) -> None:
    deadline = time.monotonic() + 10 * IDLE
    while server.app.sessions.rolled_back == before:
        assert time.monotonic() < deadline, "the idle session was not rolled back"
        time.sleep(0.05)


def test_an_idle_transaction_is_rolled_back(server: Running) -> None:
    store = server.app.service.store
    connect(store).enqueue("app.q", b"\x01", commit=True)
    before = server.app.sessions.rolled_back
    with client(server) as a, client(server) as b:
        assert texts(post(a, receive("app.q")), "raw") == ["01"]  # dequeued, not committed
        post(a, send("app.q", "<raw>02</raw>"))  # enqueued, not committed
        assert texts(post(b, receive("app.q")), "message_count") == ["0"]
        wait_rolled_back(server, before)
        # the dequeued message is back, the enqueue vanished
        got = post(b, receive("app.q", commit=True, extra="<batch_size>5</batch_size>"))
        assert texts(got, "raw") == ["01"] and texts(got, "delivery_count") == ["1"]
        # the cookie of the rolled-back session is refused, saying why
        code, _, message = fault(post(a, COMMIT))
        assert code == "25254" and "rolled back after 1 s without a request" in message
        a.cookies.clear()
        assert post(a, COMMIT).status_code == 200  # without it, a new session


def test_requests_keep_a_session_alive(server: Running) -> None:
    with client(server) as a:
        post(a, send("app.q", "<raw>03</raw>"))
        for _ in range(4):  # each request restarts the idle clock
            time.sleep(IDLE * 0.5)
            assert post(a, send("app.q", "<raw>04</raw>")).status_code == 200
        assert post(a, COMMIT).status_code == 200
        got = post(a, receive("app.q", commit=True, extra="<batch_size>10</batch_size>"))
        assert texts(got, "raw") == ["03", "04", "04", "04", "04"]


def test_forged_and_foreign_cookies_are_refused(server: Running) -> None:
    with client(server) as a:
        post(a, send("app.q", "<raw>05</raw>"))
        cookie = a.cookies.get("JSESSIONID")
        sid, issued, sig = cookie.split(".")
        with client(server) as forger:
            forger.cookies.set("JSESSIONID", f"{sid}.{issued}.{sig[:-2]}xx")
            code, _, message = fault(post(forger, COMMIT))
            assert code == "1017" and "does not verify" in message
        with client(server, "eve", "eve-pw") as eve:  # a valid cookie of another agent
            eve.cookies.set("JSESSIONID", cookie)
            assert fault(post(eve, COMMIT))[0] == "1017"
        # the owner's transaction is untouched by all that
        assert post(a, COMMIT).status_code == 200
    with client(server) as b:
        assert texts(post(b, receive("app.q", commit=True)), "raw") == ["05"]
