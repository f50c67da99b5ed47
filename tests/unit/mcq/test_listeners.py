"""The listener loop and the generic XML listener (files, and POSTs to a real HTTP server)."""

from __future__ import annotations

import http.server
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.errors import TransientError
from changeflow.mcq import views
from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.listeners.handlers import TargetUnavailableError
from changeflow.mcq.listeners.runner import drain, poll
from changeflow.mcq.listeners.xml import XmlFeed
from changeflow.mcq.model import ChangeRec, McqError


class Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes] = []
    status = 200

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).bodies.append(body)
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def feed_server() -> Iterator[Any]:
    Receiver.bodies, Receiver.status = [], 200
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server
    server.shutdown()


class Flaky:
    """Fails on chosen keys; records what it applied."""

    def __init__(self, fail: set[str], transient: bool = False):
        self.fail, self.transient, self.done = fail, transient, []

    def handle(self, rec: ChangeRec) -> None:
        if rec.pkey_string in self.fail:
            raise (TransientError if self.transient else ValueError)(f"cannot {rec.pkey_string}")
        self.done.append(rec.pkey_string)

    def close(self) -> None:
        pass


def test_drain_acks_what_the_handler_took_and_puts_back_the_rest(mcq: MetaChangeQueue) -> None:
    for k in "abcd":
        mcq.log_update("LOGINS", pkey_string=k)
    h = Flaky({"b"})
    r = drain(mcq.worker("ADSI"), h)
    assert (h.done, r.processed, r.put_back, r.ended) == (["a", "c", "d"], 3, 1, "empty")
    assert "cannot b" in r.errors[0]
    [held] = views.pending_entries(mcq.store, "ADSI")
    assert held["pkey_string"] == "b" and held["retry_count"] == 1
    assert held["hold_until"] is not None  # 30 s, doubling with each retry


def test_a_transient_failure_ends_the_run(mcq: MetaChangeQueue) -> None:
    for k in "abc":
        mcq.log_update("LOGINS", pkey_string=k)
    h = Flaky({"b"}, transient=True)
    with pytest.raises(TransientError):
        drain(mcq.worker("ADSI"), h)
    assert h.done == ["a"]
    assert [e["pkey_string"] for e in views.pending_entries(mcq.store, "ADSI")] == ["b", "c"]


def test_poll_keeps_going_for_its_duration(mcq: MetaChangeQueue) -> None:
    h = Flaky(set())
    stop = threading.Event()
    w = mcq.worker("ADSI")
    t = threading.Thread(target=lambda: poll(w, h, frequency=0.05, stop=stop))
    t.start()
    for k in "xyz":
        mcq.log_update("LOGINS", pkey_string=k)
    deadline = threading.Event()
    for _ in range(100):
        if len(h.done) == 3:
            break
        deadline.wait(0.05)
    stop.set()
    t.join(5)
    assert h.done == ["x", "y", "z"] and not t.is_alive()


def test_xml_documents_in_a_directory(mcq: MetaChangeQueue, tmp_path: Path) -> None:
    mcq.log_update("LOGINS", pkey_string="finkej", person_id=7, pkey_number=1001)
    mcq.log_delete("LOGINS", pkey_string="gone", bulk=True)
    feed = XmlFeed("ADSI", directory=str(tmp_path / "feed"))
    r = drain(mcq.worker("ADSI"), feed)
    files = sorted((tmp_path / "feed").glob("*.xml"))
    assert r.processed == 2 and len(files) == 2
    doc = ET.parse(files[0]).getroot()
    assert doc.tag == "change" and doc.get("listener") == "ADSI"
    assert (doc.get("change_type"), doc.get("operation")) == ("C", "update")
    assert doc.findtext("tname") == "LOGINS" and doc.findtext("pkey_string") == "finkej"
    assert doc.findtext("person_id") == "7" and doc.findtext("pkey_number") == "1001"
    assert doc.find("record") is None  # no source query configured
    last = ET.parse(files[1]).getroot()
    assert (last.get("operation"), last.get("bulk")) == ("delete", "true")
    assert files[0].name == f"{int(doc.get('entry_number', 0)):012d}.xml"


def test_xml_documents_posted_to_a_feed(mcq: MetaChangeQueue, feed_server: Any) -> None:
    mcq.log_insert("LOGINS", pkey_string="a")
    url = f"http://127.0.0.1:{feed_server.server_address[1]}/feed"
    r = drain(mcq.worker("ADSI"), XmlFeed("ADSI", url=url))
    assert r.processed == 1
    [body] = Receiver.bodies
    assert ET.fromstring(body).findtext("pkey_string") == "a"


def test_a_feed_that_refuses_or_is_down(mcq: MetaChangeQueue, feed_server: Any) -> None:
    url = f"http://127.0.0.1:{feed_server.server_address[1]}/feed"
    rec = ChangeRec("ADSI", "LOGINS", None, None, "C", entry_number=1)
    Receiver.status = 400
    with pytest.raises(McqError, match="refused entry 1: 400"):
        XmlFeed("ADSI", url=url).handle(rec)
    Receiver.status = 503
    with pytest.raises(TargetUnavailableError, match="503"):
        XmlFeed("ADSI", url=url).handle(rec)
    with pytest.raises(TargetUnavailableError, match="unreachable"):
        XmlFeed("ADSI", url="http://127.0.0.1:9/feed", timeout=2).handle(rec)
