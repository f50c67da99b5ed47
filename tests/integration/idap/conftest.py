"""A real IDAP server (uvicorn, on a free port) per test module, and helpers to talk to it."""

from __future__ import annotations

import http.server
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from changeflow.idap.config import IdapConfig
from changeflow.idap.server import Running, running  # noqa: F401  (re-exported to the tests)
from changeflow.messaging import admin
from changeflow.state import StateStore

SOAP = "http://schemas.xmlsoap.org/soap/envelope/"
IDAP = "http://ns.oracle.com/AQ/schemas/access"
PASSWORDS = {"JOHN_PW": "welcome", "EVE_PW": "eve-pw", "PROP_PW": "prop-pw"}
USERS = [{"name": "john", "password_env": "JOHN_PW", "db_users": ["aqxmluser"]},
         {"name": "eve", "password_env": "EVE_PW"},
         {"name": "prop", "password_env": "PROP_PW"}]


def envelope(body: str, header: str = "") -> bytes:
    """A SOAP 1.1 envelope around an IDAP request written with the IDAP default namespace."""
    head = f"<Header>{header}</Header>" if header else ""
    return (f'<?xml version="1.0"?>\n<Envelope xmlns="{SOAP}">{head}<Body>{body}</Body>'
            "</Envelope>").encode()


def send(queue: str, payload: str, *, op: str = "AQXmlSend", header: str = "",
         commit: bool = False, visibility: str = "", n: int = 1) -> bytes:
    """An AQXmlSend/AQXmlPublish of ``n`` messages with the same payload."""
    hdr = header or "<sender_id><agent_name>john</agent_name></sender_id>"
    msgs = "".join(f"<message><message_number>{i + 1}</message_number><message_header>{hdr}"
                   f"</message_header><message_payload>{payload}</message_payload></message>"
                   for i in range(n))
    vis = f"<visibility>{visibility}</visibility>" if visibility else ""
    return envelope(f'<{op} xmlns="{IDAP}"><producer_options><destination>{queue}</destination>'
                    f"{vis}</producer_options><message_set><message_count>{n}</message_count>"
                    f"{msgs}</message_set>{'<AQXmlCommit/>' if commit else ''}</{op}>")


def receive(queue: str, *, consumer: str = "", wait: float = 0, commit: bool = False,
            extra: str = "") -> bytes:
    """An AQXmlReceive."""
    cons = f"<consumer_name>{consumer}</consumer_name>" if consumer else ""
    return envelope(f'<AQXmlReceive xmlns="{IDAP}"><consumer_options><destination>{queue}'
                    f"</destination>{cons}<wait_time>{wait}</wait_time>{extra}"
                    f"</consumer_options>{'<AQXmlCommit/>' if commit else ''}</AQXmlReceive>")


COMMIT = envelope(f'<AQXmlCommit xmlns="{IDAP}"/>')
ROLLBACK = envelope(f'<AQXmlRollback xmlns="{IDAP}"/>')


def client(server: Running, user: str = "john", password: str = "welcome") -> httpx.Client:
    """An HTTP client with keep-alive and a cookie jar (one IDAP session)."""
    return httpx.Client(base_url=server.url, auth=(user, password), timeout=30,
                        headers={"Content-Type": "text/xml; charset=utf-8"})


def post(c: httpx.Client, doc: bytes) -> httpx.Response:
    return c.post("", content=doc)


def texts(resp: httpx.Response, tag: str) -> list[str]:
    """The texts of every IDAP element ``tag`` of a response."""
    from xml.etree.ElementTree import fromstring

    root = fromstring(resp.content)
    return [e.text or "" for e in root.iter(f"{{{IDAP}}}{tag}")]


def fault(resp: httpx.Response) -> tuple[str, str, str]:
    """(faultcode, faultstring, detail error_message) of a Fault response."""
    from xml.etree.ElementTree import fromstring

    assert resp.status_code == 500, resp.text
    f = fromstring(resp.content).find(f"{{{SOAP}}}Body/{{{SOAP}}}Fault")
    assert f is not None, resp.text
    msg = f.find(f"detail/{{{IDAP}}}status_response/{{{IDAP}}}error_message")
    return f.findtext("faultcode") or "", f.findtext("faultstring") or "", \
        (msg.text or "") if msg is not None else ""


def make_queue(store: StateStore, name: str, payload: str = "RAW", *, multi: bool = False,
               secure: bool = False) -> str:
    admin.create_queue_table(store, f"{name}_qt", payload, multiple_consumers=multi,
                             secure=secure)
    admin.create_queue(store, name, f"{name}_qt", start=True)
    return name


def idap_config(**overrides: Any) -> IdapConfig:
    return IdapConfig.model_validate({"users": USERS, **overrides})


@pytest.fixture(scope="module", autouse=True)
def _passwords() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    for k, v in PASSWORDS.items():
        mp.setenv(k, v)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> StateStore:
    """The module's state store (a SQLite file)."""
    path = tmp_path_factory.mktemp("idap")
    return StateStore(f"sqlite:///{path}/state.db")


class Receiver:
    """A real HTTP server collecting POSTed notifications (can be started late)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.port = free_port()
        self._server: socketserver.TCPServer | None = None

    def start(self) -> Receiver:
        bodies = self.bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        socketserver.TCPServer.allow_reuse_address = True
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/notify"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_yaml(path: Path, text: str) -> Path:
    import textwrap

    path.write_text(textwrap.dedent(text))
    return path

