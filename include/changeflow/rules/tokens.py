"""Tokenizer of the rule-condition language.

The language is the subset of Oracle SQL conditions that Oracle Streams rules use:
bind variables (``:dml``, ``:"VAR$_52"``), member calls, string literals with ``''``
escapes, numbers, comparison operators and keywords.

>>> [t.text for t in tokenize(":dml.is_null_tag() = 'Y'")]
[':dml', '.', 'is_null_tag', '(', ')', '=', "'Y'", '']
>>> tokenize("'it''s'")[0].value
"it's"
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from changeflow.rules.errors import RuleError

MAX_CONDITION_LENGTH = 100_000


class T(enum.Enum):
    """Token types."""

    IDENT = "identifier"
    QUOTED = "quoted identifier"
    STRING = "string literal"
    NUMBER = "number"
    BIND = "bind variable"
    LPAREN = "'('"
    RPAREN = "')'"
    COMMA = "','"
    DOT = "'.'"
    OP = "operator"
    KEYWORD = "keyword"
    EOF = "end of condition"


KEYWORDS = frozenset(
    {
        "AND", "OR", "NOT", "IN", "IS", "NULL", "EXISTS", "SELECT", "FROM", "WHERE",
        "LIKE", "DATE", "TIMESTAMP",
    }
)  # fmt: skip

_OPERATORS = ("<>", "!=", "^=", "<=", ">=", "=", "<", ">", "-")
_PUNCT = {"(": T.LPAREN, ")": T.RPAREN, ",": T.COMMA, ".": T.DOT}


@dataclass(frozen=True)
class Token:
    """One token: its type, source text, decoded value and start offset."""

    type: T
    text: str
    value: str
    offset: int
    end: int

    def is_keyword(self, *words: str) -> bool:
        """True when this token is one of the given keywords."""
        return self.type is T.KEYWORD and self.value in words


def tokenize(source: str) -> list[Token]:
    """Split a condition into tokens, ending with an ``EOF`` token.

    Raises:
        RuleError: on an unterminated literal or a character the language does not use.
    """
    if len(source) > MAX_CONDITION_LENGTH:
        raise RuleError.at(source, MAX_CONDITION_LENGTH, "condition is too long")
    tokens: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        if ch.isspace():
            i += 1
        elif ch == "-" and source.startswith("--", i):
            nl = source.find("\n", i)
            i = n if nl < 0 else nl
        elif ch == "'":
            tokens.append(_string(source, i))
        elif ch == '"':
            tokens.append(_quoted(source, i))
        elif ch == ":":
            tokens.append(_bind(source, i))
        elif ch.isdigit() or (ch == "." and i + 1 < n and source[i + 1].isdigit()):
            tokens.append(_number(source, i))
        elif ch.isascii() and (ch.isalpha() or ch == "_"):
            tokens.append(_word(source, i))
        elif ch in _PUNCT:
            tokens.append(Token(_PUNCT[ch], ch, ch, i, i + 1))
        else:
            op = next((o for o in _OPERATORS if source.startswith(o, i)), None)
            if op is None:
                raise RuleError.at(source, i, f"unexpected character {ch!r}")
            tokens.append(Token(T.OP, op, "!=" if op in ("<>", "^=") else op, i, i + len(op)))
        if tokens and tokens[-1].end > i:
            i = tokens[-1].end
    tokens.append(Token(T.EOF, "", "", n, n))
    return tokens


def _string(source: str, start: int) -> Token:
    i, parts = start + 1, []
    while True:
        j = source.find("'", i)
        if j < 0:
            raise RuleError.at(source, start, "unterminated string literal")
        parts.append(source[i:j])
        if source.startswith("''", j):
            parts.append("'")
            i = j + 2
            continue
        return Token(T.STRING, source[start : j + 1], "".join(parts), start, j + 1)


def _quoted(source: str, start: int) -> Token:
    j = source.find('"', start + 1)
    if j < 0:
        raise RuleError.at(source, start, "unterminated quoted identifier")
    if j == start + 1:
        raise RuleError.at(source, start, "empty quoted identifier")
    return Token(T.QUOTED, source[start : j + 1], source[start + 1 : j], start, j + 1)


def _bind(source: str, start: int) -> Token:
    i = start + 1
    if i < len(source) and source[i] == '"':
        q = _quoted(source, i)
        return Token(T.BIND, source[start : q.end], q.value, start, q.end)
    j = i
    while j < len(source) and source[j].isascii() and (source[j].isalnum() or source[j] in "_$#"):
        j += 1
    if j == i:
        raise RuleError.at(source, start, "expected a variable name after ':'")
    return Token(T.BIND, source[start:j], source[i:j].lower(), start, j)


def _number(source: str, start: int) -> Token:
    j, seen_dot = start, False
    while j < len(source) and (source[j].isdigit() or (source[j] == "." and not seen_dot)):
        seen_dot = seen_dot or source[j] == "."
        j += 1
    if j < len(source) and source[j] in "eE":
        k = j + 1
        if k < len(source) and source[k] in "+-":
            k += 1
        if k < len(source) and source[k].isdigit():
            j = k
            while j < len(source) and source[j].isdigit():
                j += 1
    return Token(T.NUMBER, source[start:j], source[start:j], start, j)


def _word(source: str, start: int) -> Token:
    j = start
    while j < len(source) and source[j].isascii() and (source[j].isalnum() or source[j] in "_$#"):
        j += 1
    text = source[start:j]
    if text.upper() in KEYWORDS:
        return Token(T.KEYWORD, text, text.upper(), start, j)
    return Token(T.IDENT, text, text, start, j)
