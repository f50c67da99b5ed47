"""``changeflow rules``: create and remove system rules (DBMS_STREAMS_ADM), list, check.

Every command takes the pipeline file (``--config``, env ``CHANGEFLOW_CONFIG``), whose
``rules:`` key names the rules file. ``add-*`` and ``remove-rule`` call the admin API,
then write the rules file back as an *edit* of what is there: comments, key order,
quoting and indentation stay (:mod:`changeflow.rules.yamledit`). They print what they
changed and how to undo it; ``--dry-run`` prints the edit as a diff and writes nothing.
A refused call leaves the file untouched.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, refuse_rules_file
from changeflow.cli.output import Col, chosen, emit, output_option
from changeflow.errors import ChangeflowError
from changeflow.rules import admin
from changeflow.rules.config import load_rules, rules_text, write_atomically
from changeflow.rules.errors import RuleError
from changeflow.rules.parser import parse
from changeflow.rules.registry import RuleRegistry

_CLIENT_WORDS = {
    "capture": "capture process", "sync_capture": "synchronous capture",
    "propagation": "propagation", "apply": "apply process", "dequeue": "messaging client",
}  # fmt: skip


@main.group("rules")
def rules() -> None:
    """Rules, rule sets and clients (Oracle Streams DBMS_STREAMS_ADM).

    The rules live in the file the pipeline's `rules:` key names (config/demo.yaml:
    `rules: demo-rules.yaml`).
    """


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the working directory if inside it."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) \
            else str(path)
    except ValueError:
        return str(path)


def rules_file(config_path: str) -> Path:
    """The rules file a pipeline names, or a refusal that says what to change."""
    from changeflow.config import load_config

    refuse_rules_file(config_path)
    try:
        cfg = load_config(config_path)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    if not cfg.rules:
        raise click.ClickException(
            f"{config_path} has no `rules:` key naming its rules file: add one, e.g. "
            f"`rules: rules.yaml` (relative to {Path(config_path).parent or '.'}), and run the "
            "command again")
    return Path(cfg.rules)


def _load(config_path: str) -> tuple[Path, RuleRegistry]:
    path = rules_file(config_path)
    try:
        return path, load_rules(path)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc


def _write(path: Path, reg: RuleRegistry, dry_run: bool) -> tuple[bool, str]:
    """Write the registry back as an edit of the file; (written?, unified diff)."""
    import yaml

    from changeflow.rules.config import registry_from_dict, registry_to_dict

    old, new = rules_text(reg, path)
    # What goes on disk must read back as exactly what the admin call produced.
    reread = registry_to_dict(registry_from_dict(yaml.safe_load(new) or {}, file=str(path)))
    if reread != registry_to_dict(reg):
        raise click.ClickException(f"{path}: the edited file would not read back as the "
                                   "rules just created (nothing was written); please report")
    diff = "".join(difflib.unified_diff(
        old.splitlines(True), new.splitlines(True), _shown(path), _shown(path)))
    if old == new or dry_run:
        return False, diff
    write_atomically(path, new)
    return True, diff


def _warn_unused(config_path: str, client_type: str, name: str) -> None:
    from changeflow.config import load_config

    kind = {"capture": "capture", "propagation": "propagation", "apply": "apply"}.get(client_type)
    if kind is None:
        return
    try:
        load_config(config_path).component(kind, name)
    except ChangeflowError:
        click.echo(f"note: {config_path} has no {kind} named {name!r}: these rules apply only "
                   f"to a {kind} of that name", err=True)


def _change(procedure: Callable[..., Any], **kwargs: Any) -> None:
    """Run one admin procedure against the pipeline's rules file, write it, report."""
    config_path: str = kwargs.pop("config_path")
    dry_run: bool = kwargs.pop("dry_run")
    fmt = chosen(kwargs.pop("output"), kwargs.pop("as_json"))
    path, reg = _load(config_path)
    try:
        result = procedure(reg, **kwargs)
    except ChangeflowError as exc:
        raise click.ClickException(f"{exc} (nothing was changed in {_shown(path)})") from exc
    written, diff = _write(path, reg, dry_run)
    report = (_removed if isinstance(result, admin.RemoveResult) else _added)(result)
    report.update(file=str(path), written=written, dry_run=dry_run)
    if fmt != "table":
        emit(report, fmt)
        return
    _print_change(report, path, written, dry_run, diff)
    if isinstance(result, admin.AdminResult):
        _warn_unused(config_path, result.client.type, result.client.name)


def _added(result: admin.AdminResult) -> dict[str, Any]:
    c = result.client
    return {"client": c.name, "client_type": c.type, "rule_set": result.rule_set.name,
            "side": "positive" if result.positive else "negative",
            "created": [{"name": r.name, "condition": r.condition,
                         "action_context": dict(r.action_context)} for r in result.rules]}


