"""The window job: ``jobs/propagation_window.py`` parses its arguments and calls :func:`main`."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import sys
from collections.abc import Sequence

from changeflow.errors import exit_code, is_transient

log = logging.getLogger("changeflow.job")


def _when(value: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """``--config --name --start --end`` (the run's data interval)."""
    p = argparse.ArgumentParser(prog="changeflow-propagation-window",
                                description="Run one propagation window.")
    p.add_argument("--config", required=True, help="pipeline configuration file (YAML)")
    p.add_argument("--name", required=True, help="the propagation")
    p.add_argument("--start", type=_when, required=True, help="window start (ISO 8601)")
    p.add_argument("--end", type=_when, required=True, help="window end (ISO 8601)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one window in one Spark application. Exit 0 unless it ended on a failure."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = parse_args(argv)
    try:
        from changeflow.clients import check_references, rule_filter
        from changeflow.config import load_config
        from changeflow.schedules.window import run_window
        from changeflow.spark import get_session

        cfg = load_config(args.config)
        check_references(cfg)
        spark = get_session(f"changeflow-window-{args.name}")
        report = run_window(spark, cfg, args.name, start=args.start, end=args.end,
                            rule_filter=rule_filter(cfg, "propagation", args.name))
    except Exception as exc:  # noqa: BLE001  (every failure becomes a classified exit code)
        verdict = "transient, retry later" if is_transient(exc) else "terminal, not retried"
        log.error("window %s failed (%s): %s", args.name, verdict, exc,
                  exc_info=not hasattr(exc, "transient"))
        print(f"changeflow window {args.name}: error ({verdict}): {exc}", file=sys.stderr)
        return exit_code(exc)
    print(json.dumps({"kind": "propagation_window", "name": args.name,
                      "result": dataclasses.asdict(report)}, default=str))
    return 0 if report.ok else 1
