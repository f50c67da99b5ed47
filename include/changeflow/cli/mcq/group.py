"""The ``changeflow mcq`` group and what its commands share: ``--config``, clean errors,
the configuration with its MCQ, the listing columns."""


from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from changeflow.cli import main
from changeflow.cli.output import Col
from changeflow.errors import ChangeflowError

LISTENER_COLUMNS = [Col("listener"), Col("pending", "count"), Col("bulk", "count"),
                    Col("held", "count"), Col("in_flight", "count", "in flight"),
                    Col("processed", "count"), Col("oldest_pending", "time", "oldest pending"),
                    Col("max_retries", "count", "retries"), Col("frequency", "duration"),
                    Col("last_mark", "time", "last mark")]
TABLE_COLUMNS = [Col("table"), Col("pending", "count"), Col("bulk", "count"),
                 Col("processed", "count"), Col("oldest_pending", "time", "oldest pending"),
                 Col("first_logged", "time", "first logged"), Col("listeners", width=40),
                 Col("comments", width=40)]
ENTRY_COLUMNS = [Col("entry_number", "count", "entry"), Col("tname"), Col("subtype"),
                 Col("change_type", header="type"), Col("person_id"), Col("pkey_string"),
                 Col("pkey_number"), Col("aux_string"), Col("bulk", "bool"),
                 Col("retry_count", "count", "retries"), Col("hold_until", "time", "held until"),
                 Col("entry_date", "time", "logged")]


def mcq_config_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--config FILE``, defaulting to ``$CHANGEFLOW_MCQ_CONFIG`` then ``$CHANGEFLOW_CONFIG``."""
    return click.option(
        "--config", "config_path", envvar=["CHANGEFLOW_MCQ_CONFIG", "CHANGEFLOW_CONFIG"],
        required=True, type=click.Path(dir_okay=False),
        help="pipeline file with an mcq: section [env CHANGEFLOW_MCQ_CONFIG, CHANGEFLOW_CONFIG]",
    )(f)


def clean_errors(f: Callable[..., Any]) -> Callable[..., Any]:
    """Turn changeflow's errors into a clean CLI failure (message, exit code 1)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except ChangeflowError as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper


def open_cfg(config_path: str) -> tuple[Any, Any]:
    """The configuration and its MCQ."""
    from changeflow.config import load_config
    from changeflow.mcq.store import open_mcq

    cfg = load_config(config_path)
    return cfg, open_mcq(cfg)


@main.group("mcq")
def mcq() -> None:
    """The Meta Change Queue: listeners of changes to people, places and things."""
