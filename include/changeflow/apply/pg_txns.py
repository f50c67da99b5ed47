"""Source transactions out of an Arrow table of LCRs (for the PostgreSQL apply).

The table is sorted in Arrow, its columns are turned into Python lists one column at
a time and the value maps are decoded entry by entry from their flattened children:
no per-row struct dicts are built. The contract rows (``SourceTxn.raw``, for handlers
and the error queue) are made only when asked for.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from changeflow import lcr as contract
from changeflow.apply.positions import TxnId
from changeflow.errors import SchemaMismatchError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

_MAPS = ("old_values", "new_values")
_FIELD = {name: t.field for name, t in contract.LOGICAL_TYPES.items()}
_ORDER = ("commit_scn", "source_database_name", "transaction_id", "position")
_UNIQUE = frozenset(("msg_id", "position"))  # columns whose values rarely repeat
#: The fields of a row or DDL LCR the apply reads (``raw`` has all of them).
_FIELDS = ("msg_id", "kind", "source_database_name", "command_type", "object_owner",
           "object_name", "object_type", "base_table_owner", "base_table_name", "ddl_text",
           "tag", "transaction_id", "commit_scn", "commit_time", "position", "key_columns")


@dataclass
class SourceTxn:
    """One source transaction's LCRs, in position order.

    ``lcrs`` are the LCRs with their value maps decoded to ``{COLUMN: value}`` (given,
    or made on first use from ``columns``, rows ``rows``); ``raw`` the contract rows
    (from ``source``), made on first use.
    """

    database: str
    commit_scn: int
    transaction_id: str
    commit_time: dt.datetime | None
    given: list[dict[str, Any]] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    source: pa.Table | None = field(default=None, repr=False)
    columns: Mapping[str, list[Any]] | None = field(default=None, repr=False)

    @property
    def id(self) -> TxnId:
        """The transaction's identity."""
        return TxnId(self.database, self.commit_scn, self.transaction_id)

    @property
    def size(self) -> int:
        """Its number of LCRs."""
        return len(self.rows) if self.columns is not None else len(self.given)

    @cached_property
    def lcrs(self) -> list[dict[str, Any]]:
        """The LCRs as dicts, value maps decoded."""
        if self.columns is None:
            return self.given
        cols = self.columns.items()
        return [{name: values[i] for name, values in cols} for i in self.rows]

    def changes(self) -> Iterator[tuple[Any, ...]]:
        """``(kind, command_type, owner, name, key_columns, new, old)`` per LCR."""
        if self.columns is None:
            for m in self.given:
                yield (m["kind"], m["command_type"], m["object_owner"], m["object_name"],
                       m["key_columns"], m["new_values"], m["old_values"])
            return
        c = self.columns
        yield from ((c["kind"][i], c["command_type"][i], c["object_owner"][i],
                     c["object_name"][i], c["key_columns"][i], c["new_values"][i],
                     c["old_values"][i]) for i in self.rows)

    def count(self, kind: str) -> int:
        """How many of its LCRs are of ``kind`` (ROW, DDL)."""
        if self.columns is None:
            return sum(1 for m in self.given if m["kind"] == kind)
        kinds = self.columns["kind"]
        return sum(1 for i in self.rows if kinds[i] == kind)

    @cached_property
    def raw(self) -> list[dict[str, Any]]:
        """The transaction's LCRs as contract rows (value maps as Arrow gives them)."""
        if self.source is None:
            return []
        return self.source.take(self.rows).to_pylist()


def value_maps(column: pa.ChunkedArray | pa.Array) -> list[dict[str, Any] | None]:
    """A column of typed-value maps as ``{COLUMN: python value}`` dicts (None for null).

    >>> import pyarrow as pa
    >>> from changeflow import lcr
    >>> t = lcr.arrow_schema().field("new_values").type
    >>> v = lcr.encode_value(7, "INTEGER")
    >>> value_maps(pa.array([[("ID", v)], None], t))
    [{'ID': 7}, None]

    Raises:
        SchemaMismatchError: a value of an unknown logical type.
    """
    import pyarrow as pa

    if not isinstance(column, pa.ChunkedArray):
        return _value_maps(column)
    out: list[dict[str, Any] | None] = []
    for chunk in column.chunks:  # chunk by chunk: combining would copy every map
        out.extend(_value_maps(chunk))
    return out


