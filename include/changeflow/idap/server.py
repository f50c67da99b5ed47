"""Serving the IDAP app with uvicorn: TLS, slow-client defence, one process, many threads.

:func:`build` wires the pieces (users, service, sessions, notifier, the time manager's
thread, ASGI app);
:func:`serve` runs them in the foreground (``changeflow serve``); :func:`running`
runs them in a background thread and yields the base URL (tests, the benchmark, the
HTTP-propagation demo).

**One process.** A session's open transaction lives in the process that opened it
(a messaging session holds its enqueues until commit), so the service runs as one
uvicorn process: an event loop moving bytes (httptools) and a pool of ``threads``
running requests. On the 2-core machine that is the right shape anyway: the store
(SQLite, one writer) and the GIL serialise the work; more processes would need sticky
sessions at a proxy.

**Slow clients.** uvicorn has no timeout for a request's head; the protocol class here
closes a connection whose request line and headers have not all arrived within
``read_timeout`` seconds (answering 408), and the app gives the body the same time.
Idle keep-alive connections close after ``keep_alive`` seconds.

**Latency under load.** The event loop and the worker threads share the GIL; a thread
that gives it up for I/O (a socket write, an SQLite statement or fsync) waits, to get it
back, until the thread holding it lets go: by default up to 5 ms (CPython's switch
interval). A request hops between threads several times (loop, worker, the group
committer's leader, loop), and with 8 busy clients those waits added up to most of the
95th percentile. :func:`serve` (a process of its own) lowers the switch interval to
:data:`SWITCH_INTERVAL` and freezes the objects of start-up out of the garbage
collector's generations, so that a full collection does not walk the imported modules
in the middle of a request.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from changeflow.idap.app import IdapApp
from changeflow.idap.auth import Users
from changeflow.idap.config import IdapConfig
from changeflow.idap.notify import Notifier
from changeflow.idap.service import Service
from changeflow.idap.sessions import SessionManager

log = logging.getLogger(__name__)
#: Seconds a thread may hold the GIL while others wait for it, in a served process.
SWITCH_INTERVAL = 0.0005


class GuardedProtocol(HttpToolsProtocol):
    """httptools' protocol with a deadline for each request's head (see the module doc).

    It also hands the common name of a verified client certificate to the app, as
    ``scope["extensions"]["tls"]["client_cert_name"]``.
    """

    read_timeout = 10.0
    _head: Any = None

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._head = self.loop.call_later(self.read_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._head is not None:
            self._head.cancel()
            self._head = None

    def _too_slow(self) -> None:
        self._head = None
        if self.transport.is_closing():
            return
        body = (f"the request head did not arrive within {self.read_timeout:g} s "
                "(idap.read_timeout)\n").encode()
        self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
                             b"connection: close\r\ncontent-length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head is None:
            self._arm()
        cert = self.transport.get_extra_info("peercert")
        if cert:
            name = next((v for rdn in cert.get("subject", ()) for k, v in rdn
                         if k == "commonName"), None)
            if name:
                self.scope["extensions"] = {"tls": {"client_cert_name": name}}

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def protocol_class(read_timeout: float) -> type[GuardedProtocol]:
    """A :class:`GuardedProtocol` with its head deadline set."""
    return type("IdapProtocol", (GuardedProtocol,), {"read_timeout": read_timeout})


def build(target: Any, cfg: IdapConfig, *, site: str | None = None,
          users: Users | None = None) -> IdapApp:
    """The ASGI app for a pipeline configuration (or a bare state store) and its config."""
    users = users or Users(cfg)
    service = Service(target, cfg, users, site)
    notifier = Notifier(service.store, cfg)
    qmon = TimeManager(service.store, cfg.time_manager)

    def start() -> None:
        notifier.start()
        qmon.start()

    def stop() -> None:
        qmon.stop()
        notifier.stop()

    app = IdapApp(service, cfg, users,
                  SessionManager(idle_timeout=cfg.idle_timeout, max_sessions=cfg.max_sessions),
                  on_start=start, on_stop=stop)
    app.notifier, app.time_manager = notifier, qmon  # type: ignore[attr-defined]
    return app


class TimeManager:
    """The time manager's thread of a running service (expired messages move while it runs),
    and the spill of its buffered messages when it stops.

    Args:
        interval: seconds between passes; 0 runs none (another process runs it).
    """

    def __init__(self, store: Any, interval: float) -> None:
        self.store = store
        self.interval = interval
        self._stop: threading.Event | None = None

    def start(self) -> None:
        """Start the passes (nothing when the interval is 0)."""
        from changeflow.messaging.timemanager import start_background

        if self.interval > 0 and self._stop is None:
            self._stop = start_background([self.store], self.interval)

    def stop(self) -> None:
        """Stop the passes, and spill the service's buffered messages (a clean stop keeps
        them: :func:`changeflow.messaging.buffered.spill_all`)."""
        from changeflow.messaging import buffered

        if self._stop is not None:
            self._stop.set()
            self._stop = None
        try:
            buffered.spill_all(self.store)
        except Exception:  # noqa: BLE001 (stopping: report, and let the rest stop)
            log.exception("buffered messages of %s could not be spilled", self.store.safe_url)


def uvicorn_config(app: IdapApp, cfg: IdapConfig, *, host: str | None = None,
                   port: int | None = None) -> uvicorn.Config:
    """uvicorn's configuration: the guarded protocol, TLS when configured, no access log."""
    tls: dict[str, Any] = {}
    if cfg.tls is not None:
        import os

        tls = {"ssl_certfile": cfg.tls.cert_file, "ssl_keyfile": cfg.tls.key_file,
               "ssl_keyfile_password": os.environ.get(cfg.tls.key_password_env or "") or None}
        if cfg.tls.client_ca_file:
            tls.update(ssl_ca_certs=cfg.tls.client_ca_file, ssl_cert_reqs=ssl.CERT_OPTIONAL)
    return uvicorn.Config(
        app, host=host or cfg.host, port=cfg.port if port is None else port,
        http=protocol_class(cfg.read_timeout), loop="uvloop", lifespan="on",
        timeout_keep_alive=int(max(1, cfg.keep_alive)), access_log=False,
        log_level="warning", server_header=False, **tls)


