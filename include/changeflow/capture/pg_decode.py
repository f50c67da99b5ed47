"""Decoding wal2json (format version 2) output into complete source transactions.

PostgreSQL's logical decoding hands a capture one JSON document per change, between
``B`` (begin) and ``C`` (commit) documents of the same transaction. A peek
(:class:`Peek`) brings them as one JSON text the server joined, plus the LSN of each
commit; this module decodes that text in one call (msgspec, numbers with a fraction as
exact ``Decimal``) into complete transactions (:class:`PgTransaction`).
:mod:`changeflow.capture.pg_lcr` turns them into an Arrow table of LCRs.

Types are mapped by type OID (see :data:`TYPE_MAP` and ``docs/postgres.md``); a type
outside the map is refused with :class:`UnsupportedTypeError` rather than guessed.
LSNs and commit positions convert with :func:`changeflow.pgconn.lsn_to_int`.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from changeflow import lcr
from changeflow.errors import TerminalError


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


class Column(msgspec.Struct, gc=False):
    """One column of a change (``columns`` or ``identity``), as wal2json writes it.

    Not tracked by the cyclic GC (``gc=False``): a batch holds hundreds of thousands
    of them, and they cannot form cycles.
    """

    name: str
    typeoid: int | None = None
    value: Any = None
    type: str | None = None


class Change(msgspec.Struct, gc=False):
    """One wal2json format-2 document (begin, change, commit or logical message)."""

    action: str
    xid: int | None = None
    timestamp: str | None = None
    origin: int | None = None
    schema: str = ""
    table: str = ""
    columns: list[Column] | None = None
    identity: list[Column] | None = None


_DECODER = msgspec.json.Decoder(list[Change], float_hook=decimal.Decimal)


@dataclass
class Peek:
    """What one peek of the slot returned.

    Attributes:
        text: the documents joined by commas (a JSON array's body), in slot order
            (text from a peek, UTF-8 bytes from a stream).
        commit_lsns: the LSN just past each commit record, in order (one per ``C``).
        rows: how many documents the slot returned.
        docs: the documents read by Arrow (:func:`.pg_arrow.parse`) when the reader
            did it already (the read-ahead thread does), else None.
    """

    text: str | bytes
    commit_lsns: list[int]
    rows: int
    docs: Any = None


@dataclass
class PgTransaction:
    """One committed source transaction, as decoded."""

    xid: int
    end_lsn: int
    commit_text: str  # the commit timestamp as wal2json wrote it (parsed in bulk)
    origin: int
    changes: list[Change] = field(default_factory=list)

    @property
    def commit_time(self) -> dt.datetime:
        """The commit time (UTC)."""
        return _timestamptz(self.commit_text)


def decode(text: str | bytes) -> list[Change]:
    """The documents of a peek (their JSON joined by commas, as text or UTF-8 bytes).

    Raises:
        DecodeError: the text is not JSON documents of wal2json format 2.
    """
    try:
        return _DECODER.decode(b"[" + text + b"]" if isinstance(text, bytes)
                               else "[" + text + "]")
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"decoding output is not wal2json format 2: {exc}; "
                          f"it begins {text[:200]!r}") from exc


def transactions(peek: Peek) -> Iterator[PgTransaction]:
    """The complete transactions of a peek, in commit order.

    A transaction is yielded when its ``C`` document arrives; its position is the
    LSN just past its commit record, which is where the slot must be advanced once the
    transaction is durably enqueued.

    Raises:
        DecodeError: for a document that is not wal2json format 2, or commits that do
            not match the LSNs the server reported.
    """
    docs = decode(peek.text) if peek.rows else []
    if len(docs) != peek.rows:
        raise DecodeError(f"the slot returned {peek.rows} documents but {len(docs)} decoded")
    acts = [d.action for d in docs]
    unknown = set(acts) - _ACTIONS
    if unknown:
        doc = docs[acts.index(min(unknown))]
        raise DecodeError(f"unknown wal2json action {doc.action!r} in "
                          f"{msgspec.json.encode(doc)[:200]!r}")
    messages = "M" in set(acts)  # logical messages are not captured
    lsns = iter(peek.commit_lsns)
    begin, after = -1, 0
    for i in [i for i, a in enumerate(acts) if a == "B" or a == "C"]:
        if acts[i] == "B":
            _outside(docs, acts, after, i)
            begin = i
            continue
        end = next(lsns, None)
        if begin < 0 or end is None:
            raise DecodeError("commit without a begin, or without its commit LSN")
        changes = docs[begin + 1:i]
        first = docs[begin]
        yield PgTransaction(int(first.xid or 0), end, _commit_time(docs[i]),
                            int(first.origin or 0),
                            [c for c in changes if c.action != "M"] if messages else changes)
        begin, after = -1, i + 1
    if begin < 0:
        _outside(docs, acts, after, len(acts))


def _outside(docs: list[Change], acts: list[str], start: int, stop: int) -> None:
    """Refuse changes between transactions (only logical messages may be there)."""
    for i in range(start, stop):
        if acts[i] != "M":
            doc = docs[i]
            raise DecodeError(f"change of {doc.schema}.{doc.table} outside a transaction")


_ACTIONS = frozenset(("B", "C", "I", "U", "D", "T", "M"))


def _commit_time(doc: Change) -> str:
    """The commit document's timestamp text (parsed later, a batch at a time)."""
    if doc.timestamp is None:
        raise DecodeError(f"wal2json {doc.action} document without a timestamp "
                          "(include-timestamp must be on)")
    return doc.timestamp


def commit_times(texts: Any) -> Any:
    """Commit timestamps (wal2json's text: a list or Arrow strings) as ``timestamp[us, UTC]``.

    Arrow parses them in one call; a text it refuses (an offset with seconds, as
    historical time zones have) sends the batch through :func:`_timestamptz`.

    >>> [t.isoformat() for t in commit_times(["2024-05-01 12:00:00.5+02",
    ...                                        "1890-01-01 10:00:00+00:09:21"]).to_pylist()]
    ['2024-05-01T10:00:00.500000+00:00', '1890-01-01T09:50:39+00:00']
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    utc = pa.timestamp("us", tz="UTC")
    arr = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
    try:
        return pc.cast(arr, utc)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.array([_timestamptz(t) for t in arr.to_pylist()], utc)


COMMANDS = {"I": "INSERT", "U": "UPDATE", "D": "DELETE"}


def unsupported_type(where: str, col: Column) -> UnsupportedTypeError:
    """The error for a column whose type OID is not in :data:`TYPE_MAP`."""
    return UnsupportedTypeError(
        f"{where}.{col.name}: PostgreSQL type {col.type or col.typeoid!r} (oid {col.typeoid}) "
        "is not supported by the LCR contract; capture a view or generated column that "
        "casts it to a supported type, or leave the table out of the capture"
    )


def convert_value(where: str, col: Column, ltype: str, conv: Callable[[Any], Any]) -> Any:
    """One column value as its logical type (the slow path, with a clear error).

    Raises:
        UnsupportedTypeError: naming the table, column, value and type.
    """
    value = col.value
    if value is None or type(value) is NATIVE.get(ltype):
        return value
    try:
        return conv(value)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise UnsupportedTypeError(
            f"{where}.{col.name}: value {str(value)[:80]!r} of type "
            f"{TYPE_NAMES.get(col.typeoid or 0, col.typeoid)} cannot be held as {ltype}: {exc}"
        ) from exc


# JSON already gives these logical types their Python type: no conversion needed.
NATIVE: dict[str, type] = {"INTEGER": int, "VARCHAR2": str, "BOOLEAN": bool}
