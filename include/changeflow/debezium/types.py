"""Column types across the Debezium envelope: PostgreSQL types, Kafka Connect schemas, LCRs.

Debezium's PostgreSQL connector publishes how it writes each PostgreSQL type (its
"data type mappings"): a Kafka Connect schema type, an optional semantic name and
parameters. :func:`from_schema` reads that description (from an event's schema),
:func:`from_postgres` derives it from a declared PostgreSQL type under the
connector's ``decimal.handling.mode``, ``time.precision.mode`` and
``binary.handling.mode``, and :func:`for_logical` says how an export writes an LCR
type. Each gives a :class:`FieldType`: the LCR logical type plus the *codec* of the
JSON value, which :func:`decode` turns into a Spark expression and :func:`encode`
writes back.

>>> from_postgres("numeric(12,4)")
FieldType(logical='NUMBER', codec='decimal', scale=4)
>>> from_postgres("timestamp(3)", time_precision_mode="adaptive").codec
'ts_ms'
>>> from_schema({"type": "int32", "name": "io.debezium.time.Date"}).logical
'DATE'
>>> for_logical("TIMESTAMP WITH TIME ZONE").schema()["name"]
'io.debezium.time.ZonedTimestamp'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.errors import TerminalError

if TYPE_CHECKING:
    pass


class UnsupportedColumnTypeError(TerminalError):
    """A column's Debezium or PostgreSQL type has no LCR logical type."""


@dataclass(frozen=True)
class FieldType:
    """An LCR logical type and how its values are written in Debezium JSON.

    Codecs: ``int``, ``bool``, ``double``, ``string``, ``bytes`` (base64), ``hex``,
    ``base64url``, ``decimal`` (base64 two's complement, fixed ``scale``), ``varscale``
    (``{"scale", "value"}``), ``decimal_text`` (a number or string), ``date`` (days),
    ``ts_ms``/``ts_us``/``ts_ns`` (epoch), ``zoned`` (ISO-8601 with offset).
    """

    logical: str
    codec: str
    scale: int | None = None

    def schema(self) -> dict[str, Any]:
        """The Kafka Connect field schema an export declares for this type."""
        table: dict[str, dict[str, Any]] = {
            "int": {"type": "int64"}, "bool": {"type": "boolean"},
            # Kafka Connect's JsonConverter names 64-bit floats "double" ("float64" is
            # the Avro/Connect Schema.Type name it does not read)
            "double": {"type": "double"}, "string": {"type": "string"},
            "bytes": {"type": "bytes"},
            "decimal": {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                        "version": 1, "parameters": {"scale": str(self.scale),
                                                     "connect.decimal.precision": "38"}},
            "date": {"type": "int32", "name": "io.debezium.time.Date", "version": 1},
            "ts_us": {"type": "int64", "name": "io.debezium.time.MicroTimestamp",
                      "version": 1},
            "zoned": {"type": "string", "name": "io.debezium.time.ZonedTimestamp",
                      "version": 1},
        }
        return dict(table[self.codec])


_SEMANTIC: dict[str, tuple[str, str]] = {
    "io.debezium.time.Date": ("DATE", "date"),
    "org.apache.kafka.connect.data.Date": ("DATE", "date"),
    "io.debezium.time.Timestamp": ("TIMESTAMP", "ts_ms"),
    "org.apache.kafka.connect.data.Timestamp": ("TIMESTAMP", "ts_ms"),
    "io.debezium.time.MicroTimestamp": ("TIMESTAMP", "ts_us"),
    "io.debezium.time.NanoTimestamp": ("TIMESTAMP", "ts_ns"),
    "io.debezium.time.ZonedTimestamp": ("TIMESTAMP WITH TIME ZONE", "zoned"),
    "io.debezium.data.VariableScaleDecimal": ("NUMBER", "varscale"),
    "io.debezium.data.Json": ("VARCHAR2", "string"),
    "io.debezium.data.Uuid": ("VARCHAR2", "string"),
    "io.debezium.data.Xml": ("VARCHAR2", "string"),
    "io.debezium.data.Enum": ("VARCHAR2", "string"),
    "io.debezium.data.EnumSet": ("VARCHAR2", "string"),
    "io.debezium.data.Ltree": ("VARCHAR2", "string"),
    "io.debezium.data.Bits": ("RAW", "bytes"),
}
_UNSUPPORTED_NAMES = ("io.debezium.time.Time", "io.debezium.time.MicroTime",
                      "io.debezium.time.NanoTime", "io.debezium.time.ZonedTime",
                      "org.apache.kafka.connect.data.Time", "io.debezium.time.MicroDuration",
                      "io.debezium.time.Interval")
