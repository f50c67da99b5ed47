"""Hostile input: each gets a Fault or a 4xx naming the problem, changes nothing, and the
service keeps serving others."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from changeflow.idap.server import Running
from changeflow.state import StateStore

from .conftest import (
    IDAP,
    SOAP,
    client,
    envelope,
    fault,
    idap_config,
    make_queue,
    post,
    receive,
    running,
    send,
    texts,
)

LIMIT = 4096
READ_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def server(store: StateStore) -> Iterator[Running]:
    make_queue(store, "app.q")
    make_queue(store, "app.topic", multi=True)
    make_queue(store, "app.secure", secure=True)
    cfg = idap_config(max_body_bytes=LIMIT, read_timeout=READ_TIMEOUT)
    with running(store, cfg) as r:
        yield r


def depth(store: StateStore) -> int:
    """Every stored message row, whatever its state (nothing may change)."""
    from sqlalchemy import func, select

    from changeflow.state import schema_messaging as S

    with store.read() as conn:
        return int(conn.execute(select(func.count()).select_from(S.messages)).scalar() or 0)


def still_serving(server: Running) -> None:
    """Another client's send and receive work (and leave the queue as it was)."""
    with client(server) as c:
        ok = post(c, send("app.q", "<raw>0f</raw>", commit=True))
        assert ok.status_code == 200, ok.text
        assert texts(post(c, receive("app.q", commit=True)), "raw") == ["0f"]


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol9 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/"><Body>
<AQXmlSend xmlns="http://ns.oracle.com/AQ/schemas/access"><producer_options>
<destination>app.q</destination></producer_options><message_set><message>
<message_payload><raw>&lol9;</raw></message_payload></message></message_set><AQXmlCommit/>
</AQXmlSend></Body></Envelope>"""

XXE = b"""<?xml version="1.0"?>
<!DOCTYPE x [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/"><Body>
<AQXmlSend xmlns="http://ns.oracle.com/AQ/schemas/access"><producer_options>
<destination>app.q</destination></producer_options><message_set><message>
<message_payload><raw>&secret;</raw></message_payload></message></message_set><AQXmlCommit/>
</AQXmlSend></Body></Envelope>"""

CASES = {
    "malformed": (b"<Envelope><Body><AQXmlCommit></Body>", "31011", "not well-formed XML"),
    "billion laughs": (BILLION_LAUGHS, "31011", "declares a DTD or entities"),
    "xxe": (XXE, "31011", "declares a DTD or entities"),
    "envelope namespace": (
        send("app.q", "<raw>01</raw>", commit=True).replace(SOAP.encode(), b"urn:wrong:soap"),
        "31154", "the Envelope is in namespace 'urn:wrong:soap'"),
    "idap namespace": (
        send("app.q", "<raw>01</raw>", commit=True).replace(IDAP.encode(), b"urn:wrong:aq"),
        "31154", "the request AQXmlSend is in namespace 'urn:wrong:aq'"),
    "unknown operation": (envelope(f'<AQXmlSteal xmlns="{IDAP}"/>'), "31154",
                          "unknown operation AQXmlSteal"),
    "no destination": (
        envelope(f'<AQXmlSend xmlns="{IDAP}"><producer_options/><message_set><message>'
                 "<message_payload><raw>01</raw></message_payload></message></message_set>"
                 "<AQXmlCommit/></AQXmlSend>"),
        "31154", "element AQXmlSend/producer_options/destination is required"),
    "no consumer on a topic": (receive("app.topic", commit=True), "31154",
                               "consumer_name is required"),
    "unknown queue": (send("app.nope", "<raw>01</raw>", commit=True), "24010",
                      "queue 'app.nope' does not exist"),
    "no privilege": (send("app.secure", "<raw>01</raw>", commit=True), "1031",
                     "may not enqueue on secure queue app.secure"),
    "bad hex": (send("app.q", "<raw>zz</raw>", commit=True), "25215", "is not hex"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fault_names_the_problem_and_changes_nothing(server: Running, case: str) -> None:
    doc, code, text = CASES[case]
    before = depth(server.app.service.store)
    user = "eve" if case == "no privilege" else "john"
    with client(server, user, "eve-pw" if user == "eve" else "welcome") as c:
        got_code, faultstring, message = fault(post(c, doc))
    assert got_code == code
    assert faultstring.startswith("Client error: ") and text in faultstring
    assert text in message
    assert depth(server.app.service.store) == before
    still_serving(server)


def test_a_body_over_the_limit_is_refused_before_it_is_read(server: Running) -> None:
    before = depth(server.app.service.store)
    big = send("app.q", "<raw>" + "ab" * LIMIT + "</raw>", commit=True)
    with client(server) as c:
        r = post(c, big)
        assert r.status_code == 413 and f"the limit is {LIMIT}" in r.text

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
            for i in range(0, len(big), 1024):
                yield big[i:i + 1024]

        r = c.post("", content=chunks())
        assert r.status_code == 413 and f"over {LIMIT} bytes" in r.text
    assert depth(server.app.service.store) == before
    still_serving(server)


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    out = b""
    while chunk := sock.recv(4096):
        out += chunk
    return out


def test_a_slow_client_is_cut_off_and_others_are_served(server: Running) -> None:
    host, port = server.url.split("//")[1].split("/")[0].split(":")
    slow = socket.create_connection((host, int(port)))
    slow.sendall(b"POST /aq HTTP/1.1\r\nHost: x\r\n")  # and never the rest of the head
    served = threading.Event()

    def other() -> None:
        still_serving(server)
        served.set()

    t = threading.Thread(target=other)
    t.start()
    t.join(10)
    assert served.is_set()  # served while the slow client holds its connection
    slow.settimeout(READ_TIMEOUT + 5)
    started = time.monotonic()
    answer = _until_closed(slow)  # the head and body may come in separate reads
    assert answer.startswith(b"HTTP/1.1 408") and b"idap.read_timeout" in answer
    assert time.monotonic() - started < READ_TIMEOUT + 2
    slow.close()
    # a body that trickles in slower than read_timeout
    trickle = socket.create_connection((host, int(port)))
    body = send("app.q", "<raw>01</raw>", commit=True)
    auth = httpx.BasicAuth("john", "welcome")._auth_header
    trickle.sendall(b"POST /aq HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\n"
                    + f"Authorization: {auth}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    + body[:20])
    trickle.settimeout(READ_TIMEOUT + 5)
    answer = _until_closed(trickle)
    assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within" in answer
    trickle.close()
    still_serving(server)


def test_http_level_refusals(server: Running) -> None:
    base = server.url.rsplit("/", 1)[0]
    assert httpx.get(base + "/elsewhere").status_code == 404
    r = httpx.put(server.url, content=b"x", auth=("john", "welcome"))
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    r = httpx.post(server.url, content=send("app.q", "<raw>01</raw>"), auth=("john", "welcome"),
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 415 and "text/xml" in r.text
    still_serving(server)


def test_two_requests_in_one_body_are_refused(server: Running) -> None:
    doc = envelope(f'<AQXmlCommit xmlns="{IDAP}"/><AQXmlRollback xmlns="{IDAP}"/>')
    with client(server) as c:
        assert "exactly one IDAP request, not 2" in fault(post(c, doc))[2]
