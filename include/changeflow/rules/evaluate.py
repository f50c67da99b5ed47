"""Evaluate a condition against one message in plain Python (no Spark).

For dequeue selectors, the HTTP service and listeners. A message is a dict with the
field names of the LCR contract (:mod:`changeflow.lcr`); ``old_values``, ``new_values``
and ``payload`` hold either decoded Python values or typed-value dicts. Results follow
SQL three-valued logic: ``True``, ``False`` or ``None`` (unknown).

>>> from changeflow.rules.parser import parse
>>> msg = {"kind": "ROW", "object_owner": "HR", "tag": None,
...        "new_values": {"REGION_ID": 2}}
>>> evaluate(parse(":dml.get_object_owner() = 'HR' AND :dml.is_null_tag() = 'Y'"), msg)
True
>>> evaluate(parse(":dml.get_value('OLD','\\"REGION_ID\\"').AccessNumber() = 2"), msg) is None
True
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from changeflow.rules import ast as A
from changeflow.rules import values as V

Message = Mapping[str, Any]
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip
# A typed value: (logical type, Python value); a missing get_value() is None.
Typed = tuple[str | None, Any]


def kinds_of(node: A.Node) -> frozenset[str]:
    """The message kinds a condition can be TRUE for, from the variables it uses.

    >>> from changeflow.rules.parser import parse
    >>> sorted(kinds_of(parse(":lcr.is_null_tag() = 'Y'")))
    ['DDL', 'ROW']
    """
    kinds = {"ROW", "DDL", "USER"}
    for var in A.variables(node):
        kinds &= set(A.MESSAGE_KINDS.get(var, ("USER",)))
    return frozenset(kinds)


def evaluate(node: A.Node, message: Message) -> bool | None:
    """Evaluate a condition for one message; FALSE when its variables do not apply.

    A ``:dml`` condition is FALSE for DDL LCRs and user messages, and so on.
    """
    if message.get("kind") not in kinds_of(node):
        return False
    return _cond(node, message)


def _cond(node: A.Node, m: Message) -> bool | None:
    return _CONDITIONS[type(node).__name__](node, m)


def _and(node: A.And, m: Message) -> bool | None:
    result: bool | None = True
    for item in node.items:
        value = _cond(item, m)
        if value is False:
            return False
        if value is None:
            result = None
    return result


def _or(node: A.Or, m: Message) -> bool | None:
    result: bool | None = False
    for item in node.items:
        value = _cond(item, m)
        if value is True:
            return True
        if value is None:
            result = None
    return result


def _not(node: A.Not, m: Message) -> bool | None:
    value = _cond(node.item, m)
    return None if value is None else not value


def _compare(node: A.Compare, m: Message) -> bool | None:
    return compare(node.op, node.left, node.right, m)


def compare(op: str, left: A.Node, right: A.Node, m: Message) -> bool | None:
    """Compare two value expressions with SQL NULL semantics."""
    lt, lv = _value(left, m)
    rt, rv = _value(right, m)
    if lv is None or rv is None:
        return None
    category = _category(left, lt, right, rt)
    if category is None:
        return None
    a, b = V.convert(lt, lv, category), V.convert(rt, rv, category)
    if a is None or b is None:
        return None
    return _OPS[op](a, b)


def _category(left: A.Node, lt: str | None, right: A.Node, rt: str | None) -> str | None:
    ldyn, rdyn = isinstance(left, A.MsgField), isinstance(right, A.MsgField)
    if ldyn and rdyn:
        lc, rc = V.category_of(lt), V.category_of(rt)
        return lc if lc == rc else None
    if ldyn or rdyn:
        dyn_t, other = (lt, right) if ldyn else (rt, left)
        if isinstance(other, A.Literal) and other.type == A.VARCHAR2:
            return V.category_of(dyn_t)
        return V.TYPE_CATEGORY.get(static_type(other))
    return V.TYPE_CATEGORY.get(static_type(left))


def static_type(node: A.Node) -> str:
    """The static type of a (checked) value expression."""
    if isinstance(node, A.Literal):
        return node.type
    if isinstance(node, A.Member):
        return A.MEMBER_FUNCTIONS[node.name].type
    if isinstance(node, A.Access):
        return A.ACCESSORS[node.accessor]
    if isinstance(node, A.Func):
        return A.VARCHAR2
    return A.DYNAMIC if isinstance(node, A.MsgField) else A.ANYDATA


def _in(node: A.In, m: Message) -> bool | None:
    result: bool | None = False
    for item in node.items:
        value = compare("=", node.expr, item, m)
        if value is True:
            result = True
            break
        if value is None:
            result = None
    return None if result is None else result != node.negated


def _like(node: A.Like, m: Message) -> bool | None:
    ty, value = _value(node.expr, m)
    text = V.convert(ty, value, "STR") if isinstance(node.expr, A.MsgField) else value
    if text is None:
        return None
    return bool(re.match(V.like_regex(node.pattern), text)) != node.negated


def _isnull(node: A.IsNull, m: Message) -> bool:
    if isinstance(node.expr, A.GetValue):
        present = _get_value(node.expr, m) is not None
        return present == node.negated
    _, value = _value(node.expr, m)
    return (value is None) != node.negated


def _exists(node: A.Exists, m: Message) -> bool:
    return _cond(node.cond, m) is True


_CONDITIONS: dict[str, Callable[[Any, Message], bool | None]] = {
    "And": _and, "Or": _or, "Not": _not, "Compare": _compare, "In": _in,
    "Like": _like, "IsNull": _isnull, "Exists": _exists,
}  # fmt: skip


# -- values ----------------------------------------------------------------------------
def _value(node: A.Node, m: Message) -> Typed:
    if isinstance(node, A.Literal):
        return (_LITERAL_TYPES.get(node.type), node.value)
    if isinstance(node, A.Member):
        return _member(node, m)
    if isinstance(node, A.Access):
        got = _get_value(node.arg, m)
        if got is None or got[0] not in V.ACCESSOR_TYPES[node.accessor]:
            return (None, None)
        return got
    if isinstance(node, A.MsgField):
        return V.typed((m.get("payload") or {}).get(node.name))
    if isinstance(node, A.Func):
        ty, value = _value(node.arg, m)
        text = V.convert(ty, value, "STR")
        if text is None:
            return ("VARCHAR2", None)
        return ("VARCHAR2", text.upper() if node.name == "UPPER" else text.lower())
    raise TypeError(f"not a value: {type(node).__name__}")  # the checker forbids this


_LITERAL_TYPES = {A.VARCHAR2: "VARCHAR2", A.NUMBER: "NUMBER", A.RAW: "RAW", A.DATE: "TIMESTAMP"}


def _member(node: A.Member, m: Message) -> Typed:
    fn = A.MEMBER_FUNCTIONS[node.name]
    if m.get("kind") not in fn.kinds:
        return (None, None)
    value = m.get(fn.column)
    if node.name == "is_null_tag":
        return ("VARCHAR2", "Y" if value is None else "N")
    if fn.type == A.RAW and isinstance(value, str):
        value = bytes.fromhex(value)
    return (_LITERAL_TYPES[fn.type], value)


def _get_value(node: A.GetValue, m: Message) -> Typed | None:
    if m.get("kind") != "ROW":
        return None
    values = m.get("old_values" if node.which == "OLD" else "new_values")
    if not values or node.column not in values:
        return None
    return V.typed(values[node.column])