def serve(target: Any, cfg: IdapConfig, *, site: str | None = None, host: str | None = None,
          port: int | None = None) -> None:
    """Run the service in the foreground until interrupted (``changeflow serve``)."""
    app = build(target, cfg, site=site)
    config = uvicorn_config(app, cfg, host=host, port=port)
    sys.setswitchinterval(SWITCH_INTERVAL)
    gc.collect()
    gc.freeze()
    uvicorn.Server(config).run()


@dataclass
class Running:
    """A service running in a background thread."""

    url: str
    app: IdapApp
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        """Stop serving (open sessions are rolled back)."""
        self.server.should_exit = True
        self.thread.join(timeout=30)


@contextlib.contextmanager
def running(target: Any, cfg: IdapConfig, *, site: str | None = None,
            users: Users | None = None, port: int = 0) -> Iterator[Running]:
    """Serve in a background thread (a free port by default); yields the endpoint's URL."""
    app = build(target, cfg, site=site, users=users)
    server = uvicorn.Server(uvicorn_config(app, cfg, port=port))
    thread = threading.Thread(target=server.run, name="idap-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the IDAP server did not start (see the log)")
        time.sleep(0.02)
    sock = server.servers[0].sockets[0].getsockname()
    scheme = "https" if cfg.tls is not None else "http"
    run = Running(f"{scheme}://{sock[0]}:{sock[1]}{cfg.path}", app, server, thread)
    try:
        yield run
    finally:
        run.stop()
