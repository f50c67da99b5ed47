"""Dequeue conditions and subscriber rules, in AQ's style, on the rules engine.

AQ writes conditions over the queue table's columns and the payload:
``priority < 3 AND tab.user_data.region = 'WEST'``; JMS selectors name properties and
headers directly: ``Region = 'Western'``, ``JMSPriority = 1`` (seed 002). Streams
message rules write ``:msg.region``. All three are accepted. :func:`compile_condition`
rewrites such a condition into the rules engine's language (``:msg.field``, message
properties as ``:msg.AQ$PRIORITY`` and friends), parses and type-checks it with the
engine's parser, and reports an error at its position *in the text the user wrote*.
Evaluation is the engine's Python evaluator (:func:`changeflow.rules.evaluate.evaluate`)
on one message: no Spark.

>>> cond = compile_condition("priority < 3 AND tab.user_data.region = 'WEST'")
>>> matches(cond, {"REGION": "WEST"}, {"AQ$PRIORITY": 1})
True
>>> compile_condition("tab.user_data.region = = 'WEST'")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.messaging.errors.SelectorError: line 1, column 24: expected a value or a condition...
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from changeflow.lcr import encode_value
from changeflow.messaging.errors import SelectorError
from changeflow.rules import ast as A
from changeflow.rules.errors import RuleError
from changeflow.rules.evaluate import evaluate
from changeflow.rules.parser import parse
from changeflow.rules.tokens import T, Token, tokenize

MAX_CONDITION = 4000  # AQ's limit on a dequeue condition

#: Message properties a condition may name (case-insensitive), and their types.
PROPERTIES: dict[str, tuple[str, str]] = {
    "PRIORITY": ("AQ$PRIORITY", "INTEGER"), "JMSPRIORITY": ("AQ$PRIORITY", "INTEGER"),
    "CORRID": ("AQ$CORRID", "VARCHAR2"), "CORRELATION": ("AQ$CORRID", "VARCHAR2"),
    "JMSCORRELATIONID": ("AQ$CORRID", "VARCHAR2"),
    "MSGID": ("AQ$MSGID", "VARCHAR2"), "MSG_ID": ("AQ$MSGID", "VARCHAR2"),
    "JMSMESSAGEID": ("AQ$MSGID", "VARCHAR2"),
    "ENQ_TIME": ("AQ$ENQ_TIME", "TIMESTAMP"), "JMSTIMESTAMP": ("AQ$ENQ_TIME", "TIMESTAMP"),
    "DELAY": ("AQ$DELAY", "NUMBER"), "EXPIRATION": ("AQ$EXPIRATION", "NUMBER"),
    "RETRY_COUNT": ("AQ$RETRY_COUNT", "INTEGER"),
    "SENDER_NAME": ("AQ$SENDER", "VARCHAR2"), "JMSTYPE": ("AQ$MSG_TYPE", "VARCHAR2"),
    "MSG_TYPE": ("AQ$MSG_TYPE", "VARCHAR2"),
}  # fmt: skip


@dataclass(frozen=True)
class Condition:
    """A compiled condition: the text as written, the engine's form and its tree."""

    text: str
    engine_text: str
    tree: A.Node


@dataclass
class _Out:
    parts: list[str]
    # (start in the new text, length there, start in the source, length there)
    segments: list[tuple[int, int, int, int]]
    pos: int = 0

    def add(self, text: str, src_start: int, src_len: int) -> None:
        self.parts.append(text)
        self.segments.append((self.pos, len(text), src_start, src_len))
        self.pos += len(text)

    def source_offset(self, offset: int, source: str) -> int:
        for start, length, src, src_len in self.segments:
            if offset < start + max(length, 1):
                return src + (offset - start if length == src_len else 0)
        return len(source)


def _at(source: str, offset: int, message: str) -> SelectorError:
    err = RuleError.at(source, offset, message)
    return SelectorError(err.description, line=err.line, column=err.column,
                         excerpt=err.excerpt)


def _field_name(tok: Token) -> str:
    return tok.value if tok.type is T.QUOTED else tok.value.upper()


