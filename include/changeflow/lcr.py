"""The LCR contract: the one place that owns the Parquet schema of queue messages.

Every message in a changeflow queue is one row of this schema, whatever its kind:

* ``ROW``: a row LCR (one row change: INSERT, UPDATE or DELETE);
* ``DDL``: a DDL LCR;
* ``USER``: a user message with a typed payload.

Column values keep their types. Each value is a *typed value* struct (the analogue of
Oracle's ANYDATA): a logical ``type`` name plus one populated field for that type.
A SQL NULL is a struct whose fields are all NULL but whose ``type`` is still set, so a
NULL number stays distinguishable from a NULL string.

The schema is versioned by :data:`SCHEMA_VERSION`; ``docs/lcr-schema.md`` documents it.

>>> encode_value(2)["int"]
2
>>> decode_value(encode_value("Europe"))
'Europe'
>>> logical_type_of(True)
'BOOLEAN'
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow.errors import SchemaMismatchError, TerminalError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

SCHEMA_VERSION = 1

KINDS = ("ROW", "DDL", "USER")
ORIGINS = ("CAPTURED", "USER")


class UnknownCommandTypeError(TerminalError):
    """A message carries a command type the LCR contract does not define."""


class CommandType(enum.StrEnum):
    """The command types of the LCR contract: what ``command_type`` may hold.

    Row LCRs carry a DML command; DDL LCRs carry the statement type, as Oracle's
    ``GET_COMMAND_TYPE`` returns it. Apply, quality and the PostgreSQL statements all
    decide through this one enum, and :meth:`parse` refuses anything else: a code the
    contract does not know raises, it never passes as NULL.

    >>> CommandType.parse("UPDATE").is_dml
    True
    >>> CommandType.parse("ALTER TABLE", kind="DDL")
    <CommandType.ALTER_TABLE: 'ALTER TABLE'>
    >>> try:
    ...     CommandType.parse("UPSERT")
    ... except UnknownCommandTypeError as exc:
    ...     print(exc)
    unknown command type 'UPSERT' for a ROW LCR; the LCR contract allows INSERT, UPDATE, DELETE
    """

    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    CREATE_TABLE = "CREATE TABLE"
    ALTER_TABLE = "ALTER TABLE"
    DROP_TABLE = "DROP TABLE"
    TRUNCATE_TABLE = "TRUNCATE TABLE"
    RENAME_TABLE = "RENAME TABLE"
    CREATE_INDEX = "CREATE INDEX"
    DROP_INDEX = "DROP INDEX"
    CREATE_VIEW = "CREATE VIEW"
    DROP_VIEW = "DROP VIEW"
    COMMENT = "COMMENT"
    GRANT = "GRANT"
    REVOKE = "REVOKE"

    @property
    def is_dml(self) -> bool:
        """INSERT, UPDATE or DELETE: the commands of row LCRs."""
        return self in _DML

    @property
    def is_ddl(self) -> bool:
        """A DDL statement type: the commands of DDL LCRs."""
        return self not in _DML

    @classmethod
    def for_kind(cls, kind: str) -> tuple[CommandType, ...]:
        """The command types a message kind may carry (none for user messages)."""
        if kind == "ROW":
            return tuple(c for c in cls if c.is_dml)
        if kind == "DDL":
            return tuple(c for c in cls if c.is_ddl)
        return ()

    @classmethod
    def parse(cls, code: str | None, *, kind: str = "ROW") -> CommandType:
        """The command type of a message of ``kind``.

        Raises:
            UnknownCommandTypeError: ``code`` is NULL, unknown, or not one ``kind``
                may carry (a DDL command on a row LCR, say), naming what is allowed.
        """
        allowed = cls.for_kind(kind)
        try:
            found = cls(code.strip().upper()) if code is not None else None
        except ValueError:
            found = None
        if found is None or found not in allowed:
            names = ", ".join(c.value for c in allowed) or "none (user messages)"
            raise UnknownCommandTypeError(
                f"unknown command type {code!r} for a {kind} LCR; the LCR contract allows "
                f"{names}")
        return found


_DML = frozenset({CommandType.INSERT, CommandType.UPDATE, CommandType.DELETE})
DML_COMMANDS: tuple[str, ...] = tuple(c.value for c in CommandType.for_kind("ROW"))
DDL_COMMANDS: tuple[str, ...] = tuple(c.value for c in CommandType.for_kind("DDL"))

DECIMAL_PRECISION = 38
DECIMAL_SCALE = 10


@dataclass(frozen=True)
class LogicalType:
    """A logical column type: its name in LCRs and the value-struct field holding it."""

    name: str
    field: str
    spark_type: str  # a Spark SQL DDL type string


LOGICAL_TYPES: dict[str, LogicalType] = {
    t.name: t
    for t in (
        LogicalType("VARCHAR2", "str", "string"),
        LogicalType("INTEGER", "int", "bigint"),
        LogicalType("NUMBER", "dec", f"decimal({DECIMAL_PRECISION},{DECIMAL_SCALE})"),
        LogicalType("BINARY_DOUBLE", "dbl", "double"),
        LogicalType("BOOLEAN", "bool", "boolean"),
        LogicalType("DATE", "date", "date"),
        LogicalType("TIMESTAMP", "ts_ntz", "timestamp_ntz"),
        LogicalType("TIMESTAMP WITH TIME ZONE", "ts", "timestamp"),
        LogicalType("RAW", "raw", "binary"),
    )
}

VALUE_FIELDS: tuple[tuple[str, str], ...] = (
    ("type", "string"),
    ("str", "string"),
    ("int", "bigint"),
    ("dec", f"decimal({DECIMAL_PRECISION},{DECIMAL_SCALE})"),
    ("dbl", "double"),
    ("bool", "boolean"),
    ("date", "date"),
    ("ts_ntz", "timestamp_ntz"),
    ("ts", "timestamp"),
    ("raw", "binary"),
)

VALUE_DDL = "struct<" + ",".join(f"`{n}`:{t}" for n, t in VALUE_FIELDS) + ">"
VALUES_DDL = f"map<string,{VALUE_DDL}>"

# (name, Spark DDL type, nullable). Order is the on-disk column order.
LCR_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("schema_version", "int", False),
    ("msg_id", "string", False),
    ("kind", "string", False),
    ("origin", "string", False),
    ("source_database_name", "string", True),
    ("command_type", "string", True),
    ("object_owner", "string", True),
    ("object_name", "string", True),
    ("object_type", "string", True),
    ("base_table_owner", "string", True),
    ("base_table_name", "string", True),
    ("ddl_text", "string", True),
    ("logon_user", "string", True),
    ("current_schema", "string", True),
    ("tag", "binary", True),
    ("transaction_id", "string", True),
    ("commit_scn", "bigint", True),
    ("commit_time", "timestamp", True),
    ("position", "bigint", True),
    ("key_columns", "array<string>", True),
    ("old_values", VALUES_DDL, True),
    ("new_values", VALUES_DDL, True),
    ("msg_type_name", "string", True),
    ("priority", "int", True),
    ("correlation", "string", True),
    ("delay", "bigint", True),
    ("expiration", "bigint", True),
    ("sender", "string", True),
    ("recipients", "array<string>", True),
    ("enq_time", "timestamp", True),
    ("payload", VALUES_DDL, True),
    ("payload_raw", "binary", True),
    ("payload_text", "string", True),
)

FIELD_NAMES: tuple[str, ...] = tuple(f[0] for f in LCR_FIELDS)

# Fields that must be non-null, by message kind (beyond the always-required ones).
REQUIRED_BY_KIND: dict[str, tuple[str, ...]] = {
    "ROW": (
        "source_database_name",
        "command_type",
        "object_owner",
        "object_name",
        "transaction_id",
        "commit_scn",
        "commit_time",
        "position",
    ),
    "DDL": (
        "source_database_name",
        "command_type",
        "object_type",
        "ddl_text",
        "transaction_id",
        "commit_scn",
        "commit_time",
        "position",
    ),
    "USER": ("msg_type_name", "enq_time"),
}


def spark_type(ddl: str) -> DataType:
    """Build the Spark type for one of the DDL type strings used in this module.

    Parsing is done here rather than by Spark so that no SparkContext is needed.
    """
    from pyspark.sql import types as T

    simple: dict[str, DataType] = {
        "string": T.StringType(),
        "int": T.IntegerType(),
        "bigint": T.LongType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
        "date": T.DateType(),
        "timestamp": T.TimestampType(),
        "timestamp_ntz": T.TimestampNTZType(),
        "binary": T.BinaryType(),
        f"decimal({DECIMAL_PRECISION},{DECIMAL_SCALE})": T.DecimalType(
            DECIMAL_PRECISION, DECIMAL_SCALE
        ),
    }
    if ddl in simple:
        return simple[ddl]
    if ddl == "array<string>":
        return T.ArrayType(T.StringType())
    if ddl == VALUE_DDL:
        return value_spark_type()
    if ddl == VALUES_DDL:
        return T.MapType(T.StringType(), value_spark_type())
    raise ValueError(f"no Spark type for {ddl!r}")


def value_spark_type() -> StructType:
    """The typed-value struct as a Spark type."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(n, spark_type(t)) for n, t in VALUE_FIELDS])


