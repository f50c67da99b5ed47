"""Delivering ``AQXmlNotification`` to registered URLs: HTTP POST, or mail for ``mailto:``.

After ``AQXmlRegister`` (stored by :func:`changeflow.messaging.notify.register`), each
message committed for the registered queue and consumer, by any process, is announced:
the :class:`Notifier` polls ``cf_aq_messages`` for rows newer than the last it saw on
registered queues (woken at once by commits in this process), and sends one
notification per registration and poll: ``notification_options`` (``destination``,
``consumer_name``) and the ``message_set`` of the messages' properties (their
``message_header``; the payload stays in the queue). ``http(s)://`` URLs receive a
POST of the SOAP envelope; ``mailto:`` addresses a mail through the SMTP server of
``idap.mail``.

Delivery never blocks an enqueue: it happens in the notifier's own threads. A receiver
that is down is retried with exponential backoff (``retry_initial`` doubling up to
``retry_max`` seconds), up to ``max_attempts`` times, then the notification is dropped
with an error in the log. Notifications are not persisted: one in flight when the
server stops is lost (the messages themselves are not).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import smtplib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any
from xml.etree.ElementTree import Element, SubElement

from sqlalchemy import select

from changeflow.idap.config import IdapConfig
from changeflow.idap.messages import message_set_element
from changeflow.idap.render import envelope
from changeflow.idap.xmlns import q
from changeflow.messaging import notify as N
from changeflow.messaging.dequeue import from_row
from changeflow.state import StateStore
from changeflow.state import schema_messaging as S

log = logging.getLogger(__name__)
M = S.messages
LOOKBACK = 500  # ids below the watermark re-read: a transaction may commit out of id order


@dataclass(order=True)
class Delivery:
    """One notification to send (ordered by when it is due)."""

    due: float
    serial: int
    url: str = field(compare=False)
    queue: str = field(compare=False)
    body: bytes = field(compare=False)
    attempt: int = field(default=1, compare=False)


def notification(queue: str, consumer: str, msgs: list[Any]) -> bytes:
    """The ``AQXmlNotification`` envelope for messages of a queue and consumer."""
    el = Element(q("AQXmlNotification"))
    opts = SubElement(el, q("notification_options"))
    SubElement(opts, q("destination")).text = queue
    if consumer:
        SubElement(opts, q("consumer_name")).text = consumer
    message_set_element(el, msgs, payloads=False)
    return envelope(el)


class Notifier:
    """Watches registered queues and delivers notifications (see the module docstring)."""

    def __init__(self, store: StateStore, cfg: IdapConfig) -> None:
        self.store = store
        self.cfg = cfg
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._heap: list[Delivery] = []
        self._heap_lock = threading.Lock()
        self._serial = itertools.count()
        self._watermark: int | None = None
        self._seen: dict[int, None] = {}
        self._regs: tuple[float, list[N.Registration]] = (0.0, [])
        self._threads: list[threading.Thread] = []
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="idap-notify-send")
        self.sent = self.failed = self.dropped = 0

    # -- watching ------------------------------------------------------------------------------
    def _listener(self, url: str, queue: str, ids: list[str]) -> None:
        if url == self.store.url:
            self._wake.set()

    def registrations(self) -> list[N.Registration]:
        """The stored registrations (re-read at most once a second)."""
        at, regs = self._regs
        if time.monotonic() - at > 1.0:
            regs = N.registrations(self.store)
            self._regs = (time.monotonic(), regs)
        return regs

    def poll(self) -> int:
        """Queue notifications for the messages committed since the last poll.

        Without any registration nothing is read (the registrations themselves are
        re-read at most once a second): the poller wakes on every commit of this
        process, and a read transaction per commit would cost the service's requests
        their time on the GIL and a pooled connection each.
        """
        if self._watermark is not None and not self.registrations():
            return 0
        with self.store.read() as conn:
            if self._watermark is None:
                self._watermark = int(conn.execute(select(M.c.id).order_by(M.c.id.desc())
                                                   .limit(1)).scalar() or 0)
                return 0
            regs = self.registrations()
            if not regs:
                return 0
            queues = sorted({r.queue for r in regs})
            rows = conn.execute(select(M).where(
                M.c.id > self._watermark - LOOKBACK, M.c.queue.in_(queues),
                M.c.address == "").order_by(M.c.id)).all()
        fresh = [r for r in rows if r.id not in self._seen]
        for r in fresh:
            self._seen[r.id] = None
            self._watermark = max(self._watermark, r.id)
        while len(self._seen) > 10 * LOOKBACK:
            self._seen.pop(next(iter(self._seen)))
        queued = 0
        for reg in regs:
            mine = [from_row(r, None) for r in fresh if r.queue == reg.queue
                    and (r.consumer == reg.consumer or not reg.consumer)]
            if mine:
                self._push(Delivery(time.monotonic(), next(self._serial), reg.notify_url,
                                    reg.queue, notification(reg.queue, reg.consumer, mine)))
                queued += 1
        return queued

    def _push(self, d: Delivery) -> None:
        with self._heap_lock:
            heapq.heappush(self._heap, d)

    # -- sending -------------------------------------------------------------------------------
    def deliver(self, d: Delivery) -> None:
        """Send one notification; on failure schedule the next attempt (or drop it)."""
        try:
            if d.url.lower().startswith("mailto:"):
                self._mail(d)
            else:
                self._post(d)
            self.sent += 1
        except Exception as exc:  # noqa: BLE001  (any failure is retried with backoff)
            self.failed += 1
            if d.attempt >= self.cfg.notify.max_attempts:
                self.dropped += 1
                log.error("notification for %s to %s dropped after %d attempts: %s", d.queue,
                          d.url, d.attempt, exc)
                return
            wait = min(self.cfg.notify.retry_max,
                       self.cfg.notify.retry_initial * 2 ** (d.attempt - 1))
            log.warning("notification for %s to %s failed (attempt %d, next in %.1f s): %s",
                        d.queue, d.url, d.attempt, wait, exc)
            self._push(Delivery(time.monotonic() + wait, next(self._serial), d.url, d.queue,
                                d.body, d.attempt + 1))
            self._wake.set()

    def _post(self, d: Delivery) -> None:
        import httpx

        resp = httpx.post(d.url, content=d.body, timeout=self.cfg.notify.timeout,
                          headers={"Content-Type": "text/xml; charset=utf-8",
                                   "SOAPAction": '"http://ns.oracle.com/AQ/schemas/access#'
                                                 'AQXmlNotification"'})
        if resp.status_code >= 300:
            raise RuntimeError(f"HTTP {resp.status_code} from {d.url}")

    def _mail(self, d: Delivery) -> None:
        import os

        mc = self.cfg.mail
        to = d.url.split(":", 1)[1].lstrip("/")
        msg = EmailMessage()
        msg["Subject"] = f"AQ notification: {d.queue}"
        msg["From"], msg["To"] = mc.sender, to
        msg.set_content(d.body.decode("utf-8"), subtype="xml")
        with smtplib.SMTP(mc.host, mc.port, timeout=mc.timeout) as smtp:
            if mc.starttls:
                smtp.starttls()
            if mc.username_env:
                smtp.login(os.environ.get(mc.username_env, ""),
                           os.environ.get(mc.password_env or "", ""))
            smtp.send_message(msg)

    def _due(self) -> list[Delivery]:
        now = time.monotonic()
        out = []
        with self._heap_lock:
            while self._heap and self._heap[0].due <= now:
                out.append(heapq.heappop(self._heap))
        return out

    def _next_due(self) -> float:
        with self._heap_lock:
            return self._heap[0].due - time.monotonic() if self._heap else float("inf")

    # -- lifecycle -----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # noqa: BLE001  (a store outage must not kill the notifier)
                log.exception("notifier poll")
            for d in self._due():
                self._pool.submit(self.deliver, d)
            wait = min(self.cfg.notify.poll_interval, max(0.0, self._next_due()))
            self._wake.wait(wait)
            self._wake.clear()

    def start(self) -> None:
        """Start watching (and listen to this process's commits)."""
        N.add_listener(self._listener)
        t = threading.Thread(target=self._loop, name="idap-notifier", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        """Stop watching and sending."""
        N.remove_listener(self._listener)
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
