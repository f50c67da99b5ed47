"""Task failures and retries notified through Airflow's notifier framework.

Operators configure email and Slack for every other DAG as Airflow connections; the
pipeline's ``alerts.airflow`` section does the same for changeflow's DAGs:

.. code-block:: yaml

    alerts:
      airflow: {smtp_conn_id: smtp_default, to: [ops@example.com],
                slack_webhook_conn_id: slack_alerts}

Each task then gets ``on_failure_callback``/``on_retry_callback`` notifiers: Airflow's
``SmtpNotifier`` and ``SlackWebhookNotifier``, plus :class:`ChangeflowNotifier`, which
sends the project's own channels (``alerts.email``, ``alerts.webhook_url``) for
failures the window job could not report itself (its own state store unreachable, a
refused configuration, a killed job). Window failures the job counted are alerted by
the job (:mod:`changeflow.schedules.alerts`), with the schedule's failure count and
next retry, so they are not sent twice.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import BaseNotifier

SUBJECT = "[changeflow] {{ ti.dag_id }}.{{ ti.task_id }} {{ ti.state }} (try {{ ti.try_number }})"
BODY = ("<p>Task <b>{{ ti.task_id }}</b> of DAG <b>{{ ti.dag_id }}</b>, run "
        "<code>{{ run_id }}</code>: {{ ti.state }}.</p><p>{{ exception }}</p>")


class ChangeflowNotifier(BaseNotifier):
    """The project's own alert channels, for task failures the job could not report.

    Args:
        config: the pipeline configuration file (its ``alerts`` section).
        component: what failed (a propagation's name, or ``kind name``).
    """

    template_fields = ("config", "component")

    def __init__(self, config: str, component: str, event: str = "task_failed"):
        super().__init__()
        self.config = config
        self.component = component
        self.event = event

    def notify(self, context: Any) -> None:
        from changeflow.config import load_config
        from changeflow.schedules import alerts

        exc = context.get("exception")
        if exc is not None and "accounted for by the job" in str(exc):
            return  # the window job alerted with the schedule's own figures
        ti = context.get("ti")
        state = "up for retry" if self.event == "task_retry" else "failed"
        what = f"{getattr(ti, 'dag_id', '?')}.{getattr(ti, 'task_id', '?')}"
        alert = alerts.Alert(self.event, self.component,
                             int(getattr(ti, "try_number", 0) or 0),
                             f"{what} {state}: {exc}"[:4000], dt.datetime.now(dt.UTC))
        alerts.notify(load_config(self.config).alerts, alert)


def notifiers(alerts_spec: dict[str, Any] | None, config: str, component: str,
              event: str = "task_failed") -> list[Any]:
    """The notifiers of a task, from the rendered ``alerts`` literal of the pipeline.

    Args:
        alerts_spec: ``{"airflow": {...}, "project": bool}`` (see ``render.alerts_literal``).
        config: the pipeline configuration file.
        component: the component the task runs.
        event: ``task_failed`` (on_failure_callback) or ``task_retry`` (on_retry_callback).
    """
    spec = alerts_spec or {}
    out: list[Any] = []
    af = spec.get("airflow") or {}
    if af.get("smtp_conn_id") and af.get("to"):
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        out.append(SmtpNotifier(smtp_conn_id=af["smtp_conn_id"], to=af["to"],
                                from_email=af.get("from_email"), subject=SUBJECT,
                                html_content=BODY))
    if af.get("slack_webhook_conn_id"):
        from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

        out.append(SlackWebhookNotifier(
            slack_webhook_conn_id=af["slack_webhook_conn_id"],
            text=":red_circle: changeflow {{ ti.dag_id }}.{{ ti.task_id }} {{ ti.state }} "
                 "(try {{ ti.try_number }}): {{ exception }}"))
    if spec.get("project"):
        out.append(ChangeflowNotifier(config, component, event))
    return out
