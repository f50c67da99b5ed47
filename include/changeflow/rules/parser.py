"""Recursive-descent parser of rule conditions.

:func:`parse` turns condition text into a type-checked tree (:mod:`changeflow.rules.ast`).
Every error is a :class:`~changeflow.rules.errors.RuleError` with line, column and a
highlighted excerpt, raised when the rule is defined, never later inside a job.

>>> parse(":dml.get_value('NEW','\\"REGION_ID\\"').AccessNumber()=2").op
'='
>>> parse(":dml.get_owner() = 'HR'")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.rules.errors.RuleError: line 1, column 6: unknown LCR member function get_owner()...
"""

from __future__ import annotations

import datetime as dt
import decimal
import re

from changeflow.rules import ast as A
from changeflow.rules.errors import RuleError
from changeflow.rules.tokens import T, Token, tokenize
from changeflow.rules.typecheck import check, parse_datetime

MAX_DEPTH = 60
_MSG_VAR = re.compile(r"VAR\$_\d+")
_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")


def parse(source: str, *, columns: bool = False) -> A.Node:
    """Parse and type-check a rule condition.

    Args:
        source: the condition text, e.g. ``:dml.get_object_owner() = 'HR'``.
        columns: parse a subset rule's ``dml_condition`` instead, where bare names are
            table columns (returned as :class:`~changeflow.rules.ast.MsgField` nodes of
            variable ``column``) and bind variables are refused.

    Returns:
        The expression tree; its top node is a condition (TRUE/FALSE/NULL valued).

    Raises:
        RuleError: the condition is malformed, uses an unknown variable or function,
            or compares values of incompatible types.
    """
    if not isinstance(source, str):
        raise RuleError(f"a condition must be text, not {type(source).__name__}")
    if not source.strip():
        raise RuleError.at(source, 0, "the condition is empty")
    tree = _Parser(source, columns=columns).parse()
    return check(tree, source)


