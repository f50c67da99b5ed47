"""A two-site pipeline with a scheduled propagation, and real local alert receivers."""

from __future__ import annotations

import email
import http.server
import json
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.config import PipelineConfig, load_config

PIPELINE = """
version: 1
sites:
  site1: {staging_root: s1/staging, target_root: s1/t, state_url: "sqlite:///s1/state.db",
          database: DBS1.EXAMPLE.COM}
  site2: {staging_root: s2/staging, target_root: s2/t, state_url: "sqlite:///s2/state.db",
          database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.streams_queue, site: site1}
  - {name: strmadmin.streams_queue, site: site2}
propagations:
  - name: p12
    source_queue: strmadmin.streams_queue@site1
    destination_queue: strmadmin.streams_queue@site2
    schedule: {latency: 1}
applies:
  - {name: ap, queue: strmadmin.streams_queue@site2}
"""

SRC = "strmadmin.streams_queue@site1"
DST = "strmadmin.streams_queue@site2"


@pytest.fixture
def pipeline(tmp_path: Path) -> PipelineConfig:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    return load_config(tmp_path / "pipeline.yaml")


class _SMTPHandler(socketserver.StreamRequestHandler):
    """Just enough SMTP (RFC 5321) to receive a message: EHLO, MAIL, RCPT, DATA, QUIT."""

    def handle(self) -> None:
        self._send("220 test ESMTP")
        while line := self.rfile.readline():
            cmd = line.decode().strip()
            verb = cmd.split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self._send("250 test")
            elif verb == "DATA":
                self._send("354 end with .")
                data = []
                while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                    data.append(chunk[1:] if chunk.startswith(b"..") else chunk)
                self.server.messages.append(email.message_from_bytes(b"".join(data)))  # type: ignore[attr-defined]
                self._send("250 queued")
            elif verb == "QUIT":
                self._send("221 bye")
                return
            else:
                self._send("250 ok")

    def _send(self, text: str) -> None:
        self.wfile.write(text.encode() + b"\r\n")


class _HookHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.messages.append(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _serve(server: Any) -> Any:
    server.messages = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def smtp_server() -> Iterator[Any]:
    """A real SMTP server on a free local port; received messages in ``.messages``."""
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = _serve(socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SMTPHandler))
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def webhook_server() -> Iterator[Any]:
    """A real HTTP server on a free local port; received JSON bodies in ``.messages``."""
    server = _serve(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HookHandler))
    yield server
    server.shutdown()
    server.server_close()
