"""Decoding wal2json (format version 2) output into row LCRs, column by column.

PostgreSQL's logical decoding hands a capture one JSON document per change, between
``B`` (begin) and ``C`` (commit) documents of the same transaction. This module turns
them into complete transactions (:class:`PgTransaction`) and then into an Arrow table
following the LCR contract (:class:`LcrBuilder`), without Spark: a capture drains
tens of thousands of changes per second this way.

Types are mapped by type OID (see :data:`TYPE_MAP` and ``docs/postgres.md``); a type
outside the map is refused with :class:`UnsupportedTypeError` rather than guessed.

>>> lsn_to_int("0/152F978")
22214008
>>> int_to_lsn(22214008)
'0/152F978'
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.errors import TerminalError

if TYPE_CHECKING:
    import pyarrow as pa


class UnsupportedTypeError(TerminalError):
    """A captured column has a PostgreSQL type (or value) the LCR contract cannot hold."""


class DecodeError(TerminalError):
    """The decoding output does not look like wal2json format version 2."""


_QUANTUM = decimal.Decimal(1).scaleb(-lcr.DECIMAL_SCALE)
_MAX_NUMBER = decimal.Decimal(10) ** (lcr.DECIMAL_PRECISION - lcr.DECIMAL_SCALE)


def _number(v: Any) -> decimal.Decimal:
    d = v if isinstance(v, decimal.Decimal) else decimal.Decimal(str(v))
    if not d.is_finite() or abs(d) >= _MAX_NUMBER or d != d.quantize(_QUANTUM):
        raise ValueError(f"{v} does not fit NUMBER (decimal({lcr.DECIMAL_PRECISION},"
                         f"{lcr.DECIMAL_SCALE}))")
    return d


def _timestamptz(v: str) -> dt.datetime:
    return dt.datetime.fromisoformat(v).astimezone(dt.UTC)


def _bytea(v: str) -> bytes:
    return bytes.fromhex(v[2:] if v.startswith("\\x") else v)


# type OID -> (logical LCR type, converter from the wal2json JSON value)
TYPE_MAP: dict[int, tuple[str, Callable[[Any], Any]]] = {
    16: ("BOOLEAN", bool),  # JSON true/false: kept as parsed
    17: ("RAW", _bytea),
    18: ("VARCHAR2", str),  # "char"
    19: ("VARCHAR2", str),  # name
    20: ("INTEGER", int),
    21: ("INTEGER", int),
    23: ("INTEGER", int),
    25: ("VARCHAR2", str),
    26: ("INTEGER", int),  # oid
    114: ("VARCHAR2", str),  # json, kept as its text
    700: ("BINARY_DOUBLE", float),
    701: ("BINARY_DOUBLE", float),
    1042: ("VARCHAR2", str),  # character(n), blank-padded as stored
    1043: ("VARCHAR2", str),
    1082: ("DATE", dt.date.fromisoformat),
    1114: ("TIMESTAMP", dt.datetime.fromisoformat),
    1184: ("TIMESTAMP WITH TIME ZONE", _timestamptz),
    1700: ("NUMBER", _number),
    2950: ("VARCHAR2", str),  # uuid, kept as its text
    3802: ("VARCHAR2", str),  # jsonb, kept as its text
}

# The type names PostgreSQL reports for TYPE_MAP's OIDs, for messages and checks.
TYPE_NAMES: dict[int, str] = {
    16: "boolean", 17: "bytea", 18: "char", 19: "name", 20: "bigint", 21: "smallint",
    23: "integer", 25: "text", 26: "oid", 114: "json", 700: "real", 701: "double precision",
    1042: "character", 1043: "character varying", 1082: "date",
    1114: "timestamp without time zone", 1184: "timestamp with time zone", 1700: "numeric",
    2950: "uuid", 3802: "jsonb",
}


def lsn_to_int(lsn: str) -> int:
    """A PostgreSQL LSN (``X/Y`` in hex) as a 64-bit integer, the LCR commit position."""
    hi, _, lo = lsn.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(value: int) -> str:
    """The inverse of :func:`lsn_to_int`."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


@dataclass
class PgTransaction:
    """One committed source transaction, as decoded."""

    xid: int
    end_lsn: int
    commit_time: dt.datetime
    origin: int
    changes: list[dict[str, Any]] = field(default_factory=list)