class _Parser:
    def __init__(self, source: str, *, columns: bool = False) -> None:
        self.source = source
        self.columns = columns
        self.tokens = tokenize(source)
        self.i = 0
        self.depth = 0

    # -- token helpers -------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        if tok.type is not T.EOF:
            self.i += 1
        return tok

    def error(self, message: str, tok: Token | None = None) -> RuleError:
        return RuleError.at(self.source, (tok or self.tok).offset, message)

    def expect(self, ttype: T, what: str | None = None) -> Token:
        if self.tok.type is not ttype:
            raise self.error(f"expected {what or ttype.value}, found {_describe(self.tok)}")
        return self.advance()

    def expect_keyword(self, word: str) -> Token:
        if not self.tok.is_keyword(word):
            raise self.error(f"expected {word}, found {_describe(self.tok)}")
        return self.advance()

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"the condition is nested more than {MAX_DEPTH} levels deep")

    # -- grammar -------------------------------------------------------------------
    def parse(self) -> A.Node:
        node = self.or_expr()
        if self.tok.type is not T.EOF:
            raise self.error(f"unexpected {_describe(self.tok)} after a complete condition")
        return node

    def or_expr(self) -> A.Node:
        start = self.tok.offset
        items = [self.and_expr()]
        while self.tok.is_keyword("OR"):
            self.advance()
            items.append(self.and_expr())
        return items[0] if len(items) == 1 else A.Or(_flatten(items, A.Or), pos=start)

    def and_expr(self) -> A.Node:
        start = self.tok.offset
        items = [self.not_expr()]
        while self.tok.is_keyword("AND"):
            self.advance()
            items.append(self.not_expr())
        return items[0] if len(items) == 1 else A.And(_flatten(items, A.And), pos=start)

    def not_expr(self) -> A.Node:
        if self.tok.is_keyword("NOT"):
            tok = self.advance()
            self.nest()
            item = self.not_expr()
            self.depth -= 1
            return A.Not(item, pos=tok.offset)
        return self.predicate()

    def predicate(self) -> A.Node:
        left = self.primary()
        tok = self.tok
        if tok.type is T.OP and tok.value in _COMPARISONS:
            self.advance()
            return A.Compare(tok.value, left, self.primary(), pos=tok.offset)
        if tok.is_keyword("IS"):
            self.advance()
            negated = bool(self.tok.is_keyword("NOT") and self.advance())
            self.expect_keyword("NULL")
            return A.IsNull(left, negated, pos=tok.offset)
        negated = bool(tok.is_keyword("NOT") and self.advance())
        if self.tok.is_keyword("IN"):
            return self.in_list(left, negated, tok)
        if self.tok.is_keyword("LIKE"):
            self.advance()
            pattern = self.expect(T.STRING, "a string pattern after LIKE")
            return A.Like(left, pattern.value, negated, pos=tok.offset)
        if negated:
            raise self.error(f"expected IN or LIKE after NOT, found {_describe(self.tok)}")
        return left

    def in_list(self, left: A.Node, negated: bool, tok: Token) -> A.Node:
        self.advance()
        self.expect(T.LPAREN, "'(' after IN")
        items = [self.primary()]
        while self.tok.type is T.COMMA:
            self.advance()
            items.append(self.primary())
        self.expect(T.RPAREN, "',' or ')' in the IN list")
        return A.In(left, tuple(items), negated, pos=tok.offset)

    def primary(self) -> A.Node:
        tok = self.tok
        if tok.type is T.STRING:
            self.advance()
            return A.Literal(tok.value, A.VARCHAR2, pos=tok.offset)
        if tok.type is T.NUMBER or (tok.type is T.OP and tok.value == "-"):
            return self.number()
        if tok.is_keyword("NULL"):
            self.advance()
            return A.Literal(None, A.NULL, pos=tok.offset)
        if tok.is_keyword("DATE", "TIMESTAMP"):
            self.advance()
            text = self.expect(T.STRING, f"a string after {tok.value}")
            return A.Literal(_datetime(self, text), A.DATE, pos=tok.offset)
        if tok.is_keyword("EXISTS"):
            return self.exists()
        if tok.type is T.LPAREN:
            self.advance()
            self.nest()
            node = self.or_expr()
            self.depth -= 1
            self.expect(T.RPAREN, "')'")
            return node
        if tok.type is T.BIND:
            if self.columns:
                raise self.error("a dml_condition names columns directly, without variables")
            return self.variable()
        if self.columns and tok.type in (T.IDENT, T.QUOTED):
            nxt = self.tokens[self.i + 1]
            if tok.type is T.QUOTED or nxt.type is not T.LPAREN:
                self.advance()
                name = tok.value if tok.type is T.QUOTED else tok.value.upper()
                return A.MsgField("column", name, pos=tok.offset)
        if tok.type is T.IDENT:
            return self.function()
        raise self.error(f"expected a value or a condition, found {_describe(tok)}")

    def number(self) -> A.Node:
        start = self.tok
        sign = ""
        if start.type is T.OP:
            self.advance()
            sign = "-"
        tok = self.expect(T.NUMBER, "a number")
        try:
            value = decimal.Decimal(sign + tok.value)
        except decimal.InvalidOperation:
            raise self.error(f"invalid number {tok.text!r}", tok) from None
        if not value.is_finite() or abs(value.adjusted()) > 125:
            raise self.error(f"number {tok.text!r} is out of range", tok)
        return A.Literal(value, A.NUMBER, pos=start.offset)

    def exists(self) -> A.Node:
        tok = self.advance()
        self.expect(T.LPAREN, "'(' after EXISTS")
        self.expect_keyword("SELECT")
        self.expect(T.NUMBER, "1 (only SELECT 1 FROM SYS.DUAL WHERE ... is supported)")
        self.expect_keyword("FROM")
        table = self.expect(T.IDENT, "SYS.DUAL")
        name = table.value.upper()
        if name == "SYS" and self.tok.type is T.DOT:
            self.advance()
            name = self.expect(T.IDENT, "DUAL").value.upper()
        if name != "DUAL":
            raise self.error("only SELECT 1 FROM SYS.DUAL WHERE ... is supported", table)
        self.expect_keyword("WHERE")
        self.nest()
        cond = self.or_expr()
        self.depth -= 1
        self.expect(T.RPAREN, "')' closing EXISTS")
        return A.Exists(cond, pos=tok.offset)

    def function(self) -> A.Node:
        tok = self.advance()
        name = tok.value.upper()
        if self.tok.type is not T.LPAREN:
            raise self.error(
                f"unknown identifier {tok.text!r}: values are written as :dml.function(), "
                ":msg.field or literals",
                tok,
            )
        self.advance()
        if name == "HEXTORAW":
            arg = self.expect(T.STRING, "a string literal of hexadecimal digits")
            self.expect(T.RPAREN, "')'")
            return A.Literal(_hex(self, arg), A.RAW, pos=tok.offset)
        if name in A.SCALAR_FUNCTIONS:
            self.nest()
            value = self.primary()
            self.depth -= 1
            self.expect(T.RPAREN, "')'")
            return A.Func(name, value, pos=tok.offset)
        known = ", ".join(("HEXTORAW", *A.SCALAR_FUNCTIONS))
        raise self.error(f"unknown function {tok.text}(); known functions: {known}", tok)

    def variable(self) -> A.Node:
        tok = self.advance()
        var = tok.value
        if var not in A.MESSAGE_KINDS and not _MSG_VAR.fullmatch(var):
            raise self.error(
                f"unknown variable {tok.text}: use :dml, :ddl, :lcr or :msg", tok
            )
        self.expect(T.DOT, f"'.' after {tok.text}")
        name = self.tok
        if name.type not in (T.IDENT, T.QUOTED) and name.type is not T.KEYWORD:
            raise self.error(f"expected a member name after {tok.text}., found {_describe(name)}")
        self.advance()
        if var == "msg" or _MSG_VAR.fullmatch(var):
            if self.tok.type is T.LPAREN:
                raise self.error("message attributes are read as :msg.field, without '()'")
            field = name.value if name.type is T.QUOTED else name.value.upper()
            return A.MsgField(var, field, pos=tok.offset)
        return self.member(var, name, tok)

    def member(self, var: str, name: Token, var_tok: Token) -> A.Node:
        func = name.value.lower()
        self.expect(T.LPAREN, f"'(' after {name.text}")
        if func == "get_value":
            node: A.Node = self.get_value(var, var_tok)
        elif func in A.MEMBER_FUNCTIONS:
            self.expect(T.RPAREN, f"')': {name.text}() takes no arguments")
            node = A.Member(var, func, pos=var_tok.offset)
        else:
            known = ", ".join(sorted([*A.MEMBER_FUNCTIONS, "get_value"]))
            raise self.error(f"unknown LCR member function {name.text}(); known: {known}", name)
        if self.tok.type is T.DOT:
            dot = self.advance()
            acc = self.expect(T.IDENT, "an accessor such as AccessNumber")
            if not isinstance(node, A.GetValue) or acc.value.lower() not in A.ACCESSORS:
                raise self.error(
                    f"unknown accessor {acc.text}: get_value(...) supports "
                    + ", ".join(A.ACCESSOR_NAMES.values()),
                    acc,
                )
            self.expect(T.LPAREN, f"'(' after {acc.text}")
            self.expect(T.RPAREN, f"')': {acc.text}() takes no arguments")
            node = A.Access(node, acc.value.lower(), pos=dot.offset)
        return node

    def get_value(self, var: str, var_tok: Token) -> A.Node:
        which = self.expect(T.STRING, "'OLD' or 'NEW'")
        if which.value.upper() not in ("OLD", "NEW"):
            raise self.error(f"get_value takes 'OLD' or 'NEW', not {which.text}", which)
        self.expect(T.COMMA, "',' between the arguments of get_value")
        col = self.expect(T.STRING, "a column name such as '\"REGION_ID\"'")
        column = _column(self, col)
        self.expect(T.RPAREN, "')' after the arguments of get_value")
        return A.GetValue(var, which.value.upper(), column, pos=var_tok.offset)


