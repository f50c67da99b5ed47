"""System-created rules: a mirror of Oracle's DBMS_STREAMS_ADM.

Each procedure creates the client when it is missing, creates its positive or
negative rule set when missing, and adds 0, 1, 2 or 3 rules whose conditions are the
ones seed 000 prints, character for character. The conditions are built by
:mod:`changeflow.rules.templates`; this module does the bookkeeping.

>>> from changeflow.rules.registry import RuleRegistry
>>> reg = RuleRegistry()
>>> res = add_table_rules(reg, "hr.locations", "apply", "apply", "streams_queue",
...     include_dml=True, include_ddl=False, source_database="dbs1.example.com")
>>> for line in res.rules[0].condition.split(" and :"):
...     print(line)
(((:dml.get_object_owner() = 'HR'
dml.get_object_name() = 'LOCATIONS'))
dml.is_null_tag() = 'Y'
dml.get_source_database_name() = 'DBS1.EXAMPLE.COM' )
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from changeflow.rules import templates as tpl
from changeflow.rules.errors import RuleDefinitionError
from changeflow.rules.migration import ROW_SUBSET_KEY
from changeflow.rules.registry import RuleRegistry
from changeflow.rules.ruleset import Client, Rule, RuleSet

F = TypeVar("F", bound=Callable[..., Any])


def _atomic(fn: F) -> F:
    """Run a procedure in a registry transaction: a refused call changes nothing."""

    @functools.wraps(fn)
    def wrapper(reg: RuleRegistry, *args: Any, **kwargs: Any) -> Any:
        with reg.transaction():
            return fn(reg, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


@dataclass
class AdminResult:
    """What one procedure call did: the client, the rule set and the rules it created."""

    client: Client
    rule_set: RuleSet
    positive: bool
    rules: list[Rule]


def _target(
    reg: RuleRegistry,
    streams_type: str,
    streams_name: str,
    queue_name: str | None,
    inclusion_rule: bool,
    destination_queue: str | None = None,
) -> tuple[Client, RuleSet]:
    client = reg.ensure_client(
        streams_name, streams_type, queue=queue_name, destination_queue=destination_queue
    )
    current = client.positive_rule_set if inclusion_rule else client.negative_rule_set
    if current is None:
        rule_set = reg.create_rule_set()
        reg.attach(client.name, rule_set.name, positive=inclusion_rule)
    else:
        rule_set = reg.rule_set(current)
    return client, rule_set


def _create(
    reg: RuleRegistry,
    target: tuple[Client, RuleSet],
    positive: bool,
    specs: list[tuple[str, str, dict[str, str], str]],
    message_type: str | None = None,
) -> AdminResult:
    """Create (and validate) every rule first, then register them all: all or nothing."""
    client, rule_set = target
    rules = [
        Rule(name, condition, action, message_type=message_type, rule_type=rule_type)
        for name, condition, action, rule_type in specs
    ]
    if not positive and any(r.subset_action for r in rules):
        raise RuleDefinitionError("subset rules go in positive rule sets only")
    for rule in rules:
        reg.add_rule(rule)
        reg.add_to_rule_set(rule_set.name, rule.name)
    return AdminResult(client, rule_set, positive, rules)


def _lcr_rules(
    reg: RuleRegistry,
    level: str,
    owner: str | None,
    name: str | None,
    opts: dict,
    target: tuple[Client, RuleSet],
) -> AdminResult:
    specs: list[tuple[str, str, dict[str, str], str]] = []
    base = name or owner or target[0].name.upper()
    for var, wanted in (("dml", opts["include_dml"]), ("ddl", opts["include_ddl"])):
        if not wanted:
            continue
        condition = tpl.system_condition(
            var, level, owner, name, opts["include_tagged_lcr"], opts["source_database"]
        )
        if opts.get("and_condition"):
            condition = tpl.with_and_condition(condition, opts["and_condition"], var)
        specs.append((reg.unique_rule_name(tpl.rule_base(base)), condition, {}, level))
    return _create(reg, target, opts["inclusion_rule"], specs)


def _check_streams_type(streams_type: str, level: str, inclusion_rule: bool) -> None:
    kind = streams_type.lower()
    if kind == "propagation":
        raise RuleDefinitionError(
            "use the *_propagation_rules procedures for propagations (they need queues)"
        )
    if kind == "sync_capture" and (level in ("GLOBAL", "SCHEMA") or not inclusion_rule):
        raise RuleDefinitionError(
            "a synchronous capture takes only table and subset rules in a positive rule set"
        )


@_atomic
def add_global_rules(
    reg: RuleRegistry,
    streams_type: str,
    streams_name: str,
    queue_name: str | None = None,
    *,
    include_dml: bool = True,
    include_ddl: bool = False,
    include_tagged_lcr: bool = False,
    source_database: str | None = None,
    inclusion_rule: bool = True,
    and_condition: str | None = None,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_GLOBAL_RULES: rules for every row and/or DDL LCR."""
    _check_streams_type(streams_type, "GLOBAL", inclusion_rule)
    target = _target(reg, streams_type, streams_name, queue_name, inclusion_rule)
    opts = dict(locals())
    return _lcr_rules(reg, "GLOBAL", None, None, opts, target)