def _removed(result: admin.RemoveResult) -> dict[str, Any]:
    c = result.client
    return {"client": c.name, "client_type": c.type, "rule_set": result.rule_set.name,
            "side": "positive" if result.positive else "negative",
            "removed": result.removed, "dropped": result.dropped,
            "rule_set_empty": not result.rule_set.rules}


def _print_change(r: dict[str, Any], path: Path, written: bool, dry_run: bool,
                  diff: str) -> None:
    who = f"{_CLIENT_WORDS[r['client_type']]} {r['client']}"
    if "created" in r:
        click.echo(f"{who}: {r['side']} rule set {r['rule_set']}, "
                   f"{len(r['created'])} rule(s) created")
        for rule in r["created"]:
            ctx = ", ".join(f"{k}={v}" for k, v in rule["action_context"].items())
            click.echo(f"\nrule {rule['name']}{f' [{ctx}]' if ctx else ''}:\n{rule['condition']}")
    else:
        dropped = f"; dropped {', '.join(r['dropped'])}" if r["dropped"] else ""
        click.echo(f"{who}: removed {', '.join(r['removed'])} from its {r['side']} rule set "
                   f"{r['rule_set']}{dropped}")
        if r["rule_set_empty"]:
            effect = "discards every message" if r["side"] == "positive" else "discards nothing"
            click.echo(f"warning: rule set {r['rule_set']} is now empty: as a {r['side']} rule "
                       f"set it {effect} (Table 5-1)", err=True)
    click.echo("")
    if dry_run:
        click.echo(f"dry run: {_shown(path)} not changed; the edit would be:\n{diff}".rstrip())
    elif written:
        click.echo(f"wrote {_shown(path)} (comments and layout kept)")
        for rule in r.get("created", []):
            click.echo(f"  undo: changeflow rules remove-rule {rule['name']} --streams-type "
                       f"{r['client_type']} --streams-name {r['client']}"
                       f"{'' if r['side'] == 'positive' else ' --no-inclusion-rule'}")
    else:
        click.echo(f"{_shown(path)} unchanged")


def _common(f: Callable[..., Any]) -> Callable[..., Any]:
    """--config, --dry-run and --output, for every command that changes the rules file."""
    f = output_option(f)
    f = click.option("--dry-run", is_flag=True,
                     help="print the edit of the rules file as a diff; write nothing")(f)
    return config_option(f)


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


_STREAMS_TYPES = click.Choice(["capture", "sync_capture", "apply", "dequeue"])


def _client_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--queue", "queue_name", default=None, help="the client's queue")(f)
    f = click.option("--streams-name", required=True, help="client name")(f)
    return click.option("--streams-type", type=_STREAMS_TYPES, required=True)(f)


def _propagation_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--destination-queue", "destination_queue_name", required=True)(f)
    f = click.option("--source-queue", "source_queue_name", required=True)(f)
    return click.option("--streams-name", required=True, help="propagation name")(f)


def _subset_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--source-database", default=None)(f)
    f = click.option("--include-tagged-lcr/--no-include-tagged-lcr", default=False)(f)
    f = click.option("--dml-condition", required=True, help="e.g. region_id=2")(f)
    return click.option("--table", "table_name", required=True, help="schema.table")(f)


def _add_command(name: str, procedure: Callable[..., Any], doc: str,
                 *decorators: Callable[..., Any]) -> None:
    def command(**kw: Any) -> None:
        _change(procedure, **kw)

    command.__doc__ = doc
    for decorator in reversed(decorators):
        command = decorator(command)
    rules.command(name)(_common(command))


_TABLE = click.option("--table", "table_name", required=True, help="schema.table")
_SCHEMA = click.option("--schema", "schema_name", required=True)
_MESSAGE = [click.option("--message-type", required=True),
            click.option("--rule-condition", required=True, help="condition using :msg.field")]

_add_command("add-global-rules", admin.add_global_rules,
             "Rules for all row and/or DDL LCRs (ADD_GLOBAL_RULES).",
             _client_options, _lcr_options)
_add_command("add-schema-rules", admin.add_schema_rules,
             "Rules for one schema (ADD_SCHEMA_RULES).", _SCHEMA, _client_options, _lcr_options)
_add_command("add-table-rules", admin.add_table_rules,
             "Rules for one table (ADD_TABLE_RULES).", _TABLE, _client_options, _lcr_options)
_add_command("add-subset-rules", admin.add_subset_rules,
             "The insert, update and delete subset rules with row migration "
             "(ADD_SUBSET_RULES).", _subset_options, _client_options)
_add_command("add-message-rule", admin.add_message_rule,
             "A rule over user messages of one type (ADD_MESSAGE_RULE).", *_MESSAGE,
             click.option("--streams-type", type=click.Choice(["apply", "dequeue"]),
                          required=True),
             click.option("--streams-name", required=True),
             click.option("--queue", "queue_name", default=None),
             click.option("--inclusion-rule/--no-inclusion-rule", default=True))