def _flatten(items: list[A.Node], kind: type) -> tuple[A.Node, ...]:
    out: list[A.Node] = []
    for item in items:
        out.extend(item.items if isinstance(item, kind) else (item,))  # type: ignore[attr-defined]
    return tuple(out)


def _column(p: _Parser, tok: Token) -> str:
    text = tok.value.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$#]*", text):
        text = text.upper()
    else:
        raise p.error(f"invalid column name {tok.text}", tok)
    if not text or '"' in text:
        raise p.error(f"invalid column name {tok.text}", tok)
    return text


def _hex(p: _Parser, tok: Token) -> bytes:
    text = tok.value
    if not re.fullmatch(r"[0-9A-Fa-f]*", text):
        raise p.error(f"HEXTORAW needs hexadecimal digits, not {tok.text}", tok)
    return bytes.fromhex(text if len(text) % 2 == 0 else "0" + text)


def _datetime(p: _Parser, tok: Token) -> dt.datetime:
    value = parse_datetime(tok.value)
    if value is None:
        raise p.error(f"invalid date {tok.text}: write 'YYYY-MM-DD[ HH:MI:SS]'", tok)
    return value


def _describe(tok: Token) -> str:
    if tok.type is T.EOF:
        return "the end of the condition"
    if tok.type in (T.KEYWORD, T.OP):
        return repr(tok.text)
    return f"{tok.type.value} {tok.text!r}"