def spark_schema() -> StructType:
    """The LCR contract as a Spark ``StructType``."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(n, spark_type(t), nl) for n, t, nl in LCR_FIELDS])


def arrow_type(ddl: str) -> Any:
    """The Arrow type that Spark reads back as :func:`spark_type` of ``ddl``.

    ``timestamp`` is UTC-adjusted (Parquet ``isAdjustedToUTC=true``), ``timestamp_ntz``
    is not; both are microseconds, as Spark writes them.
    """
    import pyarrow as pa

    simple = {
        "string": pa.string(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
        "binary": pa.binary(),
        f"decimal({DECIMAL_PRECISION},{DECIMAL_SCALE})": pa.decimal128(
            DECIMAL_PRECISION, DECIMAL_SCALE
        ),
    }
    if ddl in simple:
        return simple[ddl]
    if ddl == "array<string>":
        return pa.list_(pa.string())
    if ddl == VALUE_DDL:
        return pa.struct([pa.field(n, arrow_type(t)) for n, t in VALUE_FIELDS])
    if ddl == VALUES_DDL:
        return pa.map_(pa.string(), arrow_type(VALUE_DDL))
    raise ValueError(f"no Arrow type for {ddl!r}")


def arrow_schema() -> Any:
    """The LCR contract as a ``pyarrow.Schema`` (for writers that bypass Spark)."""
    import pyarrow as pa

    return pa.schema([pa.field(n, arrow_type(t), nl) for n, t, nl in LCR_FIELDS])


def check_schema(actual: StructType, *, path: str | None = None) -> None:
    """Refuse a schema that does not match the LCR contract.

    Extra columns are refused too: a queue file is the contract, nothing more.

    Args:
        actual: the schema read from a file or held by a DataFrame.
        path: the file or directory it came from, named in the error.

    Raises:
        SchemaMismatchError: naming the path and the first field that differs.
    """
    expected = spark_schema()
    have = {f.name: f for f in actual.fields}
    for field in expected.fields:
        got = have.get(field.name)
        if got is None:
            raise SchemaMismatchError("required field is missing", path=path, field=field.name)
        if got.dataType != field.dataType:
            raise SchemaMismatchError(
                f"type is {got.dataType.simpleString()}, "
                f"the contract says {field.dataType.simpleString()}",
                path=path,
                field=field.name,
            )
    extra = sorted(set(have) - set(FIELD_NAMES))
    if extra:
        raise SchemaMismatchError(
            "field is not part of the LCR contract", path=path, field=extra[0]
        )


def logical_type_of(value: Any) -> str:
    """The logical type a Python value is stored as.

    Raises:
        SchemaMismatchError: for a Python type the contract cannot hold.
    """
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "INTEGER"
    if isinstance(value, decimal.Decimal):
        return "NUMBER"
    if isinstance(value, float):
        return "BINARY_DOUBLE"
    if isinstance(value, str):
        return "VARCHAR2"
    if isinstance(value, dt.datetime):
        return "TIMESTAMP WITH TIME ZONE" if value.tzinfo else "TIMESTAMP"
    if isinstance(value, dt.date):
        return "DATE"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "RAW"
    raise SchemaMismatchError(f"values of Python type {type(value).__name__} are not supported")


def encode_value(value: Any, type_name: str | None = None) -> dict[str, Any]:
    """Encode a Python value as a typed-value struct (a dict).

    Args:
        value: the value; ``None`` is a typed NULL.
        type_name: the logical type; inferred from ``value`` when omitted. A NULL
            without a type is stored as a NULL VARCHAR2.
    """
    if type_name is None:
        type_name = "VARCHAR2" if value is None else logical_type_of(value)
    lt = LOGICAL_TYPES.get(type_name)
    if lt is None:
        raise SchemaMismatchError(f"unknown logical type {type_name!r}")
    out: dict[str, Any] = {name: None for name, _ in VALUE_FIELDS}
    out["type"] = type_name
    if value is not None:
        if lt.field == "dec" and not isinstance(value, decimal.Decimal):
            value = decimal.Decimal(str(value))
        if lt.field == "raw":
            value = bytes(value)
        out[lt.field] = value
    return out


def decode_value(struct: Any) -> Any:
    """Decode a typed-value struct (dict or Row) back to a Python value."""
    if struct is None:
        return None
    data = struct.asDict() if hasattr(struct, "asDict") else dict(struct)
    lt = LOGICAL_TYPES.get(data.get("type") or "")
    if lt is None:
        raise SchemaMismatchError(f"unknown logical type {data.get('type')!r}")
    return data.get(lt.field)


def message_id(*parts: object) -> str:
    """A stable message id derived from the parts that identify a message.

    The same parts always give the same id, so a replayed message is recognised.

    >>> message_id("DBS1", 10, "tx1", 0) == message_id("DBS1", 10, "tx1", 0)
    True
    """
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()
    return digest[:32]


def canonical_identifier(name: str) -> str:
    """Fold an unquoted identifier to upper case, as Oracle's dictionary stores it.

    A name already holding upper-case letters is kept as it is (it was quoted).

    >>> canonical_identifier("region_id")
    'REGION_ID'
    >>> canonical_identifier("MixedCase")
    'MixedCase'
    """
    return name.upper() if name == name.lower() else name