class _Rewriter:
    def __init__(self, source: str, fields: frozenset[str] | None) -> None:
        self.source = source
        self.fields = fields
        self.tokens = tokenize(source)
        self.i = 0
        self.out = _Out([], [])

    def error(self, tok: Token, message: str) -> SelectorError:
        return _at(self.source, tok.offset, message)

    def gap(self, tok: Token, last: int) -> None:
        if tok.offset > last:
            self.out.add(self.source[last:tok.offset], last, tok.offset - last)

    def payload(self, tok: Token, start: int) -> None:
        name = _field_name(tok)
        if self.fields is not None and name.upper() not in self.fields:
            raise self.error(tok, f"the payload type has no field {tok.text!r} (fields: "
                                  f"{', '.join(sorted(self.fields)) or 'none'})")
        self.out.add(f':msg."{name.upper()}"', start, tok.end - start)

    def run(self) -> str:
        toks, last = self.tokens, 0
        while toks[self.i].type is not T.EOF:
            tok = toks[self.i]
            self.gap(tok, last)
            self.i += self.step(tok)
            last = toks[self.i - 1].end
        self.out.add(self.source[last:], last, len(self.source) - last)
        return "".join(self.out.parts)

    def _seq(self, *types: T) -> bool:
        toks = self.tokens[self.i:self.i + len(types)]
        return len(toks) == len(types) and all(t.type is ty for t, ty in zip(toks, types,
                                                                             strict=True))

    def step(self, tok: Token) -> int:
        """Rewrite the construct starting at ``tok``; returns the tokens consumed."""
        nxt = self.tokens[self.i + 1]
        if tok.type is T.BIND:
            if tok.value != "msg" and not tok.value.startswith("VAR$_"):
                raise self.error(tok, f"{tok.text} is not available here: conditions read "
                                      "user messages (tab.user_data.field, :msg.field or a "
                                      "message property such as priority)")
            if self._seq(T.BIND, T.DOT) and self.tokens[self.i + 2].type is not T.EOF:
                end = self.tokens[self.i + 2].end  # :msg.field, as written
                self.out.add(self.source[tok.offset:end], tok.offset, end - tok.offset)
                return 3
            self.out.add(tok.text, tok.offset, tok.end - tok.offset)
            return 1
        if tok.type is not T.IDENT or nxt.type is T.LPAREN:
            self.out.add(tok.text, tok.offset, tok.end - tok.offset)
            return 1
        word = tok.value.upper()
        if (word == "TAB" and self._seq(T.IDENT, T.DOT, T.IDENT, T.DOT)
                and self.tokens[self.i + 2].value.upper() == "USER_DATA"):
            field = self.tokens[self.i + 4]
            if field.type not in (T.IDENT, T.QUOTED, T.KEYWORD):
                raise self.error(field, "expected a field name after tab.user_data.")
            self.payload(field, tok.offset)
            return 5
        if word in ("TAB", "USER_DATA") and self._seq(T.IDENT, T.DOT):
            field = self.tokens[self.i + 2]
            if word == "TAB" and field.value.upper() in PROPERTIES:
                self.property(field, tok.offset)
                return 3
            if word == "USER_DATA" and field.type in (T.IDENT, T.QUOTED, T.KEYWORD):
                self.payload(field, tok.offset)
                return 3
            raise self.error(field, f"unknown column {field.text!r} of the queue table; use "
                                    f"tab.user_data.<field> or one of {_property_names()}")
        if word in PROPERTIES:
            self.property(tok, tok.offset)
            return 1
        self.payload(tok, tok.offset)
        return 1

    def property(self, tok: Token, start: int) -> None:
        pseudo, _ = PROPERTIES[tok.value.upper()]
        self.out.add(f":msg.{pseudo}", start, tok.end - start)


def _property_names() -> str:
    return ", ".join(sorted(k.lower() for k in PROPERTIES if not k.startswith("JMS")))


@functools.lru_cache(maxsize=512)
def _compile(text: str, fields: frozenset[str] | None) -> Condition:
    if len(text) > MAX_CONDITION:
        raise _at(text, MAX_CONDITION,
                               f"a condition is at most {MAX_CONDITION} characters")
    if not text.strip():
        raise _at(text, 0, "the condition is empty")
    try:
        rewriter = _Rewriter(text, fields)
        engine_text = rewriter.run()
    except SelectorError:
        raise
    except RuleError as exc:  # the tokenizer's own errors point into ``text`` already
        raise SelectorError(exc.description, line=exc.line, column=exc.column,
                            excerpt=exc.excerpt) from None
    try:
        tree = parse(engine_text)
    except RuleError as exc:
        offset = _offset(engine_text, exc.line or 1, exc.column or 1)
        where = rewriter.out.source_offset(offset, text)
        raise _at(text, where, exc.description) from None
    return Condition(text, engine_text, tree)


def _offset(text: str, line: int, column: int) -> int:
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    return starts[min(line, len(starts)) - 1] + column - 1


def compile_condition(text: str, fields: tuple[str, ...] | None = None) -> Condition:
    """Compile a dequeue condition or a subscriber rule.

    Args:
        text: the condition as the user wrote it.
        fields: the payload type's field names, when known (object types): a condition
            naming another field is refused.

    Raises:
        SelectorError: at the line and column of the problem in ``text``.
    """
    known = frozenset(f.upper() for f in fields) if fields is not None else None
    return _compile(str(text), known)


def message_view(fields: Mapping[str, Any], props: Mapping[str, Any],
                 type_name: str = "") -> dict[str, Any]:
    """A user message as the rules engine evaluates it.

    Args:
        fields: payload fields by upper-case name (typed-value dicts or plain values).
        props: message properties by pseudo-field name (``AQ$PRIORITY``...).
    """
    payload = dict(fields)
    for name, value in props.items():
        type_name_of = next((t for p, t in PROPERTIES.values() if p == name), None)
        payload[name] = encode_value(value, type_name_of) if value is not None else None
    return {"kind": "USER", "msg_type_name": type_name, "payload": payload}


def matches(cond: Condition, fields: Mapping[str, Any], props: Mapping[str, Any],
            type_name: str = "") -> bool:
    """Whether a condition is TRUE for a message (unknown counts as false)."""
    return evaluate(cond.tree, message_view(fields, props, type_name)) is True


def like_pattern(text: str) -> bool:
    """Whether a correlation selector uses LIKE wildcards (``%`` or ``_``)."""
    return "%" in text or "_" in text
