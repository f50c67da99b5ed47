"""Errors raised by the rules engine.

Every error says which input was wrong. Condition errors carry the line, the column
and a highlighted excerpt of the condition, as sqlglot's parse errors do.

>>> err = RuleError.at("a = b c", 6, "unexpected identifier")
>>> print(err)
line 1, column 7: unexpected identifier
  a = b c
        ^
>>> (err.line, err.column)
(1, 7)
"""

from __future__ import annotations

from changeflow.errors import ConfigError, TerminalError

__all__ = ["ConfigError", "RuleDefinitionError", "RuleError"]


class RuleError(TerminalError):
    """A rule condition is malformed, unknown or badly typed.

    Args:
        message: what is wrong.
        context: what was being parsed (a rule name, ``and_condition``...).
        line: 1-based line of the error, when known.
        column: 1-based column of the error, when known.
        excerpt: the offending line with a caret under the column.
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        excerpt: str = "",
        context: str = "",
    ) -> None:
        self.description = message
        self.line = line
        self.column = column
        self.excerpt = excerpt
        self.context = context
        where = f"line {line}, column {column}: " if line is not None else ""
        text = f"{context + ': ' if context else ''}{where}{message}"
        if excerpt:
            text += "\n" + excerpt
        super().__init__(text)

    @classmethod
    def at(cls, source: str, offset: int, message: str) -> RuleError:
        """Build an error pointing at ``offset`` (0-based) inside ``source``.

        Args:
            source: the whole condition text.
            offset: the character offset of the error.
            message: what is wrong there.
        """
        offset = max(0, min(offset, len(source)))
        line_start = source.rfind("\n", 0, offset) + 1
        line_end = source.find("\n", offset)
        if line_end < 0:
            line_end = len(source)
        line_no = source.count("\n", 0, offset) + 1
        column = offset - line_start + 1
        text = source[line_start:line_end]
        # Long conditions: show a window around the error rather than the whole line.
        start = max(0, column - 1 - 60)
        window = text[start : start + 120]
        prefix = "..." if start else ""
        caret = " " * (len(prefix) + column - 1 - start) + "^"
        excerpt = f"  {prefix}{window}\n  {caret}"
        return cls(message, line=line_no, column=column, excerpt=excerpt)

    def with_context(self, context: str) -> RuleError:
        """The same error, its message prefixed by ``context`` (e.g. the rule name)."""
        return RuleError(
            self.description,
            line=self.line,
            column=self.column,
            excerpt=self.excerpt,
            context=f"{context}: {self.context}" if self.context else context,
        )


class RuleDefinitionError(TerminalError):
    """A rule, rule set or client definition is refused (not the condition text).

    Examples: a subset rule added to a negative rule set, a rule set referenced but
    not defined, a client redefined with another type.
    """
