"""The process monitor's alert reaches a real local webhook when a listener stops marking."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from changeflow.config import AlertsConfig
from changeflow.mcq import monitor
from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.listeners.runner import poll
from changeflow.mcq.model import ChangeRec


class Hook(http.server.BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[str]:
    Hook.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/alerts"
    server.shutdown()


class Nothing:
    def handle(self, rec: ChangeRec) -> None:
        pass

    def close(self) -> None:
        pass


def _poller(mcq: MetaChangeQueue) -> tuple[threading.Thread, threading.Event]:
    w = mcq.worker("LDAP")
    assert w.marker is not None
    w.marker.interval = 0.2  # marks throttled to one per 0.2 s here
    stop = threading.Event()
    t = threading.Thread(target=poll, args=(w, Nothing()),
                         kwargs={"frequency": 0.05, "stop": stop})
    t.start()
    return t, stop


def test_a_listener_that_stops_marking_raises_an_alert(lite_mcq: MetaChangeQueue,
                                                       hook: str) -> None:
    mcq = lite_mcq
    mcq.add_listener("LDAP", frequency="5s", alert_after=1.0)
    for name in ("ADSI", "BEST"):
        mcq.drop_listener(name, force=True)
    alerts = AlertsConfig(webhook_url=hook, timeout=5)
    t, stop = _poller(mcq)
    time.sleep(1.5)  # polling and marking, past the 1 s limit
    assert monitor.check(mcq.store, alerts) == [] and Hook.received == []
    stop.set()
    t.join(5)
    time.sleep(1.3)  # the poller is gone: no more marks
    sent = monitor.check(mcq.store, alerts)
    assert [(s["proc"], s["channels"]) for s in sent] == [("LDAP", {"webhook": "sent"})]
    [alert] = Hook.received
    assert alert["event"] == "process_silent" and alert["listener"] == "LDAP"
    assert alert["silent_for"] > 1.0 and "LDAP silent for" in alert["summary"]
    assert monitor.check(mcq.store, alerts) == []  # once per silence
    t, stop = _poller(mcq)
    time.sleep(0.3)
    stop.set()
    t.join(5)
    monitor.check(mcq.store, alerts)
    assert [a["event"] for a in Hook.received] == ["process_silent", "process_recovered"]
