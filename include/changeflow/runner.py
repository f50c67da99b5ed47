"""Running pipeline components as jobs: argument parsing, rule wiring, exit codes.

Job files under ``jobs/`` call :func:`main` and nothing else, so what a job does lives
here, where it can be tested without spark-submit.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (an argument).

    >>> _seconds("2.5")
    2.5
    >>> _seconds("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '0' is not a positive number of seconds
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def parse_args(kind: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """Arguments every job takes."""
    p = argparse.ArgumentParser(prog=f"changeflow-{kind}", description=f"Run a {kind} once, "
                                "or every --every seconds in one Spark session.")
    p.add_argument("--config", required=True, help="pipeline configuration file (YAML)")
    p.add_argument("--name", required=True, help=f"the {kind} to run")
    p.add_argument("--lease-wait", type=float, default=60.0,
                   help="seconds to wait while another run of the component is active")
    p.add_argument("--every", type=_seconds, default=None, metavar="SECONDS",
                   help="keep running: start a run every SECONDS in the one Spark session "
                        "(warm after its first run), until --for has passed or the job "
                        "gets SIGTERM or SIGINT, which end it after the run it is in")
    p.add_argument("--for", dest="duration", type=_seconds, default=None, metavar="SECONDS",
                   help="with --every: start no run once SECONDS have passed (default: "
                        "until stopped)")
    args = p.parse_args(argv)
    if args.duration is not None and args.every is None:
        p.error("--for needs --every (a job without it runs once)")
    if args.every is not None and kind == "verify":
        p.error("verify runs once: --every is for capture, propagation and apply")
    return args


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
        if args.every is not None:
            with _stopping() as stop:
                return repeat(spark, resolve(cfg), kind, args.name, every=args.every,
                              duration=args.duration, stop=stop, lease_wait=args.lease_wait)
        result = run_component(spark, resolve(cfg), kind, args.name,
                               lease_wait=args.lease_wait)
    except Exception as exc:  # noqa: BLE001  (every failure becomes a classified exit code)
        return _failed(kind, args.name, exc)
    _print_run(kind, args.name, result)
    return EXIT_OK if getattr(result, "ok", True) else EXIT_FAILED


def _failed(kind: str, name: str, exc: BaseException) -> int:
    """Log and print a run's failure; its exit code."""
    verdict = "transient, retry later" if is_transient(exc) else "terminal, not retried"
    log.error("%s %s failed (%s): %s", kind, name, verdict, exc,
              exc_info=not hasattr(exc, "transient"))
    print(f"changeflow {kind} {name}: error ({verdict}): {exc}", file=sys.stderr)
    return exit_code(exc)


def _print_run(kind: str, name: str, result: Any, **more: Any) -> None:
    summary = getattr(result, "__dict__", result)
    print(json.dumps({"kind": kind, "name": name, **more, "result": summary}, default=str),
          flush=True)


@contextmanager
def _stopping() -> Iterator[Stop]:
    """An event SIGTERM and SIGINT set (where signals reach: the main thread), with the
    signal's name; the earlier handlers come back after the block."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    earlier = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum: int, _frame: Any) -> None:
        stop.reason = signal.Signals(signum).name
        stop.set()

    for s in earlier:
        signal.signal(s, handler)
    try:
        yield stop
    finally:
        for s, h in earlier.items():
            signal.signal(s, h)


class Stop(threading.Event):
    """Set to end a repeating job after the run it is in; ``reason`` says why."""

    reason = "stopped"


def repeat(spark: SparkSession, pipe: Pipeline, kind: str, name: str, *, every: float,
           duration: float | None, stop: Stop, lease_wait: float = 0.0,
           clock: Callable[[], float] = time.monotonic) -> int:
    """Run a component every ``every`` seconds in one Spark session (each run's start
    ``every`` after the one before, at once when a run took longer), until ``duration``
    seconds have passed or ``stop`` is set; each run prints its JSON line (with
    ``run``), the job a last one (``runs``, ``stopped``, ``exit``).

    A run that fails transiently (a lease held, a store or catalog away) is logged and
    the next one tries again; a terminal failure ends the job with its exit code. The
    job's exit code is the last run's when it failed transiently, else 1 when a run
    reported a failure (:data:`~changeflow.errors.EXIT_FAILED`), else 0.

    Returns:
        The exit code.
    """
    started = clock()
    runs, code, reported, why = 0, EXIT_OK, False, "--for elapsed"
    while True:
        begun = clock()
        runs += 1
        try:
            result = run_component(spark, pipe, kind, name, lease_wait=lease_wait)
        except Exception as exc:  # noqa: BLE001  (classified: transient ones are retried)
            code = _failed(kind, name, exc)
            if not is_transient(exc):
                why = "terminal failure"
                break
        else:
            code = EXIT_OK
            reported = reported or not getattr(result, "ok", True)
            _print_run(kind, name, result, run=runs)
        if stop.is_set():
            why = stop.reason
            break
        if duration is not None and clock() - started >= duration:
            break
        if stop.wait(max(0.0, begun + every - clock())):
            why = stop.reason
            break
        if duration is not None and clock() - started >= duration:
            break
    final = code if code != EXIT_OK else (EXIT_FAILED if reported else EXIT_OK)
    print(json.dumps({"kind": kind, "name": name, "runs": runs, "stopped": why,
                      "exit": final}), flush=True)
    return final
