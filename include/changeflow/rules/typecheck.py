"""Static checks of a parsed condition: types, variables and member functions.

The checker walks the tree once, computes each value's static type, refuses the
mismatches it can detect (``get_object_owner() = 2``, comparing ``get_value(...)``
without an accessor, a DDL-only member function on ``:dml``) and coerces literals the
way Oracle converts them implicitly (``AccessNumber() = '2'`` compares with 2).

>>> from changeflow.rules.parser import parse
>>> parse(":dml.get_object_owner() = 2")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.rules.errors.RuleError: line 1, column 25: cannot compare VARCHAR2 with NUMBER...
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from dataclasses import replace

from changeflow.rules import ast as A
from changeflow.rules.errors import RuleError

_VALUE_TYPES = (A.VARCHAR2, A.NUMBER, A.RAW, A.DATE, A.ANYDATA, A.DYNAMIC, A.NULL)


def parse_datetime(text: str) -> dt.datetime | None:
    """Parse an ISO date or timestamp literal; ``None`` when it is not one.

    >>> parse_datetime("2024-02-01")
    datetime.datetime(2024, 2, 1, 0, 0)
    """
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def check(node: A.Node, source: str) -> A.Node:
    """Type-check a whole condition, returning it with literals coerced.

    Raises:
        RuleError: at the position of the first problem.
    """
    checked, ty = _Checker(source).visit(node)
    if ty != A.BOOLEAN:
        raise RuleError.at(source, _pos(node), "expected a condition, found a value")
    _check_variables(checked, source)
    return checked


def _pos(node: A.Node) -> int:
    return int(getattr(node, "pos", 0))


def _check_variables(node: A.Node, source: str) -> None:
    kinds = {"ROW", "DDL", "USER"}
    seen: list[str] = []
    for n in node.walk():
        var = getattr(n, "var", None)
        if var is None:
            continue
        var_kinds = set(A.MESSAGE_KINDS.get(var, ("USER",)))
        if not kinds & var_kinds:
            raise RuleError.at(
                source,
                _pos(n),
                f"variable :{var} cannot be used with :{seen[0]} in one condition: "
                "a message is a row LCR, a DDL LCR or a user message, never two",
            )
        kinds &= var_kinds
        if var not in seen:
            seen.append(var)
        if isinstance(n, A.Member):
            allowed = A.MEMBER_FUNCTIONS[n.name].kinds
            _check_member(n.name, var, set(allowed), source, _pos(n))
        elif isinstance(n, A.GetValue):
            _check_member("get_value", var, {"ROW"}, source, _pos(n))


def _check_member(name: str, var: str, allowed: set[str], source: str, pos: int) -> None:
    if not set(A.MESSAGE_KINDS[var]) & allowed:
        what = "row LCRs" if allowed == {"ROW"} else "DDL LCRs"
        raise RuleError.at(
            source, pos, f"{name}() is a member function of {what} only; not usable with :{var}"
        )


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: A.Node, message: str) -> RuleError:
        return RuleError.at(self.source, _pos(node), message)

    def visit(self, node: A.Node) -> tuple[A.Node, str]:
        method = getattr(self, "visit_" + type(node).__name__.lower())
        return method(node)

    def value(self, node: A.Node) -> tuple[A.Node, str]:
        out, ty = self.visit(node)
        if ty == A.BOOLEAN:
            raise self.fail(node, "expected a value, found a condition")
        return out, ty

    def condition(self, node: A.Node) -> A.Node:
        out, ty = self.visit(node)
        if ty != A.BOOLEAN:
            raise self.fail(node, "expected a condition, found a value")
        return out

    # -- values --------------------------------------------------------------------
    def visit_literal(self, node: A.Literal) -> tuple[A.Node, str]:
        return node, node.type

    def visit_member(self, node: A.Member) -> tuple[A.Node, str]:
        return node, A.MEMBER_FUNCTIONS[node.name].type

    def visit_getvalue(self, node: A.GetValue) -> tuple[A.Node, str]:
        return node, A.ANYDATA

    def visit_access(self, node: A.Access) -> tuple[A.Node, str]:
        return node, A.ACCESSORS[node.accessor]

    def visit_msgfield(self, node: A.MsgField) -> tuple[A.Node, str]:
        return node, A.DYNAMIC

    def visit_func(self, node: A.Func) -> tuple[A.Node, str]:
        arg, ty = self.value(node.arg)
        if ty not in (A.VARCHAR2, A.DYNAMIC, A.NULL):
            raise self.fail(node, f"{node.name}() takes a VARCHAR2 value, not {ty}")
        return replace(node, arg=arg), A.VARCHAR2

    # -- conditions ----------------------------------------------------------------
    def visit_compare(self, node: A.Compare) -> tuple[A.Node, str]:
        left, lt = self.value(node.left)
        right, rt = self.value(node.right)
        left, right = self.unify(node, left, lt, right, rt)
        return replace(node, left=left, right=right), A.BOOLEAN

    def visit_in(self, node: A.In) -> tuple[A.Node, str]:
        expr, et = self.value(node.expr)
        items = []
        for item in node.items:
            it, ity = self.value(item)
            expr, it = self.unify(item, expr, et, it, ity)
            items.append(it)
        return replace(node, expr=expr, items=tuple(items)), A.BOOLEAN

    def visit_like(self, node: A.Like) -> tuple[A.Node, str]:
        expr, et = self.value(node.expr)
        if et not in (A.VARCHAR2, A.DYNAMIC, A.NULL):
            raise self.fail(node, f"LIKE needs a VARCHAR2 value, not {et}")
        return replace(node, expr=expr), A.BOOLEAN

    def visit_isnull(self, node: A.IsNull) -> tuple[A.Node, str]:
        expr, _ = self.value(node.expr)
        return replace(node, expr=expr), A.BOOLEAN

    def visit_and(self, node: A.And) -> tuple[A.Node, str]:
        return replace(node, items=tuple(self.condition(i) for i in node.items)), A.BOOLEAN

    def visit_or(self, node: A.Or) -> tuple[A.Node, str]:
        return replace(node, items=tuple(self.condition(i) for i in node.items)), A.BOOLEAN

    def visit_not(self, node: A.Not) -> tuple[A.Node, str]:
        return replace(node, item=self.condition(node.item)), A.BOOLEAN

    def visit_exists(self, node: A.Exists) -> tuple[A.Node, str]:
        return replace(node, cond=self.condition(node.cond)), A.BOOLEAN

    # -- typing of comparisons -----------------------------------------------------
    def unify(
        self, at: A.Node, left: A.Node, lt: str, right: A.Node, rt: str
    ) -> tuple[A.Node, A.Node]:
        for side, ty in ((left, lt), (right, rt)):
            if ty == A.ANYDATA:
                raise self.fail(
                    side,
                    "get_value() returns ANYDATA: compare it through an accessor such as "
                    ".AccessNumber(), .AccessVarchar2() or .AccessDate(), or test IS [NOT] NULL",
                )
        if lt == rt or A.NULL in (lt, rt) or A.DYNAMIC in (lt, rt):
            return left, right
        new_right = self.coerce(right, rt, lt)
        if new_right is not None:
            return left, new_right
        new_left = self.coerce(left, lt, rt)
        if new_left is not None:
            return new_left, right
        raise self.fail(at, f"cannot compare {lt} with {rt}")

    def coerce(self, node: A.Node, have: str, want: str) -> A.Node | None:
        """Convert a VARCHAR2 literal to ``want`` as Oracle would, or ``None``."""
        if not isinstance(node, A.Literal) or have != A.VARCHAR2:
            return None
        text = str(node.value).strip()
        if want == A.NUMBER:
            try:
                number = decimal.Decimal(text)
            except decimal.InvalidOperation:
                return None
            return A.Literal(number, A.NUMBER, pos=node.pos) if number.is_finite() else None
        if want == A.RAW and re.fullmatch(r"([0-9A-Fa-f]{2})*", text):
            return A.Literal(bytes.fromhex(text), A.RAW, pos=node.pos)
        if want == A.DATE:
            value = parse_datetime(text)
            return None if value is None else A.Literal(value, A.DATE, pos=node.pos)
        return None
