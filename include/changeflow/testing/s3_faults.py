"""A loopback HTTP proxy in front of an S3 server that can fail and slow requests down.

Clients talk to the proxy's endpoint; every request is forwarded unchanged (the
``Host`` header included, so AWS signatures still verify) to the real server, unless a
fault is armed:

* :meth:`FaultProxy.fail` answers the next requests (or all, until :meth:`heal`) with
  ``503 SlowDown``, as S3 does when it throttles or a front end is down;
* :meth:`FaultProxy.slow_listing` delays every listing (``GET /bucket?list-type=…``) by
  some seconds before forwarding it.

It counts what it saw (:attr:`FaultProxy.counts`), so a test can tell that a client was
refused and then retried.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from changeflow.testing.pg_cluster import free_port

_SLOW_DOWN = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>"
              b"<Message>Please reduce your request rate.</Message></Error>")


class FaultProxy:
    """Forwards to ``upstream_port`` on 127.0.0.1; :meth:`start`, :meth:`stop`."""

    def __init__(self, upstream_port: int, port: int | None = None):
        self.upstream_port = upstream_port
        self.port = port or free_port()
        self.counts: Counter[str] = Counter()
        self._failing: int | None = 0  # requests still to fail; None: all, until healed
        self._list_delay = 0.0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, requests: int | None = None) -> None:
        """Answer 503 to the next ``requests`` requests (None: every one until healed)."""
        with self._lock:
            self._failing = requests

    def heal(self) -> None:
        """Forward every request again, without delay."""
        with self._lock:
            self._failing, self._list_delay = 0, 0.0

    def slow_listing(self, seconds: float) -> None:
        """Delay every object listing by ``seconds``."""
        with self._lock:
            self._list_delay = seconds

    def _should_fail(self) -> bool:
        with self._lock:
            if self._failing is None:
                return True
            if self._failing > 0:
                self._failing -= 1
                return True
            return False

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                listing = self.command == "GET" and ("list-type=" in self.path or (
                    "?" in self.path and "prefix=" in self.path))
                proxy.counts["requests"] += 1
                if proxy._should_fail():
                    proxy.counts["failed"] += 1
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(_SLOW_DOWN)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(_SLOW_DOWN)
                    return
                if listing and proxy._list_delay:
                    proxy.counts["delayed"] += 1
                    time.sleep(proxy._list_delay)
                up = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=300)
                try:
                    up.request(self.command, self.path, body=body,
                               headers={k: v for k, v in self.headers.items()})
                    resp = up.getresponse()
                    data = resp.read()
                    self.send_response(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("transfer-encoding", "content-length",
                                             "connection"):
                            self.send_header(k, v)
                    # a HEAD's length is the object's, not the (empty) body's
                    self.send_header("Content-Length", resp.getheader("Content-Length", "0")
                                     if self.command == "HEAD" else str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    up.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
