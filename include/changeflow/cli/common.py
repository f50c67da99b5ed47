"""Options and helpers shared by the command modules."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from changeflow.cli import VERBOSE
from changeflow.config import PipelineConfig, load_config
from changeflow.errors import ChangeflowError


class _ConfigOption(click.Option):
    """A required option that a group does not require when a subcommand's help is asked."""

    def handle_parse_result(self, ctx: click.Context, opts: Any, args: list[str]) -> Any:
        wanted = self.required
        if "-h" in args or "--help" in args:
            self.required = False
        try:
            return super().handle_parse_result(ctx, opts, args)
        except click.MissingParameter as exc:
            exc.message = ("It names the pipeline file: pass --config FILE or set "  # type: ignore[misc]
                           "CHANGEFLOW_CONFIG (the demo's is config/demo.yaml).")
            raise
        finally:
            self.required = wanted


def config_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--config FILE``: the pipeline file, defaulting to ``$CHANGEFLOW_CONFIG``.

    A missing option says which environment variable to set; a file that does not
    exist is refused before the command does anything.
    """
    return click.option(
        "--config", "config_path", envvar="CHANGEFLOW_CONFIG", required=True, show_envvar=True,
        type=click.Path(exists=True, dir_okay=False), cls=_ConfigOption,
        help="pipeline configuration file (e.g. config/demo.yaml)",
    )(f)


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``: print machine-readable output."""
    return click.option("--json", "as_json", is_flag=True, help="print JSON for scripts")(f)


_RULES_KEYS = {"rules", "rule_sets", "clients", "sequence"}


def refuse_rules_file(config_path: str) -> None:
    """Refuse a rules file given where the pipeline file is expected, saying which is which."""
    import yaml

    try:
        raw = yaml.safe_load(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # load_config reports it, naming the file
    if isinstance(raw, dict) and raw and "sites" not in raw and set(raw) <= _RULES_KEYS and (
            isinstance(raw.get("rules"), dict) or {"rule_sets", "clients"} & set(raw)):
        raise click.ClickException(
            f"{config_path} is a rules file: --config takes the pipeline file whose `rules:` "
            "key names it (e.g. --config config/demo.yaml, which has `rules: demo-rules.yaml`)")


def load(config_path: str) -> PipelineConfig:
    """Load a configuration, turning errors into a clean CLI failure."""
    from changeflow.clients import check_references

    refuse_rules_file(config_path)
    try:
        cfg = load_config(config_path)
        check_references(cfg)
        return cfg
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc


def emit_json(data: Any) -> None:
    """Print data as JSON."""
    click.echo(json.dumps(data, indent=2, default=str))


def verbose() -> bool:
    """Whether ``changeflow --verbose`` (or a command's own ``--verbose``) was given."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(VERBOSE))


def spark_session(name: str) -> Any:
    """A local SparkSession for commands that need one: quiet unless ``--verbose``."""
    os.environ.setdefault("CHANGEFLOW_DRIVER_MEMORY", "2g")
    from changeflow.spark import get_session

    return get_session(name, quiet=not verbose())


def one_apply(cfg: PipelineConfig, name: str | None) -> str:
    """The apply a command acts on: the one named, or the pipeline's only one.

    Raises:
        click.UsageError: none named and the pipeline has none or several.
    """
    if name:
        return name
    names = [a.name for a in cfg.applies]
    if len(names) == 1:
        return names[0]
    if not names:
        raise click.UsageError(f"{cfg.source_path} declares no apply")
    raise click.UsageError(f"the pipeline has applies {', '.join(names)}: say which one "
                           "with --apply")