def _value_maps(arr: pa.MapArray) -> list[dict[str, Any] | None]:
    import numpy as np

    offsets = arr.offsets.to_pylist()  # into the children, which ignore a slice
    start = offsets[0]
    if start:
        offsets = [o - start for o in offsets]
    valid = arr.is_valid().to_pylist()
    keys = repeated(arr.keys.slice(start, offsets[-1]))
    items = arr.items.slice(start, offsets[-1])
    codes, names = _codes(items.field("type"))
    values: list[Any] = [None] * len(items)
    for j, t in enumerate(names):
        f = _FIELD.get(t)
        if f is None:
            raise SchemaMismatchError(f"unknown logical type {t!r}")
        where = np.flatnonzero(codes == j)
        if len(where) == len(values):
            values = items.field(f).to_pylist()
            break
        for w, v in zip(where.tolist(), items.field(f).take(where).to_pylist(), strict=True):
            values[w] = v
    return [dict(zip(keys[a:b], values[a:b], strict=True)) if ok else None
            for a, b, ok in zip(offsets, offsets[1:], valid, strict=False)]


def _codes(arr: pa.Array) -> tuple[np.ndarray, list[Any]]:
    """Dictionary codes of ``arr`` (-1 for null) and the distinct values they point to."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(arr)
    codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False)
    return codes, enc.dictionary.to_pylist()


def repeated(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """A column as Python values, each distinct value converted once (shared objects).

    For columns with few distinct values (names, kinds, commit times, key lists) this
    is several times faster than ``to_pylist``; a unique column falls back to it.

    >>> import pyarrow as pa
    >>> repeated(pa.array(["a", None, "a"]))
    ['a', None, 'a']
    >>> repeated(pa.array([["K"], None, ["K"], []], pa.list_(pa.string())))
    [['K'], None, ['K'], []]
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(arr) < 64:
        return arr.to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_list(arr.type) and pa.types.is_string(arr.type.value_type):
        names = arr.values
        if names.null_count or pc.any(pc.match_substring(names, "\x1f")).as_py() or \
                pc.any(pc.equal(pc.utf8_length(names), 0)).as_py():
            return arr.to_pylist()  # type: ignore[no-any-return]
        joined = pc.binary_join(arr, "\x1f")
        codes, texts = _codes(joined)
        distinct = [t.split("\x1f") if t else [] for t in texts]
    else:
        codes, distinct = _codes(arr)
    if len(distinct) * 2 > len(arr):
        return arr.to_pylist()  # type: ignore[no-any-return]
    distinct.append(None)  # code -1
    return [distinct[c] for c in codes.tolist()]


def decoded(row: dict[str, Any]) -> dict[str, Any]:
    """A contract row with its value maps as ``{COLUMN: python value}``.

    >>> from changeflow import lcr
    >>> decoded({"new_values": [("ID", lcr.encode_value(7, "INTEGER"))], "old_values": None})
    {'new_values': {'ID': 7}, 'old_values': None}
    """
    out = dict(row)
    for m in _MAPS:
        values = row.get(m)
        if values is not None:
            items = values.items() if isinstance(values, dict) else values
            values = {k: contract.decode_value(v) if isinstance(v, dict) and "type" in v
                      else v for k, v in items}
        out[m] = values
    return out


