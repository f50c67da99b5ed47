"""Alerts received by a real local SMTP server and a real local HTTP receiver."""

from __future__ import annotations

import datetime as dt
from typing import Any

from changeflow.config import AlertsConfig, EmailAlerts, PipelineConfig
from changeflow.errors import StateStoreError
from changeflow.schedules import alerts, model
from changeflow.schedules.window import ensure_schedule, run_window

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _alerts(smtp: Any, hook: Any) -> AlertsConfig:
    return AlertsConfig(
        email=EmailAlerts(host="127.0.0.1", port=smtp.server_address[1], to=["ops@example.com"]),
        webhook_url=f"http://127.0.0.1:{hook.server_address[1]}/hook")


def test_notify_sends_email_and_webhook(smtp_server: Any, webhook_server: Any) -> None:
    alert = alerts.Alert(alerts.WINDOW_FAILED, "p12", 3, "StateStoreError: down", T0,
                         T0 + dt.timedelta(seconds=120))
    sent = alerts.notify(_alerts(smtp_server, webhook_server), alert)
    assert sent == {"email": "sent", "webhook": "sent"}
    [mail] = smtp_server.messages
    assert mail["To"] == "ops@example.com"
    assert mail["Subject"] == "[changeflow] propagation window of p12 failed (3)"
    assert "next retry: 2024-01-01T00:02:00+00:00" in mail.get_payload()
    [hook] = webhook_server.messages
    assert hook["event"] == "window_failed" and hook["failures"] == 3
    assert hook["propagation"] == "p12"


def test_an_unreachable_channel_is_reported_not_raised(webhook_server: Any) -> None:
    cfg = AlertsConfig(email=EmailAlerts(host="127.0.0.1", port=1, to=["x@y"]), timeout=2,
                       webhook_url=f"http://127.0.0.1:{webhook_server.server_address[1]}/")
    sent = alerts.notify(cfg, alerts.Alert(alerts.DISABLED, "p", 16, "boom", T0))
    assert sent["webhook"] == "sent" and sent["email"].startswith("error:")


class _Clock:
    def __init__(self) -> None:
        self.t = T0

    def now(self) -> dt.datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += dt.timedelta(seconds=seconds)


def _failing(spark: Any, cfg: Any, name: str, **_kw: Any) -> Any:
    raise StateStoreError("destination site unreachable")


def test_every_failed_window_and_the_auto_disable_alert(pipeline: PipelineConfig,
                                                       smtp_server: Any,
                                                       webhook_server: Any) -> None:
    cfg = pipeline.model_copy(update={"alerts": _alerts(smtp_server, webhook_server)})
    clock = _Clock()
    store = ensure_schedule(cfg, "p12", T0)
    store.alter("p12", start=T0, duration=60.0, next_time=600.0)
    index = 0
    while not store.require("p12").disabled:
        w = model.window_number(store.require("p12").schedule, index)
        clock.t = max(clock.t, w.start)
        run_window(None, cfg, "p12", start=w.start, end=w.end, clock=clock,  # type: ignore[arg-type]
                   propagate=_failing)
        index += 1
    events = [m["event"] for m in webhook_server.messages]
    assert events == ["window_failed"] * 16 + ["schedule_disabled"]
    assert [m["failures"] for m in webhook_server.messages][-2:] == [16, 16]
    subjects = [m["Subject"] for m in smtp_server.messages]
    assert len(subjects) == 17
    assert subjects[-1] == ("[changeflow] schedule of p12 DISABLED after 16 consecutive "
                            "failures")
    row = store.require("p12")
    assert row.disabled_reason == "failures"
    assert row.state.last_error_msg == "StateStoreError: destination site unreachable"
