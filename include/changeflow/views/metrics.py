"""A Prometheus endpoint: lag, throughput and backlog figures read from the state stores.

Each scrape reads the dictionary views of the pipeline (no figure is kept in the
process, so any number of servers can serve one pipeline):

* ``changeflow_queue_messages{queue,state}`` ready/processed/quarantined/undeliverable;
* ``changeflow_consumer_pending_messages{queue,consumer}``;
* ``changeflow_messages_total{component}``: messages a component's successful runs moved;
* ``changeflow_run_seconds{component}``, ``changeflow_run_failed{component}``: last run;
* ``changeflow_lag_seconds{path,quantile}`` p50/p95 over the last hour, and
  ``changeflow_lag_transactions{path}``;
* ``changeflow_apply_errors{apply}``, ``changeflow_schedule_failures{propagation}``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry


class PipelineCollector(Collector):
    """Collects one pipeline's figures on every scrape."""

    def __init__(self, config_path: str):
        self.config_path = config_path

    def collect(self) -> Iterator[Any]:
        from changeflow.config import load_config
        from changeflow.views import captures, flows, lag, queues, runs

        cfg = load_config(self.config_path)
        depth = GaugeMetricFamily("changeflow_queue_messages", "Messages in a queue by state",
                                  labels=["queue", "state"])
        for q in queues.queues(cfg):
            for state in ("ready", "processed", "quarantined", "undeliverable"):
                depth.add_metric([q["queue"], state], q[state])
        yield depth
        pending = GaugeMetricFamily("changeflow_consumer_pending_messages",
                                    "Messages a consumer has not acknowledged",
                                    labels=["queue", "consumer"])
        for c in queues.consumers(cfg):
            pending.add_metric([c["queue"], c["consumer"]], c["pending_messages"])
        yield pending
        total = CounterMetricFamily("changeflow_messages", "Messages moved by successful runs",
                                    labels=["component"])
        for c in captures.captures(cfg):
            total.add_metric([f"capture:{c['capture']}"], c["messages_captured"])
        for a in flows.applies(cfg):
            total.add_metric([f"apply:{a['apply']}"], a["messages_applied"])
        for p in flows.propagations(cfg):
            total.add_metric([f"propagation:{p['propagation']}"], p["total_number"] or 0)
        yield total
        seconds = GaugeMetricFamily("changeflow_run_seconds", "Duration of the last run",
                                    labels=["component"])
        failed = GaugeMetricFamily("changeflow_run_failed", "1 when the last run failed",
                                   labels=["component"])
        seen: set[str] = set()
        for r in runs.runs(cfg, limit=1000):
            if r["component"] in seen or r["status"] == "running":
                continue
            seen.add(r["component"])
            seconds.add_metric([r["component"]], r["seconds"] or 0.0)
            failed.add_metric([r["component"]], 1.0 if r["status"] == "failed" else 0.0)
        yield seconds
        yield failed
        lag_s = GaugeMetricFamily("changeflow_lag_seconds", "End-to-end lag over the last hour",
                                  labels=["path", "quantile"])
        lag_n = GaugeMetricFamily("changeflow_lag_transactions",
                                  "Transactions measured over the last hour", labels=["path"])
        for path in lag.lag(cfg):
            for which in ("p50", "p95"):
                if path[which] is not None:
                    lag_s.add_metric([path["path"], which], path[which])
            lag_n.add_metric([path["path"]], path["transactions"])
        yield lag_s
        yield lag_n
        errors = GaugeMetricFamily("changeflow_apply_errors", "Transactions in the apply "
                                   "error queue", labels=["apply"])
        for a in flows.applies(cfg):
            errors.add_metric([a["apply"]], a["errors_pending"])
        yield errors
        failures = GaugeMetricFamily("changeflow_schedule_failures", "Consecutive failures of "
                                     "a propagation schedule", labels=["propagation"])
        for p in flows.propagations(cfg):
            failures.add_metric([p["propagation"]], p["failures"] or 0)
        yield failures


def registry(config_path: str) -> CollectorRegistry:
    """A registry holding the pipeline's collector only."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(PipelineCollector(config_path))
    return reg


def exposition(config_path: str) -> str:
    """The metrics in Prometheus text format."""
    from prometheus_client import generate_latest

    return generate_latest(registry(config_path)).decode()


def serve(config_path: str, *, port: int = 9464, host: str = "127.0.0.1") -> tuple[Any, Any]:
    """Start serving ``/metrics`` in a background thread. Returns (server, thread)."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=registry(config_path))
    return server, thread if isinstance(thread, threading.Thread) else thread