def _sorted(table: pa.Table) -> pa.Table:
    """Row LCRs first, by commit position, database, transaction and position."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = {"u": pc.cast(pc.equal(table.column("kind"), "USER"), pa.int8())}
    for name in _ORDER:
        col = table.column(name)
        keys[name] = pc.fill_null(col, "" if pa.types.is_string(col.type) else 0)
    if _in_order(pa.table(keys)):  # batches written in commit order need no copy
        return table
    order = pc.sort_indices(pa.table(keys), sort_keys=[(k, "ascending") for k in keys])
    return table.take(order)


def _in_order(keys: pa.Table) -> bool:
    """Whether the rows are already sorted by all of ``keys``' columns, ascending.

    >>> import pyarrow as pa
    >>> _in_order(pa.table({"a": [1, 1, 2], "b": ["x", "y", "a"]}))
    True
    >>> _in_order(pa.table({"a": [1, 1, 2], "b": ["y", "x", "a"]}))
    False
    """
    import pyarrow.compute as pc

    n = keys.num_rows
    if n < 2:
        return True
    ordered = None  # row i <= row i + 1 over the columns seen so far (from the last)
    for name in reversed(keys.column_names):
        col = keys.column(name).combine_chunks()
        a, b = col.slice(0, n - 1), col.slice(1)
        ordered = pc.less_equal(a, b) if ordered is None else pc.or_(
            pc.less(a, b), pc.and_(pc.equal(a, b), ordered))
    return bool(pc.all(ordered).as_py())


def source_transactions(table: pa.Table) -> tuple[list[SourceTxn], list[dict[str, Any]]]:
    """Group the LCRs into source transactions in commit order; user messages apart.

    Returns:
        The transactions (duplicated message ids dropped) and the user messages.
    """
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return [], []
    table = _sorted(table)
    kinds = table.column("kind").to_pylist()
    n_rows = next((i for i, k in enumerate(kinds) if k == "USER"), len(kinds))
    users = table.slice(n_rows).to_pylist()
    table = table.slice(0, n_rows)
    columns = Columns(table, [c for c in _FIELDS if c in table.column_names] + list(_MAPS))
    if pc.count_distinct(table.column("msg_id"), mode="all").as_py() == n_rows:
        return _unique_transactions(table, columns), users
    out: list[SourceTxn] = []
    seen: set[str] = set()
    unique = len(set(columns["msg_id"])) == n_rows
    last: tuple[Any, ...] | None = None
    for i, key in enumerate(zip(columns["source_database_name"], columns["commit_scn"],
                                columns["transaction_id"], strict=True)):
        if not unique:  # a re-delivered message: apply it once
            if columns["msg_id"][i] in seen:
                continue
            seen.add(columns["msg_id"][i])
        if key != last:
            out.append(SourceTxn(key[0], key[1], key[2], columns["commit_time"][i],
                                 source=table, columns=columns))
            last = key
        out[-1].rows.append(i)
    return out, users


_TXN_KEY = ("source_database_name", "commit_scn", "transaction_id")


def _unique_transactions(table: pa.Table, columns: Columns) -> list[SourceTxn]:
    """The transactions of sorted rows without repeated message ids: a transaction
    starts where its key (database, commit position, transaction id) changes, as the
    row-by-row grouping compares the key tuples (None equal only to None)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    starts = np.zeros(n, dtype=bool)
    starts[0] = True
    for name in _TXN_KEY:
        col = table.column(name).combine_chunks()
        a, b = col.slice(0, n - 1), col.slice(1)
        differ = pc.and_(pc.fill_null(pc.not_equal(a, b), True),
                         pc.invert(pc.and_(pc.is_null(a), pc.is_null(b))))
        starts[1:] |= differ.to_numpy(zero_copy_only=False)
    at = np.flatnonzero(starts)
    ends = np.append(at[1:], n).tolist()
    taken = pa.array(at)
    dbs, scns, ids, times = (table.column(c).take(taken).to_pylist()
                             for c in (*_TXN_KEY, "commit_time"))
    return [SourceTxn(d, s, x, t, rows=list(range(a, b)), source=table, columns=columns)
            for d, s, x, t, a, b in zip(dbs, scns, ids, times, at.tolist(), ends, strict=True)]


class Columns(Mapping[str, list[Any]]):
    """A table's columns as Python lists, each converted on first use (value maps as
    ``{COLUMN: value}`` dicts): the column-wise netting (:mod:`.pg_columnar`) reads
    the table itself, and needs none of the value maps."""

    def __init__(self, table: pa.Table, names: list[str]):
        self._table, self._names = table, names
        self._lists: dict[str, list[Any]] = {}

    def __getitem__(self, name: str) -> list[Any]:
        got = self._lists.get(name)
        if got is None:
            if name not in self._names:
                raise KeyError(name)
            col = self._table.column(name)
            got = self._lists[name] = (value_maps(col) if name in _MAPS else col.to_pylist()
                                       if name in _UNIQUE else repeated(col))
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
