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
def run_component(spark: SparkSession, cfg: PipelineConfig, kind: str, name: str, *,
                  lease_wait: float = 0.0) -> Any:
    """Run one capture, propagation, apply or demo verification once.

    Args:
        lease_wait: seconds to wait when another run of the component holds its lease.
    """
    if kind == "verify":
        from changeflow.demo.verify import verify

        return verify(spark, cfg, name)
    rule_filter = rule_filter_for(cfg, kind, name)
    spec = cfg.component(kind, name)
    if kind == "capture":
        if spec.source.type == "debezium":
            from changeflow.debezium.capture import run_debezium_capture

            return run_debezium_capture(spark, cfg, name, rule_filter, lease_wait=lease_wait)
        if spec.source.type == "kafka":
            from changeflow.debezium.kafka import run_kafka_capture

            return run_kafka_capture(spark, cfg, name, rule_filter, lease_wait=lease_wait)
        if spec.source.type == "postgres":
            from changeflow.capture.postgres import run_pg_capture

            return run_pg_capture(spark, cfg, name, rule_filter=rule_filter,
                                  busy_wait=max(lease_wait, 1.0))
        from changeflow.capture.snapshot import run_capture

        return run_capture(spark, cfg, name, rule_filter, lease_wait=lease_wait)
    if kind == "propagation":
        from changeflow.propagation import propagate_once

        return propagate_once(spark, cfg, name, rule_filter=rule_filter, lease_wait=lease_wait)
    if spec.target is not None:
        from changeflow.apply.postgres import apply_pg_once

        return apply_pg_once(spark, cfg, name, rule_filter=rule_filter, lease_wait=lease_wait)
    from changeflow.apply.engine import apply_once

    return apply_once(spark, cfg, name, rule_filter=rule_filter, lease_wait=lease_wait)


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
        result = run_component(spark, cfg, kind, args.name, lease_wait=args.lease_wait)
    except Exception as exc:  # noqa: BLE001  (every failure becomes a classified exit code)
        verdict = "transient, retry later" if is_transient(exc) else "terminal, not retried"
        log.error("%s %s failed (%s): %s", kind, args.name, verdict, exc,
                  exc_info=not hasattr(exc, "transient"))
        print(f"changeflow {kind} {args.name}: error ({verdict}): {exc}", file=sys.stderr)
        return exit_code(exc)
    summary = getattr(result, "__dict__", result)
    print(json.dumps({"kind": kind, "name": args.name, "result": summary}, default=str))
    return EXIT_OK if getattr(result, "ok", True) else EXIT_FAILED