def transactions(rows: Iterable[tuple[str, Any, str]]) -> Iterator[PgTransaction]:
    """Group ``(lsn, xid, data)`` rows of ``pg_logical_slot_peek_changes`` by transaction.

    A transaction is yielded when its ``C`` document arrives; its position is the
    LSN just past its commit record (the ``lsn`` column of the ``C`` row), which is
    where the slot must be advanced once the transaction is durably enqueued.

    Raises:
        DecodeError: for a document that is not wal2json format 2.
    """
    rows = list(rows)
    # One parse of a JSON array is much cheaper than one parse per document.
    docs = json.loads("[" + ",".join(r[2] for r in rows) + "]", parse_float=decimal.Decimal)
    current: PgTransaction | None = None
    for (lsn, _xid, data), doc in zip(rows, docs, strict=True):
        action = doc.get("action")
        if action in ("I", "U", "D", "T"):
            if current is None:
                raise DecodeError(f"change at {lsn} outside a transaction")
            current.changes.append(doc)
        elif action == "B":
            current = PgTransaction(int(doc["xid"]), 0, _timestamptz(doc["timestamp"]),
                                    int(doc.get("origin") or 0))
        elif action == "C":
            if current is None:
                raise DecodeError(f"commit at {lsn} without a begin")
            current.end_lsn = lsn_to_int(lsn)
            current.commit_time = _timestamptz(doc["timestamp"])
            yield current
            current = None
        elif action != "M":  # logical messages are not captured
            raise DecodeError(f"unknown wal2json action {action!r} at {lsn}: {data[:200]}")


_COMMANDS = {"I": "INSERT", "U": "UPDATE", "D": "DELETE"}


def convert_columns(
    doc: dict[str, Any], key: str, where: str
) -> list[tuple[str, str, Any]] | None:
    """``(CANONICAL_NAME, logical type, value)`` of a change's ``columns``/``identity``.

    Raises:
        UnsupportedTypeError: naming the table, column and type.
    """
    cols = doc.get(key)
    if cols is None:
        return None
    out = []
    canon = _canonical
    for c in cols:
        oid = c.get("typeoid")
        mapped = TYPE_MAP.get(oid)
        if mapped is None:
            raise UnsupportedTypeError(
                f"{where}.{c['name']}: PostgreSQL type {c.get('type', oid)!r} (oid {oid}) is "
                "not supported by the LCR contract; capture a view or generated column that "
                "casts it to a supported type, or leave the table out of the capture"
            )
        ltype, conv = mapped
        value = c.get("value")
        if value is not None and type(value) is not _NATIVE.get(ltype):
            try:
                value = conv(value)
            except (ValueError, TypeError, decimal.InvalidOperation) as exc:
                raise UnsupportedTypeError(
                    f"{where}.{c['name']}: value {str(value)[:80]!r} of type "
                    f"{TYPE_NAMES.get(oid, oid)} cannot be held as {ltype}: {exc}"
                ) from exc
        name = c["name"]
        out.append((canon.get(name) or _canon(name), ltype, value))
    return out


# JSON already gives these logical types their Python type: no conversion needed.
_NATIVE: dict[str, type] = {"INTEGER": int, "VARCHAR2": str, "BOOLEAN": bool}
_canonical: dict[str, str] = {}


def _canon(name: str) -> str:
    value = _canonical[name] = lcr.canonical_identifier(name)
    return value