_PLAIN = {"int8": ("INTEGER", "int"), "int16": ("INTEGER", "int"), "int32": ("INTEGER", "int"),
          "int64": ("INTEGER", "int"), "float32": ("BINARY_DOUBLE", "double"),
          "float64": ("BINARY_DOUBLE", "double"), "float": ("BINARY_DOUBLE", "double"),
          "double": ("BINARY_DOUBLE", "double"), "boolean": ("BOOLEAN", "bool"),
          "string": ("VARCHAR2", "string"), "bytes": ("RAW", "bytes")}


def from_schema(field: dict[str, Any], *, where: str = "column") -> FieldType:
    """The type of a field described by a Kafka Connect schema (as events carry it).

    Raises:
        UnsupportedColumnTypeError: naming ``where`` and the type (times of day,
            intervals, geometries and arrays have no LCR type).
    """
    name, typ = field.get("name"), field.get("type")
    params = field.get("parameters") or {}
    if name == "org.apache.kafka.connect.data.Decimal":
        return FieldType("NUMBER", "decimal", int(params.get("scale", 0)))
    if name in _SEMANTIC:
        logical, codec = _SEMANTIC[name]
        return FieldType(logical, codec)
    if name in _UNSUPPORTED_NAMES or typ not in _PLAIN:
        raise UnsupportedColumnTypeError(
            f"{where}: Debezium type {typ}{f' ({name})' if name else ''} has no LCR type; "
            "exclude the column in the connector (column.exclude.list) or cast it in a view")
    logical, codec = _PLAIN[str(typ)]
    return FieldType(logical, codec)


_PG = re.compile(r"^\s*([a-z][a-z0-9 _]*?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*"
                 r"(with(?:out)? time zone)?\s*(\[\])?\s*$")


def from_postgres(type_name: str, *, decimal_handling_mode: str = "precise",
                  time_precision_mode: str = "adaptive", binary_handling_mode: str = "bytes",
                  where: str = "column") -> FieldType:
    """The type Debezium's PostgreSQL connector writes for a PostgreSQL column type.

    An LCR logical type name in upper case (``VARCHAR2``, ``NUMBER``, ...) is accepted
    too: it means what a changeflow export writes.

    Raises:
        UnsupportedColumnTypeError: a type without an LCR logical type, or unknown.
    """
    if type_name in lcr.LOGICAL_TYPES:
        return for_logical(type_name)
    m = _PG.match(type_name.lower())
    if m is None or m.group(5):
        raise UnsupportedColumnTypeError(f"{where}: unknown or unsupported PostgreSQL type "
                                         f"{type_name!r}")
    base, p, s, zone = m.group(1).strip(), m.group(2), m.group(3), m.group(4)
    if base in ("timestamp", "timestamptz") and (zone == "with time zone" or base.endswith("tz")):
        return FieldType("TIMESTAMP WITH TIME ZONE", "zoned")
    if base == "timestamp":
        if time_precision_mode == "connect" or (p is not None and int(p) <= 3):
            return FieldType("TIMESTAMP", "ts_ms")
        return FieldType("TIMESTAMP", "ts_us")
    if base in ("numeric", "decimal", "money"):
        if decimal_handling_mode in ("double", "string"):
            return FieldType("NUMBER", "decimal_text")
        if base == "money":
            return FieldType("NUMBER", "decimal", 2)
        if p is None:
            return FieldType("NUMBER", "varscale")
        return FieldType("NUMBER", "decimal", int(s or 0))
    if base == "bytea":
        codec = {"bytes": "bytes", "base64": "bytes", "hex": "hex",
                 "base64-url-safe": "base64url"}.get(binary_handling_mode)
        if codec is None:
            raise UnsupportedColumnTypeError(f"binary.handling.mode {binary_handling_mode!r}")
        return FieldType("RAW", codec)
    simple = {
        "boolean": ("BOOLEAN", "bool"), "bool": ("BOOLEAN", "bool"),
        "smallint": ("INTEGER", "int"), "int2": ("INTEGER", "int"),
        "smallserial": ("INTEGER", "int"), "integer": ("INTEGER", "int"),
        "int": ("INTEGER", "int"), "int4": ("INTEGER", "int"), "serial": ("INTEGER", "int"),
        "bigint": ("INTEGER", "int"), "int8": ("INTEGER", "int"),
        "bigserial": ("INTEGER", "int"), "oid": ("INTEGER", "int"),
        "real": ("BINARY_DOUBLE", "double"), "float4": ("BINARY_DOUBLE", "double"),
        "double precision": ("BINARY_DOUBLE", "double"), "float8": ("BINARY_DOUBLE", "double"),
        "date": ("DATE", "date"),
    }
    text = ("text", "varchar", "character varying", "character", "char", "bpchar", "name",
            "json", "jsonb", "uuid", "xml", "citext", "inet", "cidr", "macaddr", "ltree")
    if base in simple:
        logical, codec = simple[base]
        return FieldType(logical, codec)
    if base in text:
        return FieldType("VARCHAR2", "string")
    raise UnsupportedColumnTypeError(
        f"{where}: PostgreSQL type {type_name!r} has no LCR type (times of day, intervals, "
        "geometries and arrays are not carried); cast it in a view, or leave the column out")


