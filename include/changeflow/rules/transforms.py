"""Rule-based transformations: what a rule's action context declares (seed 000).

Oracle keeps a rule's transformations in its action context: declarative ones
(``DBMS_STREAMS_ADM.RENAME_TABLE``, ``RENAME_SCHEMA``, ``RENAME_COLUMN``,
``ADD_COLUMN``, ``DELETE_COLUMN``) under ``STREAMS$_INTERNAL_TRANS``, a custom one
under ``STREAMS$_TRANSFORM_FUNCTION``. changeflow does the same: the rules file
declares them per rule (``transformations:`` and the action context), and they run
on the messages for which the rule is TRUE, in the client's positive rule set, at
capture, propagation or apply.

Declarative transformations run before the custom one, ordered by ``step`` and then
by kind, as Oracle orders them: delete column, rename column, add column, rename
table, rename schema.

>>> steps = parse("R1", [{"type": "rename_column", "table": "hr.employees",
...                        "from": "first_name", "to": "given_name"}])
>>> steps[0].from_column, steps[0].to_column
('FIRST_NAME', 'GIVEN_NAME')
>>> parse("R1", [{"type": "drop_column"}])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.rules.transforms.TransformDefinitionError: rule R1: transformation 1: unknown type ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from changeflow import lcr
from changeflow.errors import TerminalError
from changeflow.values import sql_string

INTERNAL_KEY = "STREAMS$_INTERNAL_TRANS"
FUNCTION_KEY = "STREAMS$_TRANSFORM_FUNCTION"
KINDS = ("delete_column", "rename_column", "add_column", "rename_table", "rename_schema")
VALUE_TYPES = ("*", "NEW", "OLD")


class TransformDefinitionError(TerminalError):
    """A transformation is malformed (refused when the rules file is loaded)."""


@dataclass(frozen=True)
class Step:
    """One declarative transformation.

    Attributes:
        kind: one of :data:`KINDS`.
        table: ``OWNER.NAME`` it applies to (canonical); for ``rename_schema`` the schema.
        from_column, to_column: for renames of columns (``to_column`` also names the
            added column, ``from_column`` the deleted one).
        to_table: the new ``OWNER.NAME`` (``rename_table``) or schema (``rename_schema``).
        value: the added column's value, a Spark SQL expression over the LCR columns
            (``expression``) or a literal (``value``), of logical type ``value_type_name``.
        value_type: which images the step touches: ``*``, ``NEW`` or ``OLD``.
        step: the explicit order (0: by kind).
    """

    kind: str
    table: str
    from_column: str | None = None
    to_column: str | None = None
    to_table: str | None = None
    value_sql: str | None = None
    logical_type: str | None = None
    value_type: str = "*"
    step: int = 0

    @property
    def order(self) -> tuple[int, int]:
        return (self.step, KINDS.index(self.kind))

    def describe(self) -> str:
        """One line for listings (``DBA_STREAMS_TRANSFORMATIONS``)."""
        if self.kind == "rename_column":
            return f"rename column {self.table}.{self.from_column} to {self.to_column}"
        if self.kind == "delete_column":
            return f"delete column {self.table}.{self.from_column}"
        if self.kind == "add_column":
            return f"add column {self.table}.{self.to_column} = {self.value_sql}"
        if self.kind == "rename_table":
            return f"rename table {self.table} to {self.to_table}"
        return f"rename schema {self.table} to {self.to_table}"


def _name(text: Any, what: str, where: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise TransformDefinitionError(f"{where}: {what} is required")
    return ".".join(lcr.canonical_identifier(p.strip().strip('"')) for p in text.split("."))


def _table(text: Any, where: str) -> str:
    name = _name(text, "table", where)
    if name.count(".") != 1:
        raise TransformDefinitionError(f"{where}: table {text!r} must be owner.table")
    return name


def _literal(value: Any, type_name: str | None, where: str) -> tuple[str, str]:
    """A Spark SQL literal for a YAML value, and its logical type."""
    if value is None:
        return "NULL", (type_name or "VARCHAR2").upper()
    try:
        logical = (type_name or lcr.logical_type_of(value)).upper()
    except lcr.SchemaMismatchError as exc:
        raise TransformDefinitionError(f"{where}: {exc}") from None
    if logical not in lcr.LOGICAL_TYPES:
        raise TransformDefinitionError(f"{where}: unknown type {type_name!r} (one of "
                                       + ", ".join(lcr.LOGICAL_TYPES) + ")")
    if isinstance(value, bool):
        return ("true" if value else "false"), logical
    if isinstance(value, int | float):
        return repr(value), logical
    return sql_string(str(value)), logical


def parse_one(rule: str, i: int, raw: Any) -> Step:
    """One declaration (a mapping from the rules file) as a :class:`Step`."""
    where = f"rule {rule}: transformation {i}"
    if not isinstance(raw, dict):
        raise TransformDefinitionError(f"{where}: must be a mapping with a 'type'")
    kind = raw.get("type")
    if kind not in KINDS:
        raise TransformDefinitionError(f"{where}: unknown type {kind!r} (one of "
                                       + ", ".join(KINDS) + ")")
    allowed = {"type", "step", "table", "value_type", "from", "to", "column", "value",
               "expression", "value_type_name", "logical_type"}
    if unknown := sorted(set(raw) - allowed):
        raise TransformDefinitionError(f"{where}: unknown key {unknown[0]!r}")
    vt = str(raw.get("value_type", "NEW" if kind == "add_column" else "*")).upper()
    if vt not in VALUE_TYPES:
        raise TransformDefinitionError(f"{where}: value_type must be *, NEW or OLD")
    step = raw.get("step", 0)
    if not isinstance(step, int) or step < 0:
        raise TransformDefinitionError(f"{where}: step must be a number >= 0")
    if kind == "rename_schema":
        return Step(kind, _name(raw.get("from"), "from (schema)", where),
                    to_table=_name(raw.get("to"), "to (schema)", where), step=step)
    if kind == "rename_table":
        return Step(kind, _table(raw.get("from"), where), to_table=_table(raw.get("to"), where),
                    step=step)
    table = _table(raw.get("table"), where)
    if kind == "rename_column":
        return Step(kind, table, from_column=_name(raw.get("from"), "from (column)", where),
                    to_column=_name(raw.get("to"), "to (column)", where), value_type=vt,
                    step=step)
    if kind == "delete_column":
        return Step(kind, table, from_column=_name(raw.get("column"), "column", where),
                    value_type=vt, step=step)
    column = _name(raw.get("column"), "column", where)
    type_name = raw.get("logical_type") or raw.get("value_type_name")
    if "expression" in raw:
        if not type_name or str(type_name).upper() not in lcr.LOGICAL_TYPES:
            raise TransformDefinitionError(f"{where}: an expression needs logical_type (one "
                                           "of " + ", ".join(lcr.LOGICAL_TYPES) + ")")
        sql, logical = str(raw["expression"]), str(type_name).upper()
    elif "value" in raw:
        sql, logical = _literal(raw["value"], type_name, where)
    else:
        raise TransformDefinitionError(f"{where}: add_column needs a value or an expression")
    return Step(kind, table, to_column=column, value_sql=sql, logical_type=logical,
                value_type=vt, step=step)


def parse(rule: str, raw: Any) -> list[Step]:
    """A rule's declarative transformations, in execution order.

    Raises:
        TransformDefinitionError: naming the rule and the transformation's position.
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise TransformDefinitionError(f"rule {rule}: transformations must be a list")
    steps = [parse_one(rule, i, r) for i, r in enumerate(raw, 1)]
    return sorted(steps, key=lambda s: s.order)


def encode(raw: list[dict[str, Any]]) -> str:
    """The action-context text of declarations (``STREAMS$_INTERNAL_TRANS``)."""
    return json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)


def decode(text: str | None) -> list[dict[str, Any]]:
    """The declarations an action context holds."""
    return list(json.loads(text)) if text else []


def of_rule(rule: Any) -> tuple[list[Step], str | None]:
    """A :class:`~changeflow.rules.Rule`'s declarative steps and custom function name."""
    ctx = getattr(rule, "action_context", {}) or {}
    return parse(rule.name, decode(ctx.get(INTERNAL_KEY))), ctx.get(FUNCTION_KEY)
