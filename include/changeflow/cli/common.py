"""Options and helpers shared by the command modules."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import click

from changeflow.config import PipelineConfig, load_config
from changeflow.errors import ChangeflowError


def config_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--config FILE``, defaulting to ``$CHANGEFLOW_CONFIG``."""
    return click.option(
        "--config", "config_path", envvar="CHANGEFLOW_CONFIG", required=True,
        type=click.Path(dir_okay=False), help="pipeline configuration file [env CHANGEFLOW_CONFIG]",
    )(f)


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``: print machine-readable output."""
    return click.option("--json", "as_json", is_flag=True, help="print JSON for scripts")(f)


def load(config_path: str) -> PipelineConfig:
    """Load a configuration, turning errors into a clean CLI failure."""
    from changeflow.clients import check_references

    try:
        cfg = load_config(config_path)
        check_references(cfg)
        return cfg
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc


def emit_json(data: Any) -> None:
    """Print data as JSON."""
    click.echo(json.dumps(data, indent=2, default=str))


def spark_session(name: str) -> Any:
    """A local SparkSession for commands that need one."""
    os.environ.setdefault("CHANGEFLOW_DRIVER_MEMORY", "2g")
    from changeflow.spark import get_session

    return get_session(name)
