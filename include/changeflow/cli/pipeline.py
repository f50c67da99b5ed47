"""``changeflow run`` and ``changeflow demo``: run components without Airflow, make demo data."""

from __future__ import annotations

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, load, spark_session
from changeflow.errors import ChangeflowError
from changeflow.runner import KINDS, run_component


@main.command("run")
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("name")
@config_option
def run(kind: str, name: str, config_path: str) -> None:
    """Run one capture, propagation, apply (or demo verify) once, in this process."""
    cfg = load(config_path)
    try:
        cfg.component(kind if kind != "verify" else "apply", name)
        result = run_component(spark_session(f"changeflow-{kind}"), cfg, kind, name)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(result if kind != "verify" else "")
    if not getattr(result, "ok", True):
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
def generate(root: str, rounds: int, employees: int, changes: int) -> None:
    """Write the initial HR snapshot (if none) and ROUNDS more rounds of changes."""
    from changeflow.demo.hr import generate as gen

    written = gen(root, rounds=rounds, employees=employees, changes=changes)
    click.echo(f"wrote snapshots {written} under {root}")
