"""The IDAP endpoint as an ASGI application (served by uvicorn, :mod:`.server`).

``POST {path}`` takes a SOAP 1.1 envelope (``Content-Type: text/xml``) with HTTP basic
authentication (or a verified client certificate) and answers ``200`` with the
response envelope, or ``500`` with a SOAP Fault (SOAP 1.1's status for faults).
Problems of the HTTP exchange itself are HTTP errors with a one-line text body naming
the problem: 401 (no or wrong credentials), 404, 405, 408 (the body did not arrive
within ``read_timeout``), 413 (over ``max_body_bytes``, refused before it is read), 415
(not XML), 503 (too many sessions). ``GET {path}?wsdl`` serves the WSDL.

The parse, the session lookup and the operation run in a worker thread (a pool of
``threads``), one request of a session at a time; the event loop only moves bytes.

The event loop is one thread for every connection, so each request's work on it
queues all the others (and holds the GIL): it is kept to the HTTP checks. The worker
pool is a plain :class:`~concurrent.futures.ThreadPoolExecutor` handed to
``loop.run_in_executor`` (anyio's ``to_thread`` costs several times as much on the loop
per call: a capacity limiter, cancel scopes, task lookups), the body's deadline is one
timer for the whole body, and the session cookie is picked out of the ``Cookie``
header without ``http.cookies``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from changeflow.idap.auth import Users, basic_credentials
from changeflow.idap.config import IdapConfig
from changeflow.idap.errors import IdapError, fault_of
from changeflow.idap.parse import parse_envelope
from changeflow.idap.render import envelope, fault
from changeflow.idap.service import Service
from changeflow.idap.sessions import COOKIE, SessionManager, TooManySessionsError

log = logging.getLogger(__name__)
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
XML_TYPES = ("text/xml", "application/soap+xml", "application/xml")


class HttpError(Exception):
    """An HTTP-level refusal: a status and a one-line reason."""

    def __init__(self, status: int, reason: str, headers: list[tuple[bytes, bytes]] | None = None):
        super().__init__(reason)
        self.status = status
        self.headers = headers or []


class IdapApp:
    """The ASGI app: authentication, limits, sessions, and the :class:`Service`.

    Args:
        on_start, on_stop: called at the ASGI lifespan's start-up and shutdown (the
            notifier's thread, for instance).
    """

    def __init__(self, service: Service, cfg: IdapConfig, users: Users,
                 sessions: SessionManager | None = None, *,
                 on_start: Callable[[], None] | None = None,
                 on_stop: Callable[[], None] | None = None) -> None:
        self.service = service
        self.cfg = cfg
        self.users = users
        self.sessions = sessions or SessionManager(idle_timeout=cfg.idle_timeout,
                                                   max_sessions=cfg.max_sessions)
        self.pool = ThreadPoolExecutor(max_workers=cfg.threads, thread_name_prefix="idap")
        self._on_start, self._on_stop = on_start, on_stop
        self.requests = 0
        self.faults = 0

    # -- ASGI --------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            status, headers, body = await self._http(scope, receive)
        except HttpError as exc:
            status, headers = exc.status, exc.headers
            body = (str(exc) + "\n").encode()
            headers = [(b"content-type", b"text/plain; charset=utf-8"), *headers]
            if status in (408, 413):
                headers.append((b"connection", b"close"))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self.start()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def start(self) -> None:
        """Start the session reaper (and the ``on_start`` hook)."""
        self.sessions.start()
        if self._on_start:
            self._on_start()

    def stop(self) -> None:
        """Roll back every open session and stop the background threads."""
        if self._on_stop:
            self._on_stop()
        self.sessions.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    # -- one exchange ------------------------------------------------------------------------
    async def _http(self, scope: Scope, receive: Receive
                    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if scope["path"].rstrip("/") != self.cfg.path.rstrip("/"):
            raise HttpError(404, f"no such endpoint {scope['path']}; IDAP is served at "
                                 f"{self.cfg.path}")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope["headers"]}
        if scope["method"] == "GET":
            return self._get(scope, headers)
        if scope["method"] != "POST":
            raise HttpError(405, f"{scope['method']} is not allowed: POST SOAP requests "
                                 "(GET ?wsdl for the WSDL)", [(b"allow", b"GET, POST")])
        agent = self._authenticate(scope, headers)
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.cfg.max_body_bytes):
            raise HttpError(413, f"the request body is {length} bytes; the limit is "
                                 f"{self.cfg.max_body_bytes} (idap.max_body_bytes)")
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype not in XML_TYPES:
            raise HttpError(415, f"Content-Type {ctype or 'none'!r}: IDAP requests are "
                                 "text/xml (SOAP 1.1)")
        body = await self._body(receive)
        cookie = _cookie(headers.get("cookie"))
        self.requests += 1
        return await asyncio.get_running_loop().run_in_executor(
            self.pool, self._run, body, cookie, agent, scope.get("scheme") == "https")

    def _get(self, scope: Scope, headers: dict[str, str]
             ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        query = scope.get("query_string", b"").decode("latin-1").lower()
        if query.split("&")[0].split("=")[0] == "wsdl":
            from changeflow.idap.wsdl import wsdl_document

            host = headers.get("host") or f"{self.cfg.host}:{self.cfg.port}"
            url = f"{scope.get('scheme', 'http')}://{host}{self.cfg.path}"
            return 200, [(b"content-type", b"text/xml; charset=utf-8")], wsdl_document(url)
        text = (f"changeflow IDAP endpoint: POST SOAP 1.1 requests (text/xml) to {self.cfg.path}"
                f"; the WSDL is at {self.cfg.path}?wsdl\n").encode()
        return 200, [(b"content-type", b"text/plain; charset=utf-8")], text

    def _authenticate(self, scope: Scope, headers: dict[str, str]) -> str:
        cert = (scope.get("extensions") or {}).get("tls", {}).get("client_cert_name")
        if cert:
            return str(cert)
        creds = basic_credentials(headers.get("authorization"))
        agent = self.users.check(*creds) if creds else None
        if agent is None:
            why = "wrong user name or password" if creds else \
                "authentication required (HTTP basic, or a client certificate)"
            raise HttpError(401, why, [(b"www-authenticate",
                                        b'Basic realm="changeflow AQ", charset="UTF-8"')])
        return agent

    async def _body(self, receive: Receive) -> bytes:
        try:
            async with asyncio.timeout(self.cfg.read_timeout):
                return await self._chunks(receive)
        except TimeoutError:
            raise HttpError(408, f"the request body did not arrive within "
                                 f"{self.cfg.read_timeout:g} s (idap.read_timeout)") from None

    async def _chunks(self, receive: Receive) -> bytes:
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise HttpError(400, "the client disconnected")
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.cfg.max_body_bytes:
                raise HttpError(413, f"the request body is over {self.cfg.max_body_bytes} bytes "
                                     "(idap.max_body_bytes)")
            chunks.append(chunk)
            if not msg.get("more_body"):
                return b"".join(chunks)

    def _run(self, body: bytes, cookie: str | None, agent: str, tls: bool
             ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Parse, find the session, run the request (in a worker thread)."""
        xml = [(b"content-type", b"text/xml; charset=utf-8")]
        try:
            env = parse_envelope(body)
            session, created = self._session(cookie, agent)
        except TooManySessionsError as exc:
            raise HttpError(503, str(exc)) from None
        except IdapError as exc:
            return self._fault(exc, xml)
        self.sessions.begin(session)
        header = None
        try:
            with session.lock:
                out = self.service.handle(env, session)
                header, session.reply_header = session.reply_header, None
        except Exception as exc:  # noqa: BLE001  (every failure becomes a Fault)
            if created and not session.in_transaction:
                self.sessions.discard(session)
                return self._fault(exc, xml)
            return self._fault(exc, [*xml, _set_cookie(session.cookie, tls)])
        finally:
            self.sessions.end(session)
        return 200, [*xml, _set_cookie(session.cookie, tls)], envelope(out, header=header)

    def _session(self, cookie: str | None, agent: str) -> tuple[Any, bool]:
        found = self.sessions.get(cookie, agent)
        return found, found.cookie != cookie

    def _fault(self, exc: BaseException, headers: list[tuple[bytes, bytes]]
               ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        f = fault_of(exc)
        self.faults += 1
        if f.side == "Server":
            log.error("IDAP request failed: %s", f.message, exc_info=exc)
        else:
            log.info("IDAP request refused (%s): %s", f.code, f.message)
        return 500, headers, fault(f)


def _cookie(header: str | None) -> str | None:
    """The session cookie's value in a ``Cookie`` header (the first, as browsers send it).

    >>> _cookie('a=1; JSESSIONID="x.1.sig"; b=2'), _cookie("JSESSIONIDX=1"), _cookie(None)
    ('x.1.sig', None, None)
    """
    if not header:
        return None
    for part in header.split(";"):
        name, sep, value = part.partition("=")
        if sep and name.strip() == COOKIE:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            return value or None
    return None


def _set_cookie(value: str, tls: bool) -> tuple[bytes, bytes]:
    flags = "; Path=/; HttpOnly; SameSite=Strict" + ("; Secure" if tls else "")
    return b"set-cookie", f"{COOKIE}={value}{flags}".encode()
