"""``changeflow run`` and ``changeflow demo``: run components without Airflow, make demo data."""

from __future__ import annotations

import contextlib
import io
import sys
import time
from typing import Any

import click

from changeflow.cli import VERBOSE, main, setup_logging
from changeflow.cli.common import config_option, load, spark_session, verbose
from changeflow.cli.output import chosen, emit, output_option
from changeflow.config import PipelineConfig
from changeflow.errors import ChangeflowError
from changeflow.runner import KINDS, run_component


def _queues(cfg: PipelineConfig, kind: str, name: str) -> tuple[str, ...]:
    spec = cfg.component("apply" if kind == "verify" else kind, name)
    refs = [getattr(spec, a, None) for a in ("queue", "source_queue", "destination_queue")]
    return tuple(cfg.qualify(r) for r in refs if r)


@main.command("run")
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("name")
@config_option
@output_option
@click.option("-v", "--verbose", "run_verbose", is_flag=True,
              help="show Spark's progress bars and warnings (as changeflow --verbose)")
@click.pass_context
def run(ctx: click.Context, kind: str, name: str, config_path: str, output: str,
        as_json: bool, run_verbose: bool) -> None:
    """Run one capture, propagation, apply (or the demo's verify) once, in this process.

    Prints what the run did; exits 0 when it did its work, 1 when a verification failed,
    65 on a terminal error and 75 on a transient one (as the jobs Airflow runs do).
    """
    if run_verbose:
        ctx.meta[VERBOSE] = True
        ctx.call_on_close(setup_logging(True))
    cfg = load(config_path)
    try:
        queues = _queues(cfg, kind, name)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    fmt = chosen(output, as_json)
    started = time.monotonic()
    # What the library prints (the demo verification's own report) would repeat the
    # summary below, or break JSON: it goes to stderr with --verbose, else nowhere.
    sink: Any = sys.stderr if verbose() else io.StringIO()
    with contextlib.redirect_stdout(sink):
        result = run_component(spark_session(f"changeflow-{kind}-{name}"), cfg, kind, name)
    _print_summary(kind, name, result, time.monotonic() - started, queues, fmt)


def _print_summary(kind: str, name: str, result: Any, seconds: float,
                   queues: tuple[str, ...], fmt: str) -> None:
    from changeflow.cli.summary import summarize

    s = summarize(kind, name, result, seconds=seconds, queues=queues)
    if fmt != "table":
        emit(s.data, fmt)
    else:
        click.echo(s.headline)
        for note in s.notes:
            click.echo(f"  {note}")
        if s.rows:
            click.echo("")
            emit(s.rows, fmt, s.columns)
    if not s.ok:
        raise SystemExit(1)


@main.group("demo")
def demo() -> None:
    """The HR demo: generate source snapshots."""


@demo.command("generate")
@click.option("--root", required=True, type=click.Path(file_okay=False),
              help="directory of the source snapshots")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(0, 1000),
              help="rounds of changes after the initial snapshot")
@click.option("--employees", default=500, show_default=True, type=click.IntRange(1, 10**7))
@click.option("--changes", default=120, show_default=True, type=click.IntRange(3, 10**7),
              help="changes per round")
@output_option
def generate(root: str, rounds: int, employees: int, changes: int, output: str,
             as_json: bool) -> None:
    """Write the initial HR snapshot (if none) and ROUNDS more rounds of changes."""
    from changeflow.demo.hr import generate as gen

    written = gen(root, rounds=rounds, employees=employees, changes=changes)
    fmt = chosen(output, as_json)
    if fmt != "table":
        emit({"root": root, "snapshots": written}, fmt)
    elif written:
        click.echo(f"wrote {len(written)} snapshot(s) ({written[0]}-{written[-1]}) under {root}")
    else:
        click.echo(f"wrote nothing: {root} already holds its initial snapshot and --rounds is 0")

