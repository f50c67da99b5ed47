"""HTTP sessions: a signed cookie carries one open messaging transaction (seed 003).

The first request of a client opens an HTTP session and, implicitly, a transaction;
the response sets the cookie ``JSESSIONID``. Requests that send the cookie back join
the same transaction until an ``AQXmlCommit`` or ``AQXmlRollback``. A session idle for
``idle_timeout`` seconds (120 by default) is rolled back by the reaper thread: its
enqueues vanish and the messages it dequeued return to their queues.

The cookie is ``<session id>.<issued>.<signature>``: an HMAC-SHA256, with a key drawn
when the server starts, over the id, the time it was issued and the agent it belongs
to. A cookie that does not verify (forged, another agent's, or issued by an earlier run
of the server) is refused, and so is one naming a session that was rolled back for
idleness: the client learns that its transaction is gone instead of silently starting a
new one.

A session holds one messaging session per database user it acted as (the agent maps to
users, see :mod:`changeflow.idap.auth`); commit and rollback apply to all of them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from changeflow.errors import TransientError
from changeflow.idap.errors import SessionExpiredError, SessionForgedError

log = logging.getLogger(__name__)
COOKIE = "JSESSIONID"
#: How long a rolled-back session's id is remembered (to say why its cookie is refused).
TOMBSTONE_SECONDS = 24 * 3600.0
MAX_TOMBSTONES = 10_000


class TooManySessionsError(TransientError):
    """The service holds ``max_sessions`` open sessions already (HTTP 503)."""


@dataclass
class HttpSession:
    """One client's session: its agent, its messaging sessions, its activity."""

    id: str
    agent: str
    cookie: str
    last_active: float = field(default_factory=time.monotonic)
    busy: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    sessions: dict[str, Any] = field(default_factory=dict)  # db user -> messaging Session
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. a propagated batch in progress
    reply_header: Any = None  # an element for the next response's SOAP Header

    @property
    def in_transaction(self) -> bool:
        """Whether anything is uncommitted."""
        return any(s.in_transaction for s in self.sessions.values()) or bool(self.extra)

    def commit(self) -> None:
        """Commit every messaging session of the HTTP session."""
        for s in self.sessions.values():
            s.commit()

    def rollback(self) -> None:
        """Roll back every messaging session (and anything else pending)."""
        self.extra.clear()
        errors = []
        for s in self.sessions.values():
            try:
                s.rollback()
            except Exception as exc:  # noqa: BLE001  (roll back the others, then raise)
                errors.append(exc)
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Roll back and close every messaging session."""
        self.extra.clear()
        for s in self.sessions.values():
            try:
                s.close()
            except Exception:  # noqa: BLE001  (closing must go on; the locks lapse anyway)
                log.exception("closing messaging session %s", s.id)
        self.sessions.clear()


class SessionManager:
    """The open sessions, their cookies, and the idle reaper.

    Args:
        idle_timeout: seconds of inactivity before a transaction is rolled back.
        max_sessions: the most sessions open at once.
    """

    def __init__(self, *, idle_timeout: float, max_sessions: int = 1000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self._key = secrets.token_bytes(32)
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[str, HttpSession] = {}
        self._dead: OrderedDict[str, tuple[float, str, bool]] = OrderedDict()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rolled_back = 0

    # -- cookies -----------------------------------------------------------------------------
    def _sign(self, sid: str, issued: int, agent: str) -> str:
        mac = hmac.new(self._key, f"{sid}.{issued}.{agent.upper()}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()[:24]).decode().rstrip("=")

    def _cookie(self, sid: str, agent: str) -> str:
        issued = int(time.time())
        return f"{sid}.{issued}.{self._sign(sid, issued, agent)}"

    def _verify(self, cookie: str, agent: str) -> str:
        parts = cookie.split(".")
        if len(parts) == 3 and parts[1].isdigit():
            sid, issued, sig = parts
            if hmac.compare_digest(sig, self._sign(sid, int(issued), agent)):
                return sid
        raise SessionForgedError(
            f"session cookie {COOKIE} does not verify for agent {agent} (forged, another "
            "agent's, or issued by an earlier run of the server); nothing was done: send the "
            "request without the cookie to open a new session")

    # -- sessions ----------------------------------------------------------------------------
    def get(self, cookie: str | None, agent: str) -> HttpSession:
        """The session a request joins (a new one when it sent no cookie).

        Raises:
            SessionForgedError: the cookie does not verify.
            SessionExpiredError: it names a session rolled back for idleness.
            TooManySessionsError: no room for a new session.
        """
        with self._lock:
            if cookie:
                sid = self._verify(cookie, agent)
                found = self._live.get(sid)
                if found is not None:
                    found.last_active = self._clock()
                    return found
                dead = self._dead.get(sid)
                if dead is not None and dead[2]:  # rolled back with work pending
                    raise SessionExpiredError(
                        f"session {sid}: {dead[1]}; send the request without the cookie to "
                        "open a new session")
            if len(self._live) >= self.max_sessions and not self._evict_clean():
                raise TooManySessionsError(
                    f"{len(self._live)} sessions are open (idap.max_sessions); retry later")
            sid = secrets.token_urlsafe(18).replace(".", "_")
            s = HttpSession(sid, agent, self._cookie(sid, agent), self._clock())
            self._live[sid] = s
            return s

    def _evict_clean(self) -> bool:
        """Drop the least recently used session holding no transaction (under the lock)."""
        for s in sorted(self._live.values(), key=lambda x: x.last_active):
            if s.busy or not s.lock.acquire(blocking=False):
                continue
            try:
                if s.in_transaction:
                    continue
                self._live.pop(s.id, None)
                s.close()
                return True
            finally:
                s.lock.release()
        return False

    def discard(self, s: HttpSession) -> None:
        """Forget a session that was just opened by a refused request (nothing pending)."""
        with self._lock:
            self._live.pop(s.id, None)
        s.close()

    def begin(self, s: HttpSession) -> None:
        """Mark a request in progress (the reaper leaves the session alone)."""
        with self._lock:
            s.busy += 1
            s.last_active = self._clock()

    def end(self, s: HttpSession) -> None:
        """A request finished: the idle time starts now."""
        with self._lock:
            s.busy -= 1
            s.last_active = self._clock()

    def __len__(self) -> int:
        return len(self._live)

    # -- idle rollback -------------------------------------------------------------------------
    def reap(self) -> int:
        """Roll back the sessions idle longer than ``idle_timeout``. Returns how many."""
        now = self._clock()
        with self._lock:
            idle = [s for s in self._live.values()
                    if not s.busy and now - s.last_active >= self.idle_timeout]
        done = 0
        for s in idle:
            if not s.lock.acquire(blocking=False):
                continue
            try:
                with self._lock:
                    if s.busy or self._clock() - s.last_active < self.idle_timeout:
                        continue
                    self._live.pop(s.id, None)
                pending = s.in_transaction
                s.close()
                why = (f"its transaction was rolled back after {self.idle_timeout:g} s without "
                       "a request (enqueues discarded, dequeued messages returned)")
                self._bury(s.id, why, pending)
                if pending:
                    log.warning("IDAP session %s of %s: %s", s.id, s.agent, why)
                    self.rolled_back += 1
                done += 1
            finally:
                s.lock.release()
        return done

    def _bury(self, sid: str, why: str, pending: bool) -> None:
        with self._lock:
            self._dead[sid] = (time.time(), why, pending)
            while len(self._dead) > MAX_TOMBSTONES:
                self._dead.popitem(last=False)
            horizon = time.time() - TOMBSTONE_SECONDS
            while self._dead and next(iter(self._dead.values()))[0] < horizon:
                self._dead.popitem(last=False)

    def start(self) -> None:
        """Start the reaper thread (checks every ``min(1, idle_timeout / 4)`` seconds)."""
        if self._thread is not None:
            return
        every = min(1.0, self.idle_timeout / 4)

        def loop() -> None:
            while not self._stop.wait(every):
                try:
                    self.reap()
                except Exception:  # noqa: BLE001  (the reaper must survive a store outage)
                    log.exception("IDAP session reaper")

        self._thread = threading.Thread(target=loop, name="idap-session-reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the reaper and roll back every open session."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            live = list(self._live.values())
            self._live.clear()
        for s in live:
            s.close()
