"""Schedule alerts: an email (SMTP) and a generic webhook (JSON POST), Slack optionally.

An alert goes out on every failed propagation window and when a schedule is disabled
after 16 consecutive failures. The window loop sends them itself: Airflow's own
auto-pause has no callback, and a failed window is only known to the job. Sending
never raises: a channel that fails is logged and reported in the result, so an
unreachable mail server cannot turn a propagation failure into a crash.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import smtplib
import urllib.request
from dataclasses import asdict, dataclass
from email.message import EmailMessage

from changeflow.config import AlertsConfig, EmailAlerts

log = logging.getLogger(__name__)

WINDOW_FAILED = "window_failed"
DISABLED = "schedule_disabled"


@dataclass(frozen=True)
class Alert:
    """What happened to which schedule.

    Attributes:
        event: :data:`WINDOW_FAILED` or :data:`DISABLED`.
        propagation: the propagation whose schedule it is.
        failures: consecutive failures so far.
        error: the last error message.
        at: when it happened.
        next_retry: when the next attempt is due (None once disabled).
    """

    event: str
    propagation: str
    failures: int
    error: str
    at: dt.datetime
    next_retry: dt.datetime | None = None

    @property
    def subject(self) -> str:
        """A one-line summary, used as the email subject."""
        if self.event == DISABLED:
            return (f"[changeflow] schedule of {self.propagation} DISABLED after "
                    f"{self.failures} consecutive failures")
        if self.event in ("task_failed", "task_retry"):
            what = "up for retry" if self.event == "task_retry" else "failed"
            return f"[changeflow] Airflow task of {self.propagation} {what} (try {self.failures})"
        return f"[changeflow] propagation window of {self.propagation} failed ({self.failures})"

    @property
    def text(self) -> str:
        """The body of the alert."""
        lines = [self.subject, "", f"time: {self.at.isoformat()}",
                 f"consecutive failures: {self.failures}", f"last error: {self.error}"]
        if self.next_retry is not None:
            lines.append(f"next retry: {self.next_retry.isoformat()}")
        if self.event == DISABLED:
            lines.append("fix the cause, then: changeflow schedules enable "
                         f"{self.propagation}")
        return "\n".join(lines)

    def payload(self) -> dict[str, object]:
        """The webhook's JSON body."""
        d = asdict(self)
        d["at"] = self.at.isoformat()
        d["next_retry"] = self.next_retry.isoformat() if self.next_retry else None
        d["summary"] = self.subject
        return d


def send_email(cfg: EmailAlerts, alert: Alert, timeout: float) -> None:
    """Send one alert email."""
    msg = EmailMessage()
    msg["Subject"] = alert.subject
    msg["From"] = cfg.sender
    msg["To"] = ", ".join(cfg.to)
    msg.set_content(alert.text)
    with smtplib.SMTP(cfg.host, cfg.port, timeout=timeout) as smtp:
        if cfg.starttls:
            smtp.starttls()
        if cfg.username_env:
            smtp.login(os.environ[cfg.username_env], os.environ.get(cfg.password_env or "", ""))
        smtp.send_message(msg)


def send_webhook(url: str, alert: Alert, timeout: float) -> None:
    """POST the alert as JSON; a non-2xx answer is an error."""
    body = json.dumps(alert.payload()).encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (configured URL)
        if resp.status >= 300:
            raise OSError(f"webhook {url} answered {resp.status}")


def send_slack(conn_id: str, alert: Alert) -> None:
    """Post to Slack through Airflow's Slack notifier (the provider must be installed)."""
    from airflow.providers.slack.notifications.slack_webhook import (  # type: ignore[import-not-found]
        SlackWebhookNotifier,
    )

    SlackWebhookNotifier(slack_webhook_conn_id=conn_id, text=alert.text).notify({})


def notify(cfg: AlertsConfig, alert: Alert) -> dict[str, str]:
    """Send an alert to every configured channel.

    Returns:
        ``{channel: "sent" | "error: ..."}`` for each configured channel.
    """
    log.warning("alert: %s: %s", alert.subject, alert.error)
    out: dict[str, str] = {}
    channels = []
    if cfg.email is not None:
        channels.append(("email", lambda: send_email(cfg.email, alert, cfg.timeout)))  # type: ignore[arg-type]
    if cfg.webhook_url:
        channels.append(("webhook", lambda: send_webhook(cfg.webhook_url, alert, cfg.timeout)))  # type: ignore[arg-type]
    if cfg.slack_conn_id:
        channels.append(("slack", lambda: send_slack(cfg.slack_conn_id, alert)))  # type: ignore[arg-type]
    for name, send in channels:
        try:
            send()
            out[name] = "sent"
        except Exception as exc:  # noqa: BLE001 (an alert channel must never crash the job)
            log.error("alert channel %s failed for %s: %s", name, alert.propagation, exc)
            out[name] = f"error: {exc}"
    return out
