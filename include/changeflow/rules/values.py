"""Value semantics shared by both backends: accessors and dynamic (``:msg``) typing.

Both the Spark compiler and the Python evaluator follow the rules written here, so
that they agree:

* ``get_value()`` returns the typed value, or NULL when the column is not in the LCR;
* ``AccessNumber()`` reads INTEGER, NUMBER and BINARY_DOUBLE values, NULL otherwise;
  ``AccessVarchar2()`` reads VARCHAR2; ``AccessDate()``/``AccessTimestamp()`` read
  DATE and timestamps (as a naive UTC timestamp); ``AccessRaw()`` reads RAW;
* a ``:msg`` attribute has the *category* of its logical type (NUM, STR, DATE, RAW,
  BOOL); compared with a literal it is converted to the literal's type, except that a
  VARCHAR2 literal is converted to the attribute's category (Oracle's implicit
  conversion: ``:msg.priority = '1'`` compares numbers when priority is a NUMBER).

>>> category_of("NUMBER"), category_of("VARCHAR2"), category_of("TIMESTAMP")
('NUM', 'STR', 'DATE')
>>> convert("INTEGER", 2, "NUM"), convert("VARCHAR2", "1", "NUM"), convert("BOOLEAN", True, "STR")
(Decimal('2.0000000000'), Decimal('1.0000000000'), 'TRUE')
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from typing import Any

from changeflow.lcr import LOGICAL_TYPES, logical_type_of
from changeflow.rules import ast as A

NUMERIC_TYPES = ("INTEGER", "NUMBER", "BINARY_DOUBLE")
DATE_TYPES = ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE")
CATEGORIES = {
    **{t: "NUM" for t in NUMERIC_TYPES},
    **{t: "DATE" for t in DATE_TYPES},
    "VARCHAR2": "STR",
    "RAW": "RAW",
    "BOOLEAN": "STR",
}
# Accessor -> logical types it reads.
ACCESSOR_TYPES: dict[str, tuple[str, ...]] = {
    "accessnumber": NUMERIC_TYPES,
    "accessvarchar2": ("VARCHAR2",),
    "accesschar": ("VARCHAR2",),
    "accessdate": DATE_TYPES,
    "accesstimestamp": DATE_TYPES,
    "accessraw": ("RAW",),
}
# Numbers must fit the contract's decimal(38,10).
MAX_NUMBER = decimal.Decimal(10) ** 28
_CONTEXT = decimal.Context(prec=60)
# Static type of a literal -> category it compares as.
TYPE_CATEGORY = {A.NUMBER: "NUM", A.VARCHAR2: "STR", A.DATE: "DATE", A.RAW: "RAW"}


def category_of(type_name: str | None) -> str | None:
    """The comparison category of a logical type name (None when unknown)."""
    return CATEGORIES.get(type_name or "")


def typed(value: Any) -> tuple[str | None, Any]:
    """Split a message value into (logical type, Python value).

    Accepts a typed-value dict (``{"type": "NUMBER", "dec": ...}``), a Spark Row of
    that struct, or a plain Python value.

    >>> typed({"type": "INTEGER", "int": 2})
    ('INTEGER', 2)
    >>> typed("EUROPE")
    ('VARCHAR2', 'EUROPE')
    """
    if hasattr(value, "asDict"):
        value = value.asDict()
    if isinstance(value, dict) and "type" in value:
        lt = LOGICAL_TYPES.get(value.get("type") or "")
        return (value.get("type"), value.get(lt.field) if lt else None)
    if value is None:
        return None, None
    return logical_type_of(value), value


def convert(type_name: str | None, value: Any, category: str) -> Any:
    """Convert a typed value to a comparison category, or None (SQL NULL)."""
    if value is None:
        return None
    have = category_of(type_name)
    if category == "NUM":
        if have == "NUM":
            return to_decimal(value)
        if have == "STR":
            return parse_number(value)
        return None
    if category == "STR":
        if type_name == "BOOLEAN":
            return "TRUE" if value else "FALSE"
        return str(value) if have == "STR" else None
    if category == "DATE":
        return to_datetime(value) if have == "DATE" else None
    if category == "RAW":
        return bytes(value) if have == "RAW" else None
    return None


def to_decimal(value: Any) -> decimal.Decimal | None:
    """A number as a Decimal rounded to the contract's scale (10), as Spark stores it."""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        value = repr(value)
    try:
        number = decimal.Decimal(value)
        if not number.is_finite() or abs(number) >= MAX_NUMBER:
            return None
        return number.quantize(decimal.Decimal("1e-10"), context=_CONTEXT)
    except (decimal.InvalidOperation, TypeError, ValueError):
        return None


def parse_number(text: str) -> decimal.Decimal | None:
    """A VARCHAR2 as a number, or None when it is not one (Spark's try_cast)."""
    text = text.strip()
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
        return None
    return to_decimal(text)


def to_datetime(value: Any) -> dt.datetime | None:
    """A DATE or timestamp as a naive UTC datetime."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    return None


def like_regex(pattern: str) -> str:
    """The regular expression (Java and Python alike) for a SQL LIKE pattern.

    >>> like_regex("EU%")
    '(?s)^EU.*$'
    """
    parts = [".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern]
    return "(?s)^" + "".join(parts) + "$"
