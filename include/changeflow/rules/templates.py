"""The condition texts of system-created rules, exactly as seed 000 prints them.

>>> print(system_condition("dml", "SCHEMA", "HR", None, False, None))
((:dml.get_object_owner() = 'HR') and :dml.is_null_tag() = 'Y' )
>>> print(system_condition("dml", "GLOBAL", None, None, True, None))
(( :dml.get_source_database_name()>=' ' OR :dml.get_source_database_name()<=' ') )
"""

from __future__ import annotations

import re

from changeflow.lcr import canonical_identifier
from changeflow.rules import ast as A
from changeflow.rules.errors import RuleDefinitionError, RuleError
from changeflow.rules.parser import parse
from changeflow.rules.tokens import T, tokenize

_ACCESSOR_BY_TYPE = {
    A.NUMBER: "AccessNumber", A.VARCHAR2: "AccessVarchar2", A.DATE: "AccessDate",
    A.RAW: "AccessRaw", "INTEGER": "AccessNumber", "BINARY_DOUBLE": "AccessNumber",
    "TIMESTAMP": "AccessTimestamp",
}  # fmt: skip


def q(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def identifier(name: str) -> str:
    """An object name as the dictionary stores it: unquoted names fold to upper case."""
    name = name.strip()
    if len(name) > 2 and name[0] == name[-1] == '"':
        return name[1:-1]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$#]*", name):
        raise RuleDefinitionError(f"invalid object name {name!r}")
    return canonical_identifier(name.lower())


def table(table_name: str) -> tuple[str, str]:
    """Split ``schema.table`` into canonical owner and name."""
    parts = table_name.split(".")
    if len(parts) != 2:
        raise RuleDefinitionError(f"table name {table_name!r} must be schema.table")
    return identifier(parts[0]), identifier(parts[1])


def rule_base(name: str) -> str:
    """The prefix of generated rule names (Oracle uses the object name)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", name.split(".")[-1]).upper()
    return base[:26] or "RULE"


def _object_clause(var: str, level: str, owner: str | None, name: str | None) -> str | None:
    if level == "GLOBAL":
        return None
    o = q(owner or "")
    if level == "SCHEMA":
        if var == "dml":
            return f"(:dml.get_object_owner() = {o})"
        return f"(:ddl.get_object_owner() = {o} or :ddl.get_base_table_owner() = {o})"
    n = q(name or "")
    if var == "dml":
        return f"((:dml.get_object_owner() = {o} and :dml.get_object_name() = {n}))"
    return (
        f"((:ddl.get_object_owner() = {o} and :ddl.get_object_name() = {n}) or "
        f"(:ddl.get_base_table_owner() = {o} and :ddl.get_base_table_name() = {n}))"
    )


def system_condition(
    var: str,
    level: str,
    owner: str | None,
    name: str | None,
    include_tagged_lcr: bool,
    source_database: str | None,
) -> str:
    """The condition of a global, schema or table rule for ``:dml`` or ``:ddl``."""
    parts = [c for c in (_object_clause(var, level, owner, name),) if c]
    if not include_tagged_lcr:
        parts.append(f":{var}.is_null_tag() = 'Y'")
    if source_database:
        parts.append(f":{var}.get_source_database_name() = {q(source_database.upper())}")
    if not parts:
        # Avoids a NULL condition: TRUE for every LCR (seed 000, global rules).
        src = f":{var}.get_source_database_name()"
        return f"(( {src}>=' ' OR {src}<=' ') )"
    return "(" + " and ".join(parts) + " )"


def with_and_condition(condition: str, and_condition: str, var: str) -> str:
    """``(system_condition) AND (and_condition)`` with ``:lcr`` rewritten to ``:var``."""
    try:
        tree = parse(and_condition)
    except RuleError as exc:
        raise exc.with_context("and_condition") from None
    if A.variables(tree) - {"lcr"}:
        raise RuleDefinitionError(
            "and_condition: the variable in the condition must be :lcr, not "
            + ", ".join(sorted(f":{v}" for v in A.variables(tree) - {"lcr"}))
        )
    return f"(({condition}) and ({rename_variables(and_condition, var)}))"


def rename_variables(condition: str, var: str) -> str:
    """Replace every bind variable of a condition's text by ``:var``, keeping the rest."""
    out, last = [], 0
    for tok in tokenize(condition):
        if tok.type is T.BIND:
            out.append(condition[last : tok.offset])
            out.append(f":{var}" if var in A.MESSAGE_KINDS else f':"{var}"')
            last = tok.end
    out.append(condition[last:])
    return "".join(out).strip()


def message_condition(rule_condition: str, variable: str) -> str:
    """A message rule's condition: ``:msg`` becomes the generated ``:"VAR$_n"`` variable."""
    try:
        tree = parse(rule_condition)
    except RuleError as exc:
        raise exc.with_context("rule_condition") from None
    if any(v not in ("msg",) and not v.startswith("VAR$_") for v in A.variables(tree)):
        raise RuleDefinitionError("rule_condition: a message rule may only use :msg")
    return rename_variables(rule_condition, variable)


def subset_conditions(
    owner: str,
    name: str,
    dml_condition: str,
    include_tagged_lcr: bool,
    source_database: str | None,
    column_types: dict[str, str],
) -> list[tuple[str, str]]:
    """The (INSERT, UPDATE, DELETE) subset rule conditions, as seed 000 prints them."""
    columns = _subset_columns(dml_condition, column_types)
    prefix = f":dml.get_object_owner()={q(owner)} AND :dml.get_object_name()={q(name)} AND "
    if not include_tagged_lcr:
        prefix += ":dml.is_null_tag()='Y' AND "
    if source_database:
        prefix += f":dml.get_source_database_name()={q(source_database.upper())} AND "

    def nn(which: str) -> str:
        return " AND ".join(f"({_get_value(which, c)} IS NOT NULL)" for c in columns)

    def cond(which: str) -> str:
        return "(" + _rewrite(dml_condition, which, columns) + ")"

    def outside(which: str) -> str:
        if len(columns) != 1:
            return f"(NOT EXISTS (SELECT 1 FROM SYS.DUAL WHERE {cond(which)}))"
        col, acc = next(iter(columns.items()))
        x = f"{_get_value(which, col)}.{acc}()"
        return (
            f"((({x} IS NOT NULL) AND NOT {cond(which)}) OR "
            f"(({x} IS NULL) AND NOT EXISTS (SELECT 1 FROM SYS.DUAL WHERE {cond(which)})))"
        )

    insert = (
        f"{prefix}:dml.get_command_type() IN ('UPDATE','INSERT') AND {nn('NEW')} AND "
        f"{cond('NEW')} AND (:dml.get_command_type()='INSERT' OR ({nn('OLD')} AND "
        f"{outside('OLD')}))"
    )
    update = (
        f"{prefix}:dml.get_command_type()='UPDATE' AND {nn('NEW')} AND {nn('OLD')} AND "
        f"{cond('OLD')} AND {cond('NEW')}"
    )
    delete = (
        f"{prefix}:dml.get_command_type() IN ('UPDATE','DELETE') AND {nn('OLD')} AND "
        f"{cond('OLD')} AND (:dml.get_command_type()='DELETE' OR ({nn('NEW')} AND "
        f"{outside('NEW')}))"
    )
    return [("INSERT", insert), ("UPDATE", update), ("DELETE", delete)]


def _get_value(which: str, column: str) -> str:
    return f":dml.get_value('{which}','\"{column}\"')"


def _subset_columns(dml_condition: str, column_types: dict[str, str]) -> dict[str, str]:
    """Column -> accessor for the columns a dml_condition names, in order of appearance."""
    try:
        tree = parse(dml_condition, columns=True)
    except RuleError as exc:
        raise exc.with_context("dml_condition") from None
    types = {identifier(k): v.upper() for k, v in column_types.items()}
    found: dict[str, str] = {}
    for node in tree.walk():
        pairs = []
        if isinstance(node, A.Compare):
            pairs = [(node.left, node.right), (node.right, node.left)]
        elif isinstance(node, A.In):
            pairs = [(node.expr, i) for i in node.items]
        for col, other in pairs:
            if isinstance(col, A.MsgField) and isinstance(other, A.Literal):
                types.setdefault(col.name, other.type)
    for node in tree.walk():
        if isinstance(node, A.MsgField) and node.name not in found:
            found[node.name] = _ACCESSOR_BY_TYPE.get(types.get(node.name, ""), "AccessVarchar2")
    if not found:
        raise RuleDefinitionError(f"dml_condition {dml_condition!r} names no column")
    return found


def _rewrite(dml_condition: str, which: str, columns: dict[str, str]) -> str:
    """The dml_condition text with each column replaced by its get_value accessor."""
    tokens = tokenize(dml_condition)
    out, last = [], 0
    for i, tok in enumerate(tokens):
        is_column = tok.type is T.QUOTED or (
            tok.type is T.IDENT and tokens[i + 1].type is not T.LPAREN
        )
        if not is_column:
            continue
        name = tok.value if tok.type is T.QUOTED else tok.value.upper()
        out.append(dml_condition[last : tok.offset])
        out.append(f"{_get_value(which, name)}.{columns[name]}()")
        last = tok.end
    out.append(dml_condition[last:])
    return "".join(out).strip()
