"""Many clients at once through the real server: no message lost or delivered twice.

8 client threads (each its own keep-alive connection and IDAP session) send with
``<AQXmlCommit/>`` while 8 others receive with ``<AQXmlCommit/>``, on a SQLite store:
their commits are grouped (``messaging.wire``), and a request whose enqueue fails
(a queue stopped half-way) shares batches with the others. Every message sent and
committed is received exactly once; every refused send is absent.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import httpx
import pytest

from changeflow.messaging import admin
from changeflow.state import StateStore

from .conftest import IDAP, Running, client, idap_config, make_queue, post, receive, running


@pytest.fixture(scope="module")
def server(store: StateStore) -> Iterator[Running]:
    make_queue(store, "app.many_q")
    make_queue(store, "app.stops_q")
    with running(store, idap_config()) as r:
        yield r


def _payloads(resp: httpx.Response) -> list[str]:
    return re.findall(r"<(?:\w+:)?raw>([0-9A-Fa-f]*)</(?:\w+:)?raw>", resp.text)


def _send(queue: str, payload: bytes) -> bytes:
    return (f'<?xml version="1.0"?><Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/">'
            f'<Body><AQXmlSend xmlns="{IDAP}"><producer_options><destination>{queue}'
            "</destination></producer_options><message_set><message><message_header>"
            "<sender_id><agent_name>john</agent_name></sender_id></message_header>"
            f"<message_payload><raw>{payload.hex()}</raw></message_payload></message>"
            "</message_set><AQXmlCommit/></AQXmlSend></Body></Envelope>").encode()


def test_concurrent_clients_lose_and_duplicate_nothing(server: Running,
                                                        store: StateStore) -> None:
    senders, per = 8, 30
    sent: list[bytes] = []
    refused: list[bytes] = []
    got: list[bytes] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    done = threading.Event()

    def send(k: int) -> None:
        try:
            with client(server) as c:
                for i in range(per):
                    # every other sender also writes to a queue that is stopped midway
                    queue = "app.stops_q" if k % 2 and i % 3 == 0 else "app.many_q"
                    body = f"{k}:{i}:{queue}".encode()
                    r = post(c, _send(queue, body))
                    with lock:
                        (sent if r.status_code == 200 else refused).append(body)
                    if r.status_code != 200:
                        assert "stopped" in r.text, r.text
        except BaseException as exc:  # noqa: BLE001  (reported by the test)
            errors.append(exc)

    def take() -> None:
        try:
            with client(server) as c:
                while True:
                    r = post(c, receive("app.many_q", wait=0.2, commit=True))
                    assert r.status_code == 200, r.text
                    found = [bytes.fromhex(p) for p in _payloads(r)]
                    with lock:
                        got.extend(found)
                    if not found and done.is_set():
                        return
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    takers = [threading.Thread(target=take) for _ in range(senders)]
    producers = [threading.Thread(target=send, args=(k,)) for k in range(senders)]
    for t in takers + producers:
        t.start()
    while sum(1 for b in sent + refused if b.endswith(b"stops_q")) < 10:
        if not any(t.is_alive() for t in producers):
            break
        threading.Event().wait(0.01)
    admin.stop_queue(store, "app.stops_q")
    for t in producers:
        t.join(timeout=120)
    done.set()
    for t in takers:
        t.join(timeout=120)
    assert not errors, errors
    assert len(sent) + len(refused) == senders * per
    assert refused, "no send met the stopped queue"
    admin.start_queue(store, "app.stops_q")
    with client(server) as c:
        stopped_q: list[bytes] = []
        while found := _payloads(post(c, receive("app.stops_q", wait=0, commit=True))):
            stopped_q += [bytes.fromhex(p) for p in found]
    assert sorted(got) == sorted(b for b in sent if b.endswith(b"many_q")), \
        "a message sent and committed was lost or received twice"
    assert sorted(stopped_q) == sorted(b for b in sent if b.endswith(b"stops_q"))
    assert not set(refused) & set(got + stopped_q), "a refused send was written"
