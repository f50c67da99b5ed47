"""Payload values: field types, their checks, their JSON form, and the JMS message kinds.

A payload field has a *field type*: one of the LCR contract's logical types
(:data:`changeflow.lcr.LOGICAL_TYPES`), optionally with a length (``VARCHAR2(30)``,
``RAW(16)``). :func:`coerce` checks a value against a field type, accepting the text
forms an XML or JSON client sends (``"12"`` for an INTEGER, an ISO date, hex for RAW),
and refuses anything else with :class:`~changeflow.errors.PayloadTypeError` naming
the field. Stored values are JSON: :func:`to_json` / :func:`from_json` when the type
is known from the message type, :func:`typed_json` / :func:`from_typed_json`
(``[type, value]``) when it is not (ANYDATA objects, JMS properties and maps).

>>> coerce("12", FieldType.parse("INTEGER"), "order_id")
12
>>> coerce("x" * 5, FieldType.parse("VARCHAR2(3)"), "region")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.errors.PayloadTypeError: field region: 'xxxxx' is 5 characters long; VARCHAR2(3) ...
>>> from_typed_json(typed_json(dt.date(2024, 2, 1)))
datetime.date(2024, 2, 1)
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from changeflow.errors import PayloadTypeError, SchemaMismatchError
from changeflow.lcr import LOGICAL_TYPES, logical_type_of

_ALIASES = {"CHAR": "VARCHAR2", "VARCHAR": "VARCHAR2", "STRING": "VARCHAR2", "TEXT": "VARCHAR2",
            "INT": "INTEGER", "BIGINT": "INTEGER", "LONG": "INTEGER", "DECIMAL": "NUMBER",
            "DOUBLE": "BINARY_DOUBLE", "FLOAT": "BINARY_DOUBLE", "BOOL": "BOOLEAN",
            "BYTES": "RAW", "TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}
_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_ ]*?)\s*(?:\(\s*(\d+)\s*\))?\s*$")


@dataclass(frozen=True)
class FieldType:
    """A payload field's type: a logical type and an optional maximum length."""

    name: str
    length: int | None = None

    @classmethod
    def parse(cls, spec: str) -> FieldType:
        """``VARCHAR2(30)``, ``number``, ``timestamp with time zone``, ``RAW(16)``...

        Raises:
            PayloadTypeError: an unknown type name or a length on a type without one.
        """
        m = _SPEC.match(str(spec))
        if not m:
            raise PayloadTypeError(f"unknown field type {spec!r}")
        base = " ".join(m.group(1).upper().split())
        base = _ALIASES.get(base, base)
        if base not in LOGICAL_TYPES:
            raise PayloadTypeError(
                f"unknown field type {spec!r}; use one of {', '.join(LOGICAL_TYPES)}")
        length = int(m.group(2)) if m.group(2) else None
        if length is not None and base not in ("VARCHAR2", "RAW"):
            if base == "NUMBER":  # NUMBER(p): precision, not a length; keep the type
                return cls(base)
            raise PayloadTypeError(f"field type {spec!r}: only VARCHAR2 and RAW take a length")
        if length is not None and length < 1:
            raise PayloadTypeError(f"field type {spec!r}: the length must be >= 1")
        return cls(base, length)

    def __str__(self) -> str:
        return f"{self.name}({self.length})" if self.length else self.name


def _bad(where: str, value: Any, ftype: FieldType, why: str = "") -> PayloadTypeError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return PayloadTypeError(f"field {where}: {shown} is not a valid {ftype}{why}")


def coerce(value: Any, ftype: FieldType, where: str) -> Any:
    """Check and convert one value to a field type (``None`` is a typed NULL).

    Raises:
        PayloadTypeError: naming the field, the value and the type.
    """
    if value is None:
        return None
    try:
        out = _COERCE[ftype.name](value)
    except (ValueError, TypeError, ArithmeticError):
        raise _bad(where, value, ftype) from None
    if out is _REFUSED:
        raise _bad(where, value, ftype)
    if ftype.length is not None and len(out) > ftype.length:
        unit = "characters" if ftype.name == "VARCHAR2" else "bytes"
        raise PayloadTypeError(
            f"field {where}: {value!r} is {len(out)} {unit} long; {ftype} holds at most "
            f"{ftype.length}")
    return out


_REFUSED = object()


def _varchar(v: Any) -> Any:
    return v if isinstance(v, str) else _REFUSED


def _integer(v: Any) -> Any:
    if isinstance(v, bool):
        return _REFUSED
    if isinstance(v, int):
        return v
    if isinstance(v, (float, decimal.Decimal)):
        return int(v) if v == int(v) else _REFUSED
    if isinstance(v, str) and re.fullmatch(r"\s*[-+]?\d+\s*", v):
        return int(v)
    return _REFUSED


def _number(v: Any) -> Any:
    if isinstance(v, bool):
        return _REFUSED
    if isinstance(v, decimal.Decimal):
        out = v
    elif isinstance(v, int):
        out = decimal.Decimal(v)
    elif isinstance(v, float):
        out = decimal.Decimal(repr(v))
    elif isinstance(v, str):
        out = decimal.Decimal(v.strip())
    else:
        return _REFUSED
    return out if out.is_finite() else _REFUSED


