"""The process monitor: "detecting events that didn't happen" (seed 004, reference 5).

Listeners mark that they are alive; a check alerts when one has not marked for longer
than it should. A mark is a write, so it is throttled in the marking process: at most
one per ``mark_interval`` (default five minutes, the seed's figure), whatever the poll
rate. Every ``get_changes`` of a :class:`~changeflow.mcq.consume.Worker` marks its
listener; any other process (a nightly push job) calls :func:`mark_process` itself.

How long a process may stay silent (``alert_after``): the listener's own setting, or
by default its expected gap between marks (``max(frequency, mark_interval)``) plus
half of that (at least a minute). The check (:func:`check`; ``changeflow mcq monitor``
and the ``changeflow_mcq__monitor`` DAG) alerts through the pipeline's alert channels
(email, webhook, Slack) once per silence, and sends a *recovered* notice when the
process marks again.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from changeflow.errors import StateStoreError
from changeflow.mcq.config import DEFAULT_MARK_INTERVAL
from changeflow.mcq.model import aware
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import listeners, process_monitor

if TYPE_CHECKING:
    from changeflow.config import AlertsConfig
    from changeflow.state import StateStore

log = logging.getLogger(__name__)
P, L = process_monitor, listeners
SILENT, RECOVERED = "process_silent", "process_recovered"


def default_alert_after(frequency: float, mark_interval: float = DEFAULT_MARK_INTERVAL) -> float:
    """The silence after which a listener is reported: its expected gap plus half of it.

    >>> default_alert_after(5), default_alert_after(86400)
    (450.0, 129600.0)
    """
    gap = max(frequency, mark_interval)
    return gap + max(60.0, gap / 2)


def write_mark(store: StateStore, proc: str, *, listener: str | None = None,
               expect_every: float = DEFAULT_MARK_INTERVAL,
               alert_after: float | None = None) -> dt.datetime:
    """Record that a process is alive now (unthrottled; see :class:`Marker`)."""
    now = utcnow()
    who = f"{socket.gethostname()}:{os.getpid()}"
    after = alert_after or default_alert_after(expect_every)
    for _ in range(2):
        try:
            with store.begin() as conn:
                n = conn.execute(update(P).where(P.c.proc == proc).values(
                    last_mark=now, marked_by=who, marks=P.c.marks + 1)).rowcount
                if not n:
                    conn.execute(P.insert().values(
                        proc=proc, listener=listener, expect_every=expect_every,
                        alert_after=after, last_mark=now, marked_by=who, marks=1,
                        registered_at=now))
            return now
        except IntegrityError:  # another worker inserted the row first: update it
            continue
    return now


class Marker:
    """A throttled mark: writes at most once per ``interval`` seconds.

    Args:
        store: the MCQ's state store.
        proc: the process name (a listener's ``proc_name`` for listeners).
        interval: seconds between two real writes.
        listener: the listener it belongs to, if any.
        expect_every: how often the process is expected to mark (seconds).
        alert_after: its silence limit (default from ``expect_every``).
    """

    def __init__(self, store: StateStore, proc: str, *, interval: float = DEFAULT_MARK_INTERVAL,
                 listener: str | None = None, expect_every: float | None = None,
                 alert_after: float | None = None):
        self.store = store
        self.proc = proc
        self.interval = interval
        self.listener = listener
        self.expect_every = expect_every or interval
        self.alert_after = alert_after
        self.last: float | None = None
        self.writes = 0

    def mark(self, force: bool = False) -> bool:
        """Mark alive unless a mark was written less than ``interval`` ago.

        Returns:
            whether a mark was written. A failed write is logged, never raised: a
            listener must not stop because its monitor row could not be written.
        """
        now = time.monotonic()
        if not force and self.last is not None and now - self.last < self.interval:
            return False
        try:
            write_mark(self.store, self.proc, listener=self.listener,
                       expect_every=self.expect_every, alert_after=self.alert_after)
        except StateStoreError as exc:
            log.warning("process monitor: mark of %s failed: %s", self.proc, exc)
            return False
        self.last = now
        self.writes += 1
        return True


def mark_process(store: StateStore, proc: str, *, expect_every: float,
                 alert_after: float | None = None) -> dt.datetime:
    """Mark a process that is not a listener (e.g. ``Insite-Push_People``) alive now."""
    return write_mark(store, proc, expect_every=expect_every, alert_after=alert_after)


@dataclass(frozen=True)
class MonitorAlert:
    """A process that went silent, or came back."""

    event: str
    proc: str
    listener: str | None
    last_mark: dt.datetime | None
    silent_for: float | None
    alert_after: float
    at: dt.datetime

    @property
    def propagation(self) -> str:
        """The subject's name (the alert channels log it under this attribute)."""
        return self.proc

    @property
    def subject(self) -> str:
        """One line, the email subject."""
        if self.event == RECOVERED:
            return f"[changeflow] MCQ process {self.proc} is marking again"
        if self.last_mark is None:
            return f"[changeflow] MCQ process {self.proc} has never marked that it is alive"
        return (f"[changeflow] MCQ process {self.proc} silent for "
                f"{int(self.silent_for or 0)} s (limit {int(self.alert_after)} s)")

    @property
    def error(self) -> str:
        """What is wrong, in a sentence."""
        return self.subject.removeprefix("[changeflow] ")

    @property
    def text(self) -> str:
        """The alert body."""
        last = self.last_mark.isoformat() if self.last_mark else "never"
        lines = [self.subject, "", f"time: {self.at.isoformat()}", f"last mark: {last}",
                 f"alert after: {int(self.alert_after)} s of silence"]
        if self.listener:
            lines.append(f"listener: {self.listener} (changeflow mcq status; "
                         f"changeflow mcq listen {self.listener})")
        return "\n".join(lines)

    def payload(self) -> dict[str, Any]:
        """The webhook's JSON body."""
        return {"event": self.event, "proc": self.proc, "listener": self.listener,
                "last_mark": self.last_mark.isoformat() if self.last_mark else None,
                "silent_for": self.silent_for, "alert_after": self.alert_after,
                "at": self.at.isoformat(), "summary": self.subject}


def notify(cfg: AlertsConfig, alert: MonitorAlert) -> dict[str, str]:
    """Send an alert through every configured channel (schedules' email/webhook/Slack).

    Returns:
        ``{channel: "sent" | "error: ..."}``; a failing channel never raises.
    """
    from changeflow.schedules import alerts as channels

    shaped = cast("channels.Alert", alert)  # the channels read subject, text and payload()
    sends = []
    if cfg.email is not None:
        email = cfg.email
        sends.append(("email", lambda: channels.send_email(email, shaped, cfg.timeout)))
    if cfg.webhook_url:
        url = cfg.webhook_url
        sends.append(("webhook", lambda: channels.send_webhook(url, shaped, cfg.timeout)))
    if cfg.slack_conn_id:
        conn_id = cfg.slack_conn_id
        sends.append(("slack", lambda: channels.send_slack(conn_id, shaped)))
    log.warning("alert: %s", alert.subject)
    out: dict[str, str] = {}
    for name, send in sends:
        try:
            send()
            out[name] = "sent"
        except Exception as exc:  # noqa: BLE001 (an alert channel must never crash the check)
            log.error("alert channel %s failed for %s: %s", name, alert.proc, exc)
            out[name] = f"error: {exc}"
    return out


def _ensure_listener_rows(conn: Any, now: dt.datetime, mark_interval: float) -> None:
    have = set(conn.execute(select(P.c.proc)).scalars())
    for row in conn.execute(select(L.c.proc_name, L.c.frequency, L.c.alert_after,
                                   L.c.created_at)):
        after = row.alert_after or default_alert_after(row.frequency, mark_interval)
        if row.proc_name not in have:
            conn.execute(P.insert().values(proc=row.proc_name, listener=row.proc_name,
                                           expect_every=max(row.frequency, mark_interval),
                                           alert_after=after,
                                           registered_at=aware(row.created_at) or now, marks=0))
        else:
            conn.execute(update(P).where(P.c.proc == row.proc_name).values(
                listener=row.proc_name, alert_after=after,
                expect_every=max(row.frequency, mark_interval)))


def due(store: StateStore, now: dt.datetime | None = None,
        mark_interval: float = DEFAULT_MARK_INTERVAL) -> list[MonitorAlert]:
    """The alerts a check would send now, and record them as sent."""
    now = now or utcnow()
    out: list[MonitorAlert] = []
    with store.begin() as conn:
        _ensure_listener_rows(conn, now, mark_interval)
        for r in conn.execute(select(P).where(P.c.enabled.is_(True))).all():
            last, alerted = aware(r.last_mark), aware(r.alerted_at)
            since = last or aware(r.registered_at)
            assert since is not None
            silent = (now - since).total_seconds()
            before = aware(r.alerted_mark)
            if alerted is not None and last is not None and (before is None or last > before):
                out.append(MonitorAlert(RECOVERED, r.proc, r.listener, last, None,
                                        r.alert_after, now))
                conn.execute(update(P).where(P.c.proc == r.proc).values(
                    alerted_at=None, alerted_mark=None))
                alerted = None
            if silent > r.alert_after and alerted is None:
                out.append(MonitorAlert(SILENT, r.proc, r.listener, last,
                                        round(silent, 1), r.alert_after, now))
                conn.execute(update(P).where(P.c.proc == r.proc).values(
                    alerted_at=now, alerted_mark=last))
    return out


def check(store: StateStore, alerts: AlertsConfig, *, now: dt.datetime | None = None,
          mark_interval: float = DEFAULT_MARK_INTERVAL) -> list[dict[str, Any]]:
    """Alert on every process that went silent (once per silence) or came back.

    Returns:
        one row per alert: the alert's payload and where it was sent.
    """
    sent = []
    for alert in due(store, now, mark_interval):
        sent.append({**alert.payload(), "channels": notify(alerts, alert)})
    return sent


def status(store: StateStore, now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Every monitored process: last mark, silence so far, limit, whether it is alerted."""
    now = now or utcnow()
    with store.read() as conn:
        rows = conn.execute(select(P).order_by(P.c.proc)).all()
    out = []
    for r in rows:
        last = aware(r.last_mark)
        since = last or aware(r.registered_at)
        assert since is not None
        silent = (now - since).total_seconds()
        out.append({"proc": r.proc, "listener": r.listener, "last_mark": last,
                    "marks": r.marks, "marked_by": r.marked_by, "silent_for": round(silent, 1),
                    "alert_after": r.alert_after, "late": silent > r.alert_after,
                    "alerted": r.alerted_at is not None})
    return out