@_atomic
def add_schema_rules(
    reg: RuleRegistry,
    schema_name: str,
    streams_type: str,
    streams_name: str,
    queue_name: str | None = None,
    *,
    include_dml: bool = True,
    include_ddl: bool = False,
    include_tagged_lcr: bool = False,
    source_database: str | None = None,
    inclusion_rule: bool = True,
    and_condition: str | None = None,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_SCHEMA_RULES: rules for one schema's row and/or DDL LCRs."""
    _check_streams_type(streams_type, "SCHEMA", inclusion_rule)
    owner = tpl.identifier(schema_name)
    target = _target(reg, streams_type, streams_name, queue_name, inclusion_rule)
    opts = dict(locals())
    return _lcr_rules(reg, "SCHEMA", owner, None, opts, target)


@_atomic
def add_table_rules(
    reg: RuleRegistry,
    table_name: str,
    streams_type: str,
    streams_name: str,
    queue_name: str | None = None,
    *,
    include_dml: bool = True,
    include_ddl: bool = False,
    include_tagged_lcr: bool = False,
    source_database: str | None = None,
    inclusion_rule: bool = True,
    and_condition: str | None = None,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_TABLE_RULES: rules for one table's row and/or DDL LCRs."""
    _check_streams_type(streams_type, "TABLE", inclusion_rule)
    owner, name = tpl.table(table_name)
    target = _target(reg, streams_type, streams_name, queue_name, inclusion_rule)
    opts = dict(locals())
    return _lcr_rules(reg, "TABLE", owner, name, opts, target)


@_atomic
def add_subset_rules(
    reg: RuleRegistry,
    table_name: str,
    dml_condition: str,
    streams_type: str = "apply",
    streams_name: str | None = None,
    queue_name: str | None = None,
    *,
    include_tagged_lcr: bool = False,
    source_database: str | None = None,
    column_types: dict[str, str] | None = None,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_SUBSET_RULES: the insert, update and delete subset rules.

    Args:
        column_types: logical type (NUMBER, VARCHAR2, DATE, RAW) of columns whose type
            cannot be inferred from the literal they are compared with.
    """
    _check_streams_type(streams_type, "TABLE", True)
    if not streams_name:
        raise RuleDefinitionError("add_subset_rules needs a streams_name")
    target = _target(reg, streams_type, streams_name, queue_name, True)
    return _subset(reg, target, table_name, dml_condition, include_tagged_lcr,
                   source_database, column_types)  # fmt: skip


def _subset(
    reg: RuleRegistry,
    target: tuple[Client, RuleSet],
    table_name: str,
    dml_condition: str,
    include_tagged_lcr: bool,
    source_database: str | None,
    column_types: dict[str, str] | None,
) -> AdminResult:
    owner, name = tpl.table(table_name)
    conditions = tpl.subset_conditions(
        owner, name, dml_condition, include_tagged_lcr, source_database, column_types or {}
    )
    specs = [
        (reg.unique_rule_name(tpl.rule_base(name)), cond, {ROW_SUBSET_KEY: op}, "SUBSET")
        for op, cond in conditions
    ]
    return _create(reg, target, True, specs)


@_atomic
def add_message_rule(
    reg: RuleRegistry,
    message_type: str,
    rule_condition: str,
    streams_type: str,
    streams_name: str,
    queue_name: str | None = None,
    *,
    inclusion_rule: bool = True,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_MESSAGE_RULE: one rule over user messages of one type."""
    if streams_type.lower() not in ("apply", "dequeue", "messaging", "messaging_client"):
        raise RuleDefinitionError(
            "message rules are for apply processes and messaging clients (streams_type "
            "'apply' or 'dequeue'); use add_message_propagation_rule for propagations"
        )
    target = _target(reg, streams_type, streams_name, queue_name, inclusion_rule)
    return _message(reg, target, message_type, rule_condition, inclusion_rule)


def _message(
    reg: RuleRegistry,
    target: tuple[Client, RuleSet],
    message_type: str,
    rule_condition: str,
    inclusion_rule: bool,
) -> AdminResult:
    condition = tpl.message_condition(rule_condition, f"VAR$_{reg.next_id()}")
    name = reg.unique_rule_name(tpl.rule_base(message_type))
    spec: tuple[str, str, dict[str, str], str] = (name, condition, {}, "MESSAGE")
    return _create(reg, target, inclusion_rule, [spec], message_type=message_type.upper())


@_atomic
def add_global_propagation_rules(
    reg: RuleRegistry,
    streams_name: str,
    source_queue_name: str,
    destination_queue_name: str,
    *,
    include_dml: bool = True,
    include_ddl: bool = False,
    include_tagged_lcr: bool = False,
    source_database: str | None = None,
    inclusion_rule: bool = True,
    and_condition: str | None = None,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_GLOBAL_PROPAGATION_RULES."""
    target = _target(reg, "propagation", streams_name, source_queue_name, inclusion_rule,
                     destination_queue_name)  # fmt: skip
    return _lcr_rules(reg, "GLOBAL", None, None, dict(locals()), target)


@_atomic
def add_schema_propagation_rules(
    reg: RuleRegistry,
    schema_name: str,
    streams_name: str,
    source_queue_name: str,
    destination_queue_name: str,
    *,
    include_dml: bool = True,
    include_ddl: bool = False,
    include_tagged_lcr: bool = False,
    source_database: str | None = None,
    inclusion_rule: bool = True,
    and_condition: str | None = None,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_SCHEMA_PROPAGATION_RULES."""
    owner = tpl.identifier(schema_name)
    target = _target(reg, "propagation", streams_name, source_queue_name, inclusion_rule,
                     destination_queue_name)  # fmt: skip
    return _lcr_rules(reg, "SCHEMA", owner, None, dict(locals()), target)


@_atomic
def add_table_propagation_rules(
    reg: RuleRegistry,
    table_name: str,
    streams_name: str,
    source_queue_name: str,
    destination_queue_name: str,
    *,
    include_dml: bool = True,
    include_ddl: bool = False,
    include_tagged_lcr: bool = False,
    source_database: str | None = None,
    inclusion_rule: bool = True,
    and_condition: str | None = None,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_TABLE_PROPAGATION_RULES."""
    owner, name = tpl.table(table_name)
    target = _target(reg, "propagation", streams_name, source_queue_name, inclusion_rule,
                     destination_queue_name)  # fmt: skip
    return _lcr_rules(reg, "TABLE", owner, name, dict(locals()), target)


@_atomic
def add_subset_propagation_rules(
    reg: RuleRegistry,
    table_name: str,
    dml_condition: str,
    streams_name: str,
    source_queue_name: str,
    destination_queue_name: str,
    *,
    include_tagged_lcr: bool = False,
    source_database: str | None = None,
    column_types: dict[str, str] | None = None,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_SUBSET_PROPAGATION_RULES."""
    target = _target(reg, "propagation", streams_name, source_queue_name, True,
                     destination_queue_name)  # fmt: skip
    return _subset(reg, target, table_name, dml_condition, include_tagged_lcr,
                   source_database, column_types)  # fmt: skip


@_atomic
def add_message_propagation_rule(
    reg: RuleRegistry,
    message_type: str,
    rule_condition: str,
    streams_name: str,
    source_queue_name: str,
    destination_queue_name: str,
    *,
    inclusion_rule: bool = True,
) -> AdminResult:
    """DBMS_STREAMS_ADM.ADD_MESSAGE_PROPAGATION_RULE."""
    target = _target(reg, "propagation", streams_name, source_queue_name, inclusion_rule,
                     destination_queue_name)  # fmt: skip
    return _message(reg, target, message_type, rule_condition, inclusion_rule)


@dataclass
class RemoveResult:
    """What a REMOVE_RULE call did: the rules taken out of a rule set, those dropped."""

    client: Client
    rule_set: RuleSet
    positive: bool
    removed: list[str]
    dropped: list[str]


def remove_rule(
    reg: RuleRegistry,
    rule_name: str | None,
    streams_type: str,
    streams_name: str,
    *,
    drop_unused_rule: bool = True,
    inclusion_rule: bool = True,
) -> RemoveResult:
    """DBMS_STREAMS_ADM.REMOVE_RULE: take a rule out of a client's rule set.

    ``rule_name=None`` removes every rule of the rule set (the rule set stays, empty).
    With ``drop_unused_rule`` a removed rule that no rule set holds any more is dropped.
    A refused call changes nothing.

    >>> reg = RuleRegistry()
    >>> added = add_table_rules(reg, "hr.locations", "apply", "ap", "q")
    >>> res = remove_rule(reg, added.rules[0].name, "apply", "ap")
    >>> res.removed == res.dropped == ["LOCATIONS2"], reg.rules, reg.rule_set("RULESET$_1").rules
    (True, {}, [])

    Raises:
        RuleDefinitionError: the client is not defined or of another type, it has no
            rule set on that side, or the rule is not in it.
    """
    client = reg.clients.get(streams_name)
    if client is None:
        known = ", ".join(sorted(reg.clients)) or "none"
        raise RuleDefinitionError(f"client {streams_name} is not defined (defined: {known})")
    wanted = Client(streams_name, streams_type).type
    if client.type != wanted:
        raise RuleDefinitionError(f"client {streams_name} is a {client.type} client, "
                                  f"not a {wanted} client")
    side = "positive" if inclusion_rule else "negative"
    set_name = client.positive_rule_set if inclusion_rule else client.negative_rule_set
    if set_name is None:
        raise RuleDefinitionError(f"client {streams_name} has no {side} rule set")
    rule_set = reg.rule_set(set_name)
    held = [r.name for r in rule_set.rules]
    if rule_name is None:
        names = held
    else:
        match = [n for n in held if n == rule_name or n.upper() == rule_name.upper()]
        if not match:
            raise RuleDefinitionError(
                f"rule {rule_name} is not in the {side} rule set {set_name} of {streams_name} "
                f"(it holds: {', '.join(held) or 'no rules'})")
        names = match
    rule_set.rules = [r for r in rule_set.rules if r.name not in names]
    rule_set.changed()
    still_used = {r.name for rs in reg.rule_sets.values() for r in rs.rules}
    dropped = [n for n in names if drop_unused_rule and n not in still_used]
    for name in dropped:
        del reg.rules[name]
    return RemoveResult(client, rule_set, inclusion_rule, names, dropped)