_add_command("add-global-propagation-rules", admin.add_global_propagation_rules,
             "ADD_GLOBAL_PROPAGATION_RULES.", _propagation_options, _lcr_options)
_add_command("add-schema-propagation-rules", admin.add_schema_propagation_rules,
             "ADD_SCHEMA_PROPAGATION_RULES.", _SCHEMA, _propagation_options, _lcr_options)
_add_command("add-table-propagation-rules", admin.add_table_propagation_rules,
             "ADD_TABLE_PROPAGATION_RULES.", _TABLE, _propagation_options, _lcr_options)
_add_command("add-subset-propagation-rules", admin.add_subset_propagation_rules,
             "ADD_SUBSET_PROPAGATION_RULES.", _subset_options, _propagation_options)
_add_command("add-message-propagation-rule", admin.add_message_propagation_rule,
             "ADD_MESSAGE_PROPAGATION_RULE.", *_MESSAGE, _propagation_options,
             click.option("--inclusion-rule/--no-inclusion-rule", default=True))


@rules.command("remove-rule")
@click.argument("rule_name")
@click.option("--streams-type", required=True,
              type=click.Choice(["capture", "sync_capture", "propagation", "apply", "dequeue"]))
@click.option("--streams-name", required=True, help="the client whose rule set holds the rule")
@click.option("--inclusion-rule/--no-inclusion-rule", default=True, show_default=True,
              help="the client's positive (default) or negative rule set")
@click.option("--drop-unused-rule/--keep-unused-rule", default=True, show_default=True,
              help="drop the rule when no rule set holds it any more")
@_common
def remove_rule(**kw: Any) -> None:
    """Take RULE_NAME out of a client's rule set (REMOVE_RULE); undoes an add-* command."""
    _change(admin.remove_rule, **kw)


LIST_COLUMNS = [Col("client"), Col("client_type", header="type"), Col("side"),
                Col("rule_set", header="rule set"), Col("rule"),
                Col("rule_type", header="rule type"), Col("condition", width=70)]


def _list_rows(reg: RuleRegistry, client: str | None) -> list[dict[str, Any]]:
    rows = []
    for c in reg.clients.values():
        if client and c.name != client:
            continue
        for side in ("positive", "negative"):
            set_name = getattr(c, f"{side}_rule_set")
            if not set_name:
                continue
            base = {"client": c.name, "client_type": c.type, "queue": c.queue, "side": side,
                    "rule_set": set_name}
            members = reg.rule_sets[set_name].rules
            if not members:
                rows.append({**base, "rule": None, "rule_type": None,
                             "condition": "(empty rule set)"})
            rows += [{**base, "rule": r.name, "rule_type": r.rule_type or "CUSTOM",
                      "condition": r.condition, "action_context": dict(r.action_context)}
                     for r in members]
    return rows


@rules.command("list")
@config_option
@click.option("--client", default=None, help="only this client's rules")
@output_option
def list_rules(config_path: str, client: str | None, output: str, as_json: bool) -> None:
    """Clients, their rule sets and rules, one line per rule (like DBA_STREAMS_RULES)."""
    path, reg = _load(config_path)
    if client and client not in reg.clients:
        known = ", ".join(sorted(reg.clients)) or "none"
        raise click.ClickException(f"no client {client!r} in {_shown(path)} (clients: {known})")
    emit(_list_rows(reg, client), chosen(output, as_json), LIST_COLUMNS,
         empty=f"no rules in {_shown(path)}")


@rules.command("show")
@click.argument("rule_name")
@config_option
@output_option
def show_rule(rule_name: str, config_path: str, output: str, as_json: bool) -> None:
    """One rule: its full condition, action context, and the rule sets and clients using it."""
    path, reg = _load(config_path)
    rule = reg.rules.get(rule_name) or reg.rules.get(rule_name.upper())
    if rule is None:
        raise click.ClickException(f"no rule {rule_name!r} in {_shown(path)}")
    sets = [n for n, rs in reg.rule_sets.items() if any(r.name == rule.name for r in rs.rules)]
    users = [f"{c.name} ({'positive' if c.positive_rule_set in sets else 'negative'})"
             for c in reg.clients.values()
             if {c.positive_rule_set, c.negative_rule_set} & set(sets)]
    emit({"rule": rule.name, "rule_type": rule.rule_type or "CUSTOM",
          "condition": rule.condition, "action_context": dict(rule.action_context),
          "message_type": rule.message_type, "rule_sets": sets, "clients": users},
         chosen(output, as_json))


@rules.command("check")
@click.argument("condition")
def check(condition: str) -> None:
    """Parse and type-check a condition; report the error with its position."""
    try:
        parse(condition)
    except RuleError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo("condition OK")