def _double(v: Any) -> Any:
    if isinstance(v, bool):
        return _REFUSED
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(v)
    if isinstance(v, str):
        return float(v.strip())
    return _REFUSED


def _boolean(v: Any) -> Any:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0", "y", "n"):
        return v.strip().lower() in ("true", "1", "y")
    return _REFUSED


def _date(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.date() if v.time() == dt.time() and v.tzinfo is None else _REFUSED
    if isinstance(v, dt.date):
        return v
    if isinstance(v, str):
        return dt.date.fromisoformat(v.strip())
    return _REFUSED


def _timestamp(v: Any) -> Any:
    if isinstance(v, str):
        v = dt.datetime.fromisoformat(v.strip())
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.UTC).replace(tzinfo=None) if v.tzinfo else v
    if isinstance(v, dt.date):
        return dt.datetime(v.year, v.month, v.day)
    return _REFUSED


def _timestamp_tz(v: Any) -> Any:
    if isinstance(v, str):
        v = dt.datetime.fromisoformat(v.strip())
    if isinstance(v, dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=dt.UTC)
    return _REFUSED


def _raw(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str) and re.fullmatch(r"\s*([0-9A-Fa-f]{2})*\s*", v):
        return bytes.fromhex(v.strip())
    return _REFUSED


_COERCE = {
    "VARCHAR2": _varchar, "INTEGER": _integer, "NUMBER": _number, "BINARY_DOUBLE": _double,
    "BOOLEAN": _boolean, "DATE": _date, "TIMESTAMP": _timestamp,
    "TIMESTAMP WITH TIME ZONE": _timestamp_tz, "RAW": _raw,
}  # fmt: skip


# -- JSON forms ------------------------------------------------------------------------
def to_json(value: Any, type_name: str) -> Any:
    """A coerced value as JSON (the type is known to the reader)."""
    if value is None:
        return None
    if type_name == "NUMBER":
        return str(value)
    if type_name == "BINARY_DOUBLE":
        return value if math.isfinite(value) else str(value)
    if type_name in ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE"):
        return value.isoformat()
    if type_name == "RAW":
        return value.hex()
    return value


def from_json(value: Any, type_name: str) -> Any:
    """The value :func:`to_json` stored."""
    if value is None:
        return None
    decode = _JSON_DECODERS.get(type_name)
    return value if decode is None else decode(value)


_JSON_DECODERS: dict[str, Callable[[Any], Any]] = {
    "NUMBER": decimal.Decimal, "BINARY_DOUBLE": float, "DATE": dt.date.fromisoformat,
    "TIMESTAMP": dt.datetime.fromisoformat,
    "TIMESTAMP WITH TIME ZONE": dt.datetime.fromisoformat, "RAW": bytes.fromhex}


def json_decoder(type_name: str) -> Callable[[Any], Any] | None:
    """How :func:`from_json` decodes a non-null value of ``type_name`` (None: as is)."""
    return _JSON_DECODERS.get(type_name)


def infer_type(value: Any, where: str) -> str:
    """The logical type of an untyped value (ANYDATA fields, JMS properties)."""
    try:
        return logical_type_of(value)
    except SchemaMismatchError:
        raise PayloadTypeError(
            f"field {where}: values of Python type {type(value).__name__} cannot be stored; "
            "use str, int, Decimal, float, bool, date, datetime or bytes") from None


def typed_json(value: Any, where: str = "value") -> list[Any]:
    """``[logical type, JSON value]`` for a value whose type the reader cannot know."""
    if value is None:
        return ["VARCHAR2", None]
    type_name = infer_type(value, where)
    return [type_name, to_json(value, type_name)]


def from_typed_json(item: list[Any]) -> Any:
    """The value :func:`typed_json` stored."""
    type_name, value = item
    return from_json(value, type_name)


def typed_fields(values: dict[str, Any], where: str) -> dict[str, list[Any]]:
    """A dict of untyped values as ``{name: [type, value]}`` (names must be text)."""
    out = {}
    for k, v in values.items():
        if not isinstance(k, str) or not k:
            raise PayloadTypeError(f"{where}: field names must be non-empty text, not {k!r}")
        out[k] = typed_json(v, f"{where}.{k}" if where else k)
    return out


# -- JMS messages ------------------------------------------------------------------------
@dataclass(frozen=True)
class JmsText:
    """A JMS TextMessage (``SYS.AQ$_JMS_TEXT_MESSAGE``)."""

    text: str
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JmsBytes:
    """A JMS BytesMessage (``SYS.AQ$_JMS_BYTES_MESSAGE``)."""

    data: bytes
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JmsMap:
    """A JMS MapMessage (``SYS.AQ$_JMS_MAP_MESSAGE``): named, typed values."""

    values: dict[str, Any]
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JmsObject:
    """A JMS ObjectMessage (``SYS.AQ$_JMS_OBJECT_MESSAGE``): a serialized object."""

    data: bytes
    class_name: str | None = None
    properties: dict[str, Any] = field(default_factory=dict)


JmsMessage = JmsText | JmsBytes | JmsMap | JmsObject
