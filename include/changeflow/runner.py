"""Running pipeline components as jobs: argument parsing, rule wiring, exit codes.

Job files under ``jobs/`` call :func:`main` and nothing else, so what a job does lives
here, where it can be tested without spark-submit.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from changeflow.clients import check_references
from changeflow.config import PipelineConfig, load_config
from changeflow.errors import EXIT_FAILED, EXIT_OK, exit_code, is_transient
from changeflow.obs.runs import recorded
from changeflow.pipeline import Client, Pipeline, resolve

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("changeflow.job")
KINDS = ("capture", "propagation", "apply", "verify")


def rule_filter_for(
    cfg: PipelineConfig, kind: str, name: str
) -> Callable[[DataFrame], DataFrame] | None:
    """The rule-set filter of a client, or None when it has no rule set."""
    from changeflow.clients import rule_filter

    return rule_filter(cfg, kind, name)


@recorded
def run_component(spark: SparkSession, cfg: PipelineConfig | Pipeline, kind: str, name: str,
                  *, lease_wait: float = 0.0) -> Any:
    """Run one capture, propagation, apply or demo verification once.

    The configuration is resolved once (:func:`changeflow.obs.runs.recorded` hands this
    function the run's :class:`~changeflow.pipeline.Pipeline`), and the stages take
    their queues, stores and rule-set filter from it.

    Args:
        lease_wait: seconds to wait when another run of the component holds its lease.
    """
    pipe = resolve(cfg)
    if kind == "verify":
        from changeflow.demo.verify import verify

        return verify(spark, pipe.cfg, name)
    client = pipe.client(kind, name)
    if kind == "capture":
        return _capture(spark, pipe, client, lease_wait)
    if kind == "propagation":
        from changeflow.propagation import propagate_once

        return propagate_once(spark, pipe, name, rule_filter=client.rule_filter,
                              lease_wait=lease_wait)
    # the apply's entry points take the resolved pipeline and the rule-set filter
    if client.spec.target is not None:
        from changeflow.apply.postgres import apply_pg_once

        return apply_pg_once(spark, pipe, name, rule_filter=client.rule_filter,
                             lease_wait=lease_wait)
    from changeflow.apply.engine import apply_once

    return apply_once(spark, pipe, name, rule_filter=client.rule_filter,
                      lease_wait=lease_wait)


def _capture(spark: SparkSession, pipe: Pipeline, client: Client, lease_wait: float) -> Any:
    """Run a capture by its source type."""
    name, rule_filter, source = client.name, client.rule_filter, client.spec.source.type
    if source == "debezium":
        from changeflow.debezium.capture import run_debezium_capture

        return run_debezium_capture(spark, pipe, name, rule_filter, lease_wait=lease_wait)
    if source == "kafka":
        from changeflow.debezium.kafka import run_kafka_capture

        return run_kafka_capture(spark, pipe, name, rule_filter, lease_wait=lease_wait)
    if source == "postgres":
        from changeflow.capture.postgres import run_pg_capture

        return run_pg_capture(spark, pipe, name, rule_filter=rule_filter,
                              busy_wait=max(lease_wait, 1.0))
    from changeflow.capture.snapshot import run_capture

    return run_capture(spark, pipe, name, rule_filter, lease_wait=lease_wait)


def parse_args(kind: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """Arguments every job takes."""
    p = argparse.ArgumentParser(prog=f"changeflow-{kind}", description=f"Run a {kind} once.")
    p.add_argument("--config", required=True, help="pipeline configuration file (YAML)")
    p.add_argument("--name", required=True, help=f"the {kind} to run")
    p.add_argument("--lease-wait", type=float, default=60.0,
                   help="seconds to wait while another run of the component is active")
    return p.parse_args(argv)


def main(kind: str, argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jobs/<kind>.py``: returns the process exit code.

    Exit codes (:mod:`changeflow.errors`): 0 done, 1 finished with a reported failure,
    65 terminal (do not retry), 75 transient (retry later).
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = parse_args(kind, argv)
    try:
        cfg = load_config(args.config)
        cfg.component(kind if kind != "verify" else "apply", args.name)
        check_references(cfg)
        from changeflow.spark import get_session

        spark = get_session(f"changeflow-{kind}-{args.name}")
        result = run_component(spark, resolve(cfg), kind, args.name,
                               lease_wait=args.lease_wait)
    except Exception as exc:  # noqa: BLE001  (every failure becomes a classified exit code)
        verdict = "transient, retry later" if is_transient(exc) else "terminal, not retried"
        log.error("%s %s failed (%s): %s", kind, args.name, verdict, exc,
                  exc_info=not hasattr(exc, "transient"))
        print(f"changeflow {kind} {args.name}: error ({verdict}): {exc}", file=sys.stderr)
        return exit_code(exc)
    summary = getattr(result, "__dict__", result)
    print(json.dumps({"kind": kind, "name": args.name, "result": summary}, default=str))
    return EXIT_OK if getattr(result, "ok", True) else EXIT_FAILED
