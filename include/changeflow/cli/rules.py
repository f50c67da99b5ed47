"""``changeflow rules``: create system rules (DBMS_STREAMS_ADM), list them, check conditions.

Every ``add-*`` command reads the rules file (``--config``, env ``CHANGEFLOW_RULES``),
calls the admin API, writes the file back and prints the rules it created with their
conditions, as seed 000 prints them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from changeflow.cli import main
from changeflow.errors import ChangeflowError
from changeflow.rules import admin
from changeflow.rules.config import load_rules, registry_to_dict, save_rules
from changeflow.rules.errors import RuleError
from changeflow.rules.parser import parse

_CLIENT_WORDS = {
    "capture": "capture process", "sync_capture": "synchronous capture",
    "propagation": "propagation", "apply": "apply process", "dequeue": "messaging client",
}  # fmt: skip


@main.group("rules")
def rules() -> None:
    """Rules, rule sets and clients (Oracle Streams DBMS_STREAMS_ADM)."""


def _config(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--config", "config_path", envvar="CHANGEFLOW_RULES", required=True,
        type=click.Path(dir_okay=False), help="rules file (YAML) [env CHANGEFLOW_RULES]",
    )(f)  # fmt: skip


def _lcr_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--include-dml/--no-include-dml", default=True, show_default=True),
        click.option("--include-ddl/--no-include-ddl", default=False, show_default=True),
        click.option("--include-tagged-lcr/--no-include-tagged-lcr", default=False,
                     show_default=True),  # fmt: skip
        click.option("--source-database", default=None),
        click.option("--inclusion-rule/--no-inclusion-rule", default=True, show_default=True,
                     help="positive (default) or negative rule set"),  # fmt: skip
        click.option("--and-condition", default=None, help="extra condition using :lcr"),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _client_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--queue", "queue_name", default=None, help="the client's queue")(f)
    f = click.option("--streams-name", required=True, help="client name")(f)
    types = click.Choice(["capture", "sync_capture", "apply", "dequeue"])
    return click.option("--streams-type", type=types, required=True)(f)


def _propagation_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--destination-queue", "destination_queue_name", required=True)(f)
    f = click.option("--source-queue", "source_queue_name", required=True)(f)
    return click.option("--streams-name", required=True, help="propagation name")(f)


def _run(config_path: str, procedure: Callable[..., admin.AdminResult], **kwargs: Any) -> None:
    try:
        reg = load_rules(config_path)
        result = procedure(reg, **kwargs)
        save_rules(reg, config_path)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    client = result.client
    side = "positive" if result.positive else "negative"
    click.echo(
        f"{_CLIENT_WORDS[client.type]} {client.name}: {side} rule set {result.rule_set.name}, "
        f"{len(result.rules)} rule(s) created"
    )
    for rule in result.rules:
        extra = f" [{', '.join(f'{k}={v}' for k, v in rule.action_context.items())}]"
        click.echo(f"\nrule {rule.name}{extra if rule.action_context else ''}:")
        click.echo(rule.condition)


@rules.command("add-global-rules")
@_config
@_client_options
@_lcr_options
def add_global_rules(config_path: str, **kw: Any) -> None:
    """Rules for all row and/or DDL LCRs (ADD_GLOBAL_RULES)."""
    _run(config_path, admin.add_global_rules, **kw)


@rules.command("add-schema-rules")
@_config
@click.option("--schema", "schema_name", required=True)
@_client_options
@_lcr_options
def add_schema_rules(config_path: str, **kw: Any) -> None:
    """Rules for one schema (ADD_SCHEMA_RULES)."""
    _run(config_path, admin.add_schema_rules, **kw)


@rules.command("add-table-rules")
@_config
@click.option("--table", "table_name", required=True, help="schema.table")
@_client_options
@_lcr_options
def add_table_rules(config_path: str, **kw: Any) -> None:
    """Rules for one table (ADD_TABLE_RULES)."""
    _run(config_path, admin.add_table_rules, **kw)


def _subset_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--source-database", default=None)(f)
    f = click.option("--include-tagged-lcr/--no-include-tagged-lcr", default=False)(f)
    f = click.option("--dml-condition", required=True, help="e.g. region_id=2")(f)
    return click.option("--table", "table_name", required=True, help="schema.table")(f)


@rules.command("add-subset-rules")
@_config
@_subset_options
@_client_options
def add_subset_rules(config_path: str, **kw: Any) -> None:
    """The insert, update and delete subset rules with row migration (ADD_SUBSET_RULES)."""
    _run(config_path, admin.add_subset_rules, **kw)


@rules.command("add-message-rule")
@_config
@click.option("--message-type", required=True)
@click.option("--rule-condition", required=True, help="condition using :msg.field")
@click.option("--streams-type", type=click.Choice(["apply", "dequeue"]), required=True)
@click.option("--streams-name", required=True)
@click.option("--queue", "queue_name", default=None)
@click.option("--inclusion-rule/--no-inclusion-rule", default=True)
def add_message_rule(config_path: str, **kw: Any) -> None:
    """A rule over user messages of one type (ADD_MESSAGE_RULE)."""
    _run(config_path, admin.add_message_rule, **kw)


@rules.command("add-global-propagation-rules")
@_config
@_propagation_options
@_lcr_options
def add_global_propagation_rules(config_path: str, **kw: Any) -> None:
    """ADD_GLOBAL_PROPAGATION_RULES."""
    _run(config_path, admin.add_global_propagation_rules, **kw)


@rules.command("add-schema-propagation-rules")
@_config
@click.option("--schema", "schema_name", required=True)
@_propagation_options
@_lcr_options
def add_schema_propagation_rules(config_path: str, **kw: Any) -> None:
    """ADD_SCHEMA_PROPAGATION_RULES."""
    _run(config_path, admin.add_schema_propagation_rules, **kw)


@rules.command("add-table-propagation-rules")
@_config
@click.option("--table", "table_name", required=True)
@_propagation_options
@_lcr_options
def add_table_propagation_rules(config_path: str, **kw: Any) -> None:
    """ADD_TABLE_PROPAGATION_RULES."""
    _run(config_path, admin.add_table_propagation_rules, **kw)


@rules.command("add-subset-propagation-rules")
@_config
@_subset_options
@_propagation_options
def add_subset_propagation_rules(config_path: str, **kw: Any) -> None:
    """ADD_SUBSET_PROPAGATION_RULES."""
    _run(config_path, admin.add_subset_propagation_rules, **kw)


@rules.command("add-message-propagation-rule")
@_config
@click.option("--message-type", required=True)
@click.option("--rule-condition", required=True)
@_propagation_options
@click.option("--inclusion-rule/--no-inclusion-rule", default=True)
def add_message_propagation_rule(config_path: str, **kw: Any) -> None:
    """ADD_MESSAGE_PROPAGATION_RULE."""
    _run(config_path, admin.add_message_propagation_rule, **kw)


@rules.command("list")
@_config
@click.option("--json", "as_json", is_flag=True, help="print JSON for scripts")
def list_rules(config_path: str, as_json: bool) -> None:
    """Clients, their rule sets and rules (like DBA_STREAMS_RULES)."""
    import json

    try:
        reg = load_rules(config_path)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(registry_to_dict(reg), indent=2))
        return
    for client in reg.clients.values():
        click.echo(f"{_CLIENT_WORDS[client.type]} {client.name} (queue {client.queue or '-'})")
        for side in ("positive", "negative"):
            set_name = getattr(client, f"{side}_rule_set")
            if set_name:
                click.echo(f"  {side} rule set {set_name}")
                for rule in reg.rule_sets[set_name].rules:
                    click.echo(f"    {rule.name} ({rule.rule_type or 'CUSTOM'}): {rule.condition}")


@rules.command("check")
@click.argument("condition")
def check(condition: str) -> None:
    """Parse and type-check a condition; report the error with its position."""
    try:
        parse(condition)
    except RuleError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo("condition OK")
