"""Compile a condition tree to a Spark ``Column``: one method per node type.

The result is a native Spark expression (no Python UDF). It follows the same value
semantics as the Python evaluator (:mod:`changeflow.rules.values`), and SQL's
three-valued logic comes from Spark itself.

Numbers compare as the contract's decimal type:

>>> DEC
'decimal(38,10)'
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from changeflow.rules import ast as A
from changeflow.rules import values as V
from changeflow.rules.evaluate import kinds_of, static_type

if TYPE_CHECKING:
    from pyspark.sql import Column

DEC = "decimal(38,10)"


def _F() -> Any:
    from pyspark.sql import functions as F

    return F


def compile_condition(node: A.Node, *, guard: bool = True) -> Column:
    """The rule condition as a Column: FALSE when its variables do not fit the message.

    Args:
        node: the condition (or what is left of it).
        guard: test the message kind; ``False`` when the caller already has.
    """
    F = _F()
    kinds = sorted(kinds_of(node))
    if not guard or len(kinds) == 3:
        return compile_node(node)
    return F.col("kind").isin(*kinds) & compile_node(node)


def compile_node(node: A.Node) -> Column:
    """Compile one condition node (dispatching on its type)."""
    return _CONDITIONS[type(node).__name__](node)


def _and(node: A.And) -> Column:
    return functools.reduce(lambda a, b: a & b, (compile_node(i) for i in node.items))


def _or(node: A.Or) -> Column:
    return functools.reduce(lambda a, b: a | b, (compile_node(i) for i in node.items))


def _not(node: A.Not) -> Column:
    return ~compile_node(node.item)


def _exists(node: A.Exists) -> Column:
    return _F().coalesce(compile_node(node.cond), _F().lit(False))


def _compare(node: A.Compare) -> Column:
    return compare(node.op, node.left, node.right)


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}  # fmt: skip


def compare(op: str, left: A.Node, right: A.Node) -> Column:
    """``left op right`` with the implicit conversions of :mod:`~changeflow.rules.values`."""
    F = _F()
    fn = _OPS[op]
    ldyn, rdyn = isinstance(left, A.MsgField), isinstance(right, A.MsgField)
    if A.NULL in (static_type(left), static_type(right)):
        return F.lit(None).cast("boolean")
    if ldyn and rdyn:
        lv, rv = _payload(left), _payload(right)  # type: ignore[arg-type]
        branches = [
            (_category(lv) == c, fn(_dynamic(lv, c), _dynamic(rv, c))) for c in _CATS
        ]
        return _case(branches, extra=_category(lv) == _category(rv))
    if ldyn or rdyn:
        dyn, other = (left, right) if ldyn else (right, left)
        v = _payload(dyn)  # type: ignore[arg-type]
        if isinstance(other, A.Literal) and other.type == A.VARCHAR2:
            branches = []
            for c in _CATS:
                lit = _literal_as(other, c)
                pair = (_dynamic(v, c), lit) if ldyn else (lit, _dynamic(v, c))
                branches.append((_category(v) == c, fn(*pair)))
            return _case(branches)
        c = V.TYPE_CATEGORY[static_type(other)]
        pair = (_dynamic(v, c), value(other)) if ldyn else (value(other), _dynamic(v, c))
        return fn(*pair)
    return fn(value(left), value(right))


_CATS = ("NUM", "STR", "DATE", "RAW")


def _case(branches: list[tuple[Column, Column]], extra: Column | None = None) -> Column:
    F = _F()
    expr = None
    for cond, result in branches:
        expr = F.when(cond, result) if expr is None else expr.when(cond, result)
    out = expr if expr is not None else F.lit(None)
    if extra is not None:
        out = F.when(extra, out)
    return out.cast("boolean")


def _in(node: A.In) -> Column:
    found = functools.reduce(
        lambda a, b: a | b, (compare("=", node.expr, item) for item in node.items)
    )
    return ~found if node.negated else found


def _like(node: A.Like) -> Column:
    text = _dynamic(_payload(node.expr), "STR") if isinstance(node.expr, A.MsgField) else value(
        node.expr
    )
    matched = text.rlike(V.like_regex(node.pattern))
    return ~matched if node.negated else matched


def _isnull(node: A.IsNull) -> Column:
    if isinstance(node.expr, A.GetValue):
        col = _get_value(node.expr)
    elif isinstance(node.expr, A.MsgField):
        col = _dynamic_any(_payload(node.expr))
    else:
        col = value(node.expr)
    return col.isNotNull() if node.negated else col.isNull()


_CONDITIONS: dict[str, Callable[[Any], Column]] = {
    "And": _and, "Or": _or, "Not": _not, "Compare": _compare, "In": _in,
    "Like": _like, "IsNull": _isnull, "Exists": _exists,
}  # fmt: skip


# -- values ----------------------------------------------------------------------------
def value(node: A.Node) -> Column:
    """A statically typed value expression, converted to its comparison category."""
    F = _F()
    if isinstance(node, A.Literal):
        return _literal_as(node, V.TYPE_CATEGORY.get(node.type, "STR"))
    if isinstance(node, A.Member):
        return _member(node)
    if isinstance(node, A.Access):
        shared = VALUES.get({}).get(value_key(node))
        return shared if shared is not None else _access(_get_value(node.arg), node.accessor)
    if isinstance(node, A.Func):
        arg = node.arg
        text = _dynamic(_payload(arg), "STR") if isinstance(arg, A.MsgField) else value(arg)
        return F.upper(text) if node.name == "UPPER" else F.lower(text)
    raise TypeError(f"not a static value: {type(node).__name__}")  # the checker forbids it


# Literal node id -> Column holding its value per row (see fastpath: rules that differ only
# in their literals are compiled once, their literals looked up by key).
PARAMETERS: contextvars.ContextVar[dict[int, Any]] = contextvars.ContextVar("rule_parameters")


# value_key(node) -> Column computed once per row for every reference to that column
# value (see fastpath: the rules of a lookup read each LCR column value once).
VALUES: contextvars.ContextVar[dict[Any, Any]] = contextvars.ContextVar("rule_values")


def value_key(node: A.Node) -> tuple[str, ...] | None:
    """What identifies a column value read (``get_value`` or its accessor), else None."""
    if isinstance(node, A.GetValue):
        return ("get_value", node.var, node.which, node.column)
    if isinstance(node, A.Access) and isinstance(node.arg, A.GetValue):
        return (*(value_key(node.arg) or ()), node.accessor)
    return None


def value_read(node: A.Node) -> Column:
    """The column value a :func:`value_key` node reads, compiled on its own."""
    token = VALUES.set({})
    try:
        return _get_value(node) if isinstance(node, A.GetValue) else value(node)
    finally:
        VALUES.reset(token)


def literal_parameter(node: A.Literal) -> tuple[str, Any, str | None]:
    """A literal in its own comparison category, as a lookup-table value.

    Returns:
        ``(stored type, value, cast)``: numbers are stored as the contract's decimal
        (already rounded to its scale, so read as they are); other values as ``string``
        or ``binary``, cast back to their comparison type where they are read, exactly
        as an inline literal is.
    """
    category = V.TYPE_CATEGORY.get(node.type, "STR")
    if category == "NUM":
        return "decimal", V.convert(_LITERAL_TYPES.get(node.type), node.value, category), None
    return _stored(node, category)


def _stored(node: A.Literal, category: str) -> tuple[str, Any, str | None]:
    converted = V.convert(_LITERAL_TYPES.get(node.type), node.value, category)
    if category == "RAW":
        return "binary", None if converted is None else bytes(converted), "binary"
    if converted is None:
        return "string", None, _SPARK_TYPES[category]
    if category == "DATE":
        return "string", converted.isoformat(sep=" "), "timestamp_ntz"
    return "string", str(converted), None if category == "STR" else _SPARK_TYPES[category]


def _literal_as(node: A.Literal, category: str) -> Column:
    param = PARAMETERS.get({}).get(id(node))
    if param is not None:
        return param
    stored, value, cast = _stored(node, category)
    column = _F().lit(bytearray(value) if stored == "binary" and value is not None else value)
    return column.cast(cast) if cast else column


_LITERAL_TYPES = {A.VARCHAR2: "VARCHAR2", A.NUMBER: "NUMBER", A.RAW: "RAW", A.DATE: "TIMESTAMP"}
_SPARK_TYPES = {"NUM": DEC, "STR": "string", "DATE": "timestamp_ntz", "RAW": "binary"}


def _member(node: A.Member) -> Column:
    F = _F()
    fn = A.MEMBER_FUNCTIONS[node.name]
    col = F.col(fn.column)
    if node.name == "is_null_tag":
        col = F.when(col.isNull(), F.lit("Y")).otherwise(F.lit("N"))
    elif fn.type == A.NUMBER:
        col = col.cast(DEC)
    if not set(A.MESSAGE_KINDS[node.var]) <= set(fn.kinds):
        col = F.when(F.col("kind").isin(*fn.kinds), col)
    return col


def _get_value(node: A.GetValue) -> Column:
    F = _F()
    shared = VALUES.get({}).get(value_key(node))
    if shared is not None:
        return shared
    column = "old_values" if node.which == "OLD" else "new_values"
    item = F.col(column).getItem(node.column)
    if node.var == "lcr":
        item = F.when(F.col("kind") == "ROW", item)
    return item


def _payload(node: A.MsgField) -> Column:
    return _F().col("payload").getItem(node.name)


def _access(v: Column, accessor: str) -> Column:
    category = {A.NUMBER: "NUM", A.VARCHAR2: "STR", A.DATE: "DATE", A.RAW: "RAW"}[
        A.ACCESSORS[accessor]
    ]
    F = _F()
    types = V.ACCESSOR_TYPES[accessor]
    if category == "NUM":  # the type test below already excludes VARCHAR2: keep code small
        inner = F.coalesce(v["dec"], v["int"].cast(DEC), v["dbl"].try_cast(DEC))
    else:
        inner = _dynamic(v, category)
    return F.when(v["type"].isin(*types), inner)


def _category(v: Column) -> Column:
    F = _F()
    expr = None
    for type_name, cat in V.CATEGORIES.items():
        cond = v["type"] == type_name
        expr = F.when(cond, F.lit(cat)) if expr is None else expr.when(cond, F.lit(cat))
    assert expr is not None
    return expr


def _dynamic_any(v: Column) -> Column:
    """NULL when the typed value holds no value (whatever its type)."""
    F = _F()
    fields = ("str", "int", "dec", "dbl", "bool", "date", "ts_ntz", "ts", "raw")
    return F.when(functools.reduce(lambda a, b: a | b, (v[f].isNotNull() for f in fields)), 1)


def _dynamic(v: Column, category: str) -> Column:
    """A typed value converted to a comparison category (see values.convert)."""
    F = _F()
    t = v["type"]
    if category == "NUM":
        number = F.coalesce(v["dec"], v["int"].cast(DEC), v["dbl"].try_cast(DEC))
        return F.when(t.isin(*V.NUMERIC_TYPES), number).when(
            t == "VARCHAR2", F.trim(v["str"]).try_cast(DEC)
        )
    if category == "STR":
        boolean = F.when(v["bool"], F.lit("TRUE")).when(~v["bool"], F.lit("FALSE"))
        return F.when(t == "VARCHAR2", v["str"]).when(t == "BOOLEAN", boolean)
    if category == "DATE":
        stamp = F.coalesce(
            v["date"].cast("timestamp_ntz"), v["ts_ntz"], v["ts"].cast("timestamp_ntz")
        )
        return F.when(t.isin(*V.DATE_TYPES), stamp)
    return F.when(t == "RAW", v["raw"])