def for_logical(logical: str) -> FieldType:
    """How an export writes values of an LCR logical type (and reads them back)."""
    codec = {"VARCHAR2": "string", "INTEGER": "int", "NUMBER": "decimal",
             "BINARY_DOUBLE": "double", "BOOLEAN": "bool", "DATE": "date",
             "TIMESTAMP": "ts_us", "TIMESTAMP WITH TIME ZONE": "zoned", "RAW": "bytes"}.get(logical)
    if codec is None:
        raise UnsupportedColumnTypeError(f"unknown LCR logical type {logical!r}")
    return FieldType(logical, codec, lcr.DECIMAL_SCALE if codec == "decimal" else None)


# --- Spark expressions -------------------------------------------------------------

_NOT = "translate({h}, '0123456789ABCDEF', 'FEDCBA9876543210')"


DECIMAL_CODECS = ("decimal", "varscale")


def decimal_hex_sql(raw: str, ft: FieldType) -> str:
    """SQL giving the hex digits of a Decimal's two's-complement bytes (step 1 of 3).

    A Kafka Connect Decimal is the base64 text itself; a VariableScaleDecimal is
    ``{"scale": s, "value": "<base64>"}``.
    """
    b64 = raw if ft.codec == "decimal" else f"get_json_object({raw}, '$.value')"
    return f"hex(try_to_binary({b64}, 'base64'))"


def decimal_scale_sql(raw: str, ft: FieldType) -> str:
    """SQL giving a Decimal's scale: the schema's, or the value's own (VariableScale)."""
    if ft.codec == "decimal":
        return str(ft.scale or 0)
    return f"try_cast(get_json_object({raw}, '$.scale') as int)"


def decimal_digits_sql(h: str) -> str:
    """SQL reading the hex digits ``h`` (step 1) as a signed integer, in decimal digits.

    ``conv(..., 16, -10)`` reads 16 hex digits as a signed 64-bit number, so up to 8
    bytes are sign-extended to 16 digits and read at once; 9 to 16 bytes are split
    into a signed high part and an unsigned low 64 bits (``high * 2^64 + low``).
    Longer, empty or undecodable bytes give NULL. Every function here is
    code-generated by Spark (no lambda).
    """
    n = f"length({h})"
    fill = f"if(substring({h}, 1, 1) >= '8', 'F', '0')"
    low8 = f"conv(lpad({h}, 16, {fill}), 16, -10)"
    two64 = "cast(18446744073709551616 as decimal(38,0))"
    high = f"cast(conv(lpad(substring({h}, 1, {n} - 16), 16, {fill}), 16, -10) as decimal(38,0))"
    low = f"cast(conv(substring({h}, {n} - 15, 16), 16, 10) as decimal(38,0))"
    wide = f"cast(try_add(try_multiply({high}, {two64}), {low}) as string)"
    return f"(case when {n} between 1 and 16 then {low8} when {n} <= 32 then {wide} end)"