class LcrBuilder:
    """Accumulates row and DDL LCRs column by column and builds one Arrow table.

    Args:
        database: the source database global name (upper-cased in the LCRs).
        key_columns: ``(schema, table) -> canonical key column names``.
    """

    _SCALARS = ("msg_id", "kind", "command_type", "object_owner", "object_name",
                "object_type", "ddl_text", "tag", "transaction_id", "commit_scn",
                "commit_time", "position", "key_columns")

    def __init__(self, database: str, key_columns: Callable[[str, str], list[str]]):
        self.database = database.upper()
        self.db_id = lcr.message_id(self.database)[:8]
        self.key_columns = key_columns
        self.cols: dict[str, list[Any]] = {n: [] for n in self._SCALARS}
        self.new = _MapBuilder()
        self.old = _MapBuilder()
        self.databases: list[str] = []

    def __len__(self) -> int:
        return len(self.cols["msg_id"])

    def add(self, txn: PgTransaction, tag: bytes | None, database: str | None = None) -> int:
        """Add every change of a transaction. Returns how many LCRs were added.

        Args:
            database: the source database of a forwarded transaction (an apply's
                origin names it); default: the capture's own.
        """
        n = len(txn.changes)
        row = self.cols
        self.databases.extend([database or self.database] * n)
        # A message id is the source database, the commit LSN and the position: stable
        # across re-reads of the slot, so a replay is recognised.
        prefix = f"{self.db_id}{txn.end_lsn:016x}"
        row["msg_id"].extend(f"{prefix}{pos:08x}" for pos in range(1, n + 1))
        row["tag"].extend([tag] * n)
        row["transaction_id"].extend([str(txn.xid)] * n)
        row["commit_scn"].extend([txn.end_lsn] * n)
        row["commit_time"].extend([txn.commit_time] * n)
        row["position"].extend(range(1, n + 1))
        for doc in txn.changes:
            self._add_change(doc)
        return n

    def _add_change(self, doc: dict[str, Any]) -> None:
        row = self.cols
        schema, table = doc["schema"], doc["table"]
        row["object_owner"].append(_canonical.get(schema) or _canon(schema))
        row["object_name"].append(_canonical.get(table) or _canon(table))
        action = doc["action"]
        if action == "T":
            row["kind"].append("DDL")
            row["command_type"].append("TRUNCATE TABLE")
            row["object_type"].append("TABLE")
            row["ddl_text"].append(f'TRUNCATE TABLE "{schema}"."{table}"')
            row["key_columns"].append(None)
            self.new.add(None)
            self.old.add(None)
            return
        where = f"{schema}.{table}"
        row["kind"].append("ROW")
        row["command_type"].append(_COMMANDS[action])
        row["object_type"].append(None)
        row["ddl_text"].append(None)
        row["key_columns"].append(self.key_columns(schema, table))
        self.new.add(convert_columns(doc, "columns", where) if action != "D" else None)
        self.old.add(convert_columns(doc, "identity", where) if action != "I" else None)

    def to_arrow(self) -> pa.Table:
        """The LCRs added so far, as a table following :func:`lcr.arrow_schema`."""
        import pyarrow as pa

        schema = lcr.arrow_schema()
        n = len(self)
        arrays = []
        for f in schema:
            if f.name == "schema_version":
                arrays.append(pa.array([lcr.SCHEMA_VERSION] * n, f.type))
            elif f.name == "origin":
                arrays.append(pa.array(["CAPTURED"] * n, f.type))
            elif f.name == "source_database_name":
                arrays.append(pa.array(self.databases, f.type))
            elif f.name == "new_values":
                arrays.append(self.new.build(f.type))
            elif f.name == "old_values":
                arrays.append(self.old.build(f.type))
            elif f.name in self.cols:
                arrays.append(pa.array(self.cols[f.name], f.type))
            else:
                arrays.append(pa.nulls(n, f.type))
        return pa.Table.from_arrays(arrays, schema=schema)


# The value-struct field each logical type is stored in, in struct order.
_FIELD_OF = {t.field: t.name for t in lcr.LOGICAL_TYPES.values()}


class _MapBuilder:
    """Builds a ``map<string, value struct>`` column from flat entry lists."""

    def __init__(self) -> None:
        self.offsets = [0]
        self.valid: list[bool] = []
        self.entries: list[tuple[str, str, Any]] = []

    def add(self, entries: list[tuple[str, str, Any]] | None) -> None:
        if entries is None:
            self.valid.append(False)
        else:
            self.valid.append(True)
            self.entries.extend(entries)
        self.offsets.append(len(self.entries))

    def build(self, map_type: pa.MapType) -> pa.Array:
        import pyarrow as pa

        keys, types, values = (list(x) for x in zip(*self.entries, strict=True)) if \
            self.entries else ([], [], [])
        struct_type = map_type.item_type
        present = set(types)
        children = [pa.array(types, pa.string())]
        for f in list(struct_type)[1:]:
            ltype = _FIELD_OF[f.name]
            if ltype in present:
                data = [v if t == ltype else None for v, t in zip(values, types, strict=True)]
                children.append(pa.array(data, f.type))
            else:
                children.append(pa.nulls(len(types), f.type))
        items = pa.StructArray.from_arrays(children, fields=list(struct_type))
        mask = pa.array([not v for v in self.valid], pa.bool_())
        return pa.MapArray.from_arrays(
            pa.array(self.offsets, pa.int32()), pa.array(keys, pa.string()), items,
            type=map_type, mask=mask,
        )
