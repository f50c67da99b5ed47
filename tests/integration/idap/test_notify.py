"""AQXmlRegister, then AQXmlNotification by HTTP POST to a real receiver, or by mail through
a real SMTP server (aiosmtpd); a receiver that is down gets the notification later."""

from __future__ import annotations

import time
from collections.abc import Iterator
from email import message_from_bytes
from typing import Any
from xml.etree.ElementTree import fromstring

import pytest

from changeflow.idap.server import Running
from changeflow.messaging import admin, connect
from changeflow.state import StateStore

from .conftest import (
    IDAP,
    Receiver,
    client,
    envelope,
    fault,
    idap_config,
    make_queue,
    post,
    running,
    send,
    texts,
)


@pytest.fixture(scope="module")
def smtp() -> Iterator[Any]:
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Sink

    class Keep(Sink):
        def __init__(self) -> None:
            self.mails: list[Any] = []

        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
            self.mails.append(message_from_bytes(envelope.content))
            return "250 OK"

    from .conftest import free_port

    handler = Keep()
    port = free_port()
    ctl = Controller(handler, hostname="127.0.0.1", port=port)
    ctl.start()
    yield handler, port
    ctl.stop()


@pytest.fixture(scope="module")
def server(store: StateStore, smtp: Any) -> Iterator[Running]:
    make_queue(store, "app.q")
    make_queue(store, "app.topic", multi=True)
    admin.add_subscriber(store, "app.topic", "shipping")
    admin.add_subscriber(store, "app.topic", "billing")
    cfg = idap_config(mail={"host": "127.0.0.1", "port": smtp[1], "sender": "aq@example.com"},
                      notify={"retry_initial": 0.3, "retry_max": 1.0, "poll_interval": 0.1})
    with running(store, cfg) as r:
        yield r


def register(queue: str, url: str, consumer: str = "") -> bytes:
    cons = f"<consumer_name>{consumer}</consumer_name>" if consumer else ""
    return envelope(f'<AQXmlRegister xmlns="{IDAP}"><register_options><destination>{queue}'
                    f"</destination>{cons}<notify_url>{url}</notify_url></register_options>"
                    "</AQXmlRegister>")


def wait_for(pred: Any, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_http_notification_for_the_registered_consumer_only(server: Running) -> None:
    hook = Receiver().start()
    try:
        with client(server) as a:
            r = post(a, register("app.topic", hook.url, "shipping"))
            assert r.status_code == 200 and texts(r, "status_code") == ["0"]
            assert "consumer_name is required" in fault(post(a, register("app.topic",
                                                                         hook.url)))[2]
            hdr = ("<correlation>order-1</correlation><sender_id><agent_name>john</agent_name>"
                   "</sender_id><recipient_list><recipient><agent_name>billing</agent_name>"
                   "</recipient></recipient_list>")
            post(a, send("app.topic", "<raw>01</raw>", op="AQXmlPublish", header=hdr,
                         commit=True))  # for billing only: no notification
            r = post(a, send("app.topic", "<raw>02</raw>", op="AQXmlPublish", commit=True,
                             header="<correlation>order-2</correlation><sender_id>"
                                    "<agent_name>john</agent_name></sender_id>"))
            [mid] = texts(r, "message_id")
        wait_for(lambda: hook.bodies)
        time.sleep(0.5)
        [body] = hook.bodies
        root = fromstring(body)
        note = root.find(f".//{{{IDAP}}}AQXmlNotification")
        assert note is not None
        assert note.findtext(f"{{{IDAP}}}notification_options/{{{IDAP}}}destination") == \
            "app.topic"
        assert note.findtext(f"{{{IDAP}}}notification_options/{{{IDAP}}}consumer_name") == \
            "SHIPPING"
        ids = [e.text for e in note.iter(f"{{{IDAP}}}message_id")]
        assert ids == [mid]
        assert [e.text for e in note.iter(f"{{{IDAP}}}correlation")] == ["order-2"]
        assert note.find(f".//{{{IDAP}}}message_payload") is None  # properties only
    finally:
        hook.stop()


def test_a_receiver_that_is_down_does_not_block_and_gets_it_later(server: Running) -> None:
    hook = Receiver()  # not started yet
    with client(server) as a:
        assert post(a, register("app.q", hook.url)).status_code == 200
        started = time.monotonic()
        r = post(a, send("app.q", "<raw>0a</raw>", commit=True))
        assert r.status_code == 200 and time.monotonic() - started < 2
        [mid] = texts(r, "message_id")
    wait_for(lambda: server.app.service is not None and _failures(server) >= 1)
    hook.start()
    try:
        wait_for(lambda: hook.bodies)
        assert mid.encode() in hook.bodies[0]
    finally:
        hook.stop()


def _failures(server: Running) -> int:
    notifier = server.app.notifier  # type: ignore[attr-defined]
    return int(notifier.failed)


def test_mailto_notification(server: Running, smtp: Any) -> None:
    handler, _ = smtp
    make_queue(server.app.service.store, "app.mailq")
    with client(server) as a:
        assert post(a, register("app.mailq", "mailto:ops@example.com")).status_code == 200
    connect(server.app.service.store).enqueue("app.mailq", b"\x99", correlation="m-1",
                                              commit=True)
    wait_for(lambda: handler.mails)
    mail = handler.mails[0]
    assert mail["To"] == "ops@example.com" and mail["From"] == "aq@example.com"
    assert mail["Subject"] == "AQ notification: app.mailq"
    text = mail.get_payload(decode=True).decode()
    assert "AQXmlNotification" in text and "<correlation>m-1</correlation>" in text


def test_plsql_urls_are_refused(server: Running) -> None:
    with client(server) as a:
        assert "plsql:// procedures do not exist here" in fault(
            post(a, register("app.q", "plsql://proc")))[2]