def decimal_value_sql(digits: str, scale: str) -> str:
    """SQL scaling the integer ``digits`` (step 2) by ``scale`` into a NUMBER.

    ``<digits>E-<scale>`` is cast to ``decimal(38,10)``: exact, and a value with more
    than ten significant decimals or 28 integer digits gives NULL (the reader then
    reports the value).
    """
    number = f"decimal({lcr.DECIMAL_PRECISION},{lcr.DECIMAL_SCALE})"
    if scale.isdigit():
        value = f"try_cast(concat({digits}, 'E-{int(scale)}') as {number})"
        if int(scale) <= lcr.DECIMAL_SCALE:
            return value
        zeros = "0" * (int(scale) - lcr.DECIMAL_SCALE)
        return f"if({digits} = '0' or endswith({digits}, '{zeros}'), {value}, null)"
    value = f"try_cast(concat({digits}, 'E', cast(-({scale}) as string)) as {number})"
    exact = (f"({scale} <= {lcr.DECIMAL_SCALE} or {digits} = '0' or endswith({digits}, "
             f"repeat('0', {scale} - {lcr.DECIMAL_SCALE})))")
    return f"if({exact}, {value}, null)"


def decode_sql(raw: str, ft: FieldType) -> str:
    """Spark SQL reading one JSON value (``raw``: SQL giving its text) as ``ft.logical``.

    A value that cannot be read gives NULL; the reader compares with the raw value to
    report it. Times are read in UTC, the session time zone of changeflow's sessions.
    A Decimal's formula here pastes its steps into one another (it reads the value's
    bytes several times); the capture evaluates the steps as columns of their own
    (:mod:`.convert`), so each is computed once.

    >>> decode_sql("v", FieldType("INTEGER", "int"))
    'try_cast(v as bigint)'
    """
    c = ft.codec
    number = f"decimal({lcr.DECIMAL_PRECISION},{lcr.DECIMAL_SCALE})"
    simple = {
        "string": raw,
        "int": f"try_cast({raw} as bigint)",
        "bool": f"try_cast({raw} as boolean)",
        "double": f"try_cast({raw} as double)",
        "decimal_text": f"try_cast({raw} as {number})",
        "bytes": f"try_to_binary({raw}, 'base64')",
        "hex": f"try_to_binary({raw}, 'hex')",
        "base64url": f"try_to_binary(translate({raw}, '-_', '+/'), 'base64')",
        "date": f"date_from_unix_date(try_cast({raw} as int))",
        "ts_ms": f"cast(timestamp_millis(try_cast({raw} as bigint)) as timestamp_ntz)",
        "ts_us": f"cast(timestamp_micros(try_cast({raw} as bigint)) as timestamp_ntz)",
        "ts_ns": f"cast(timestamp_micros(try_cast({raw} as bigint) div 1000) as timestamp_ntz)",
        "zoned": f"try_cast({raw} as timestamp)",
    }
    if c in simple:
        return simple[c]
    if c in DECIMAL_CODECS:
        digits = decimal_digits_sql(decimal_hex_sql(raw, ft))
        return decimal_value_sql(digits, decimal_scale_sql(raw, ft))
    raise UnsupportedColumnTypeError(f"no decoder for codec {c!r}")


def encode_sql(value: str, ft: FieldType) -> str:
    """Spark SQL giving the JSON value an export writes for ``value`` (of ``ft.logical``).

    The result is a string (ZonedTimestamp, base64 bytes) or a number/boolean that
    ``to_json`` writes as such.

    >>> encode_sql("v", for_logical("DATE"))
    'unix_date(v)'
    """
    c = ft.codec
    if c in ("string", "int", "bool", "double"):
        return value
    if c == "date":
        return f"unix_date({value})"
    if c == "ts_us":
        return f"unix_micros(cast({value} as timestamp))"
    if c == "zoned":
        return f"date_format({value}, \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'\")"
    if c == "bytes":
        return f"base64({value})"
    if c == "decimal":
        return _decimal_b64_sql(value)
    raise UnsupportedColumnTypeError(f"no encoder for codec {c!r}")


def _decimal_b64_sql(value: str) -> str:
    """SQL writing a NUMBER as a Kafka Connect Decimal of scale 10: 16 bytes, base64.

    The unscaled magnitude is split at 2^64 (both halves fit ``conv``); a negative
    number is written as the complement of its magnitude minus one.
    """
    unscaled = (f"cast(regexp_replace(cast(abs({value}) as string), '[.]', '') as "
                f"decimal(38,0))")
    neg = f"({value} < 0)"
    m = f"({unscaled} - if({neg}, 1, 0))"
    two64 = "cast(18446744073709551616 as decimal(38,0))"
    hi = f"({m} div {two64})"
    lo = f"({m} - {hi} * {two64})"
    h = (f"concat(lpad(hex({hi}), 16, '0'), lpad(conv(cast({lo} as string), 10, 16), 16, "
         f"'0'))")
    return f"base64(unhex(if({neg}, {_NOT.format(h=h)}, {h})))"
