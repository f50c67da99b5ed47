"""``changeflow dags render``: write the DAG file of a pipeline configuration."""

from __future__ import annotations

import os

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, load


@main.group("dags")
def dags() -> None:
    """Airflow DAG files generated from pipeline configurations."""


@dags.command("render")
@config_option
@click.option("--pipeline", required=True, help="pipeline name (DAG id prefix)")
@click.option("--out", "out_dir", default="dags", show_default=True,
              type=click.Path(file_okay=False, exists=True))
@click.option("--project-root", default=".", show_default=True,
              type=click.Path(file_okay=False, exists=True))
@click.option("--verify", multiple=True, help="apply names whose targets the pipeline verifies")
def render_cmd(config_path: str, pipeline: str, out_dir: str, project_root: str,
               verify: tuple[str, ...]) -> None:
    """Render the DAG file of a pipeline (one DAG per component, plus the pipeline DAG)."""
    from changeflow.airflow.render import write

    cfg = load(config_path)
    path = write(cfg, project_root=os.path.abspath(project_root), pipeline=pipeline,
                 out_dir=out_dir, verify=list(verify))
    click.echo(f"wrote {path}")
