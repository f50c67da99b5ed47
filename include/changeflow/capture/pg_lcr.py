"""Building the Arrow table of LCRs from decoded PostgreSQL transactions, column-wise.

:class:`LcrBuilder` collects transactions as they are decoded and builds the whole
batch at once: per-transaction fields are repeated with ``take``, table names are
canonicalised once per distinct name, and each value map (``new_values`` from a
change's ``columns``, ``old_values`` from its ``identity``) is built from flat lists of
every column entry of the batch. Values that JSON already gives their Python type
(integers, text, booleans) and exact numbers go to Arrow in one call per logical type;
only dates, timestamps, doubles and bytea are converted value by value. Any value Arrow
refuses is converted again value by value, so a bad value fails with the same message,
naming table, column and type, as it would alone.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from changeflow import lcr
from changeflow.capture.pg_decode import (
    COMMANDS,
    NATIVE,
    TYPE_MAP,
    Change,
    Column,
    PgTransaction,
    UnsupportedTypeError,
    commit_times,
    convert_value,
    unsupported_type,
)

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

_NAME, _TYPEOID, _VALUE = attrgetter("name"), attrgetter("typeoid"), attrgetter("value")
_ACTION, _SCHEMA, _TABLE = attrgetter("action"), attrgetter("schema"), attrgetter("table")
_EMPTY: list[Column] = []


def _or_empty(x: list[Column] | None) -> list[Column]:
    return x if x is not None else _EMPTY


# The value-struct field each logical type is stored in.
FIELD_OF = {t.field: t.name for t in lcr.LOGICAL_TYPES.values()}
# The largest exact number an LCR holds (``decimal(38, 10)``).
MAX_NUMBER = decimal.Decimal("9" * (lcr.DECIMAL_PRECISION - lcr.DECIMAL_SCALE) + "."
                             + "9" * lcr.DECIMAL_SCALE)
_canonical: dict[str, str] = {}


def canonical(name: str) -> str:
    """:func:`lcr.canonical_identifier`, cached per name."""
    value = _canonical.get(name)
    if value is None:
        value = _canonical[name] = lcr.canonical_identifier(name)
    return value


class LcrBuilder:
    """Accumulates decoded transactions and builds one Arrow table of their LCRs.

    Args:
        database: the source database global name (upper-cased in the LCRs).
        key_columns: ``(schema, table) -> canonical key column names``.
    """

    def __init__(self, database: str, key_columns: Callable[[str, str], list[str]]):
        self.database = database.upper()
        self.db_id = lcr.message_id(self.database)[:8]
        self.key_columns = key_columns
        self.txns: list[tuple[PgTransaction, bytes | None, str]] = []
        self.changes: list[Change] = []

    def __len__(self) -> int:
        return len(self.changes)

    def add(self, txn: PgTransaction, tag: bytes | None, database: str | None = None) -> int:
        """Add every change of a transaction. Returns how many LCRs were added.

        Args:
            database: the source database of a forwarded transaction (an apply's
                origin names it); default: the capture's own.
        """
        self.txns.append((txn, tag, database or self.database))
        self.changes.extend(txn.changes)
        return len(txn.changes)

    def to_arrow(self) -> pa.Table:
        """The LCRs added so far, as a table following :func:`lcr.arrow_schema`."""
        import numpy as np
        import pyarrow as pa

        schema = lcr.arrow_schema()
        counts = np.fromiter((len(t.changes) for t, _, _ in self.txns), np.int64,
                             len(self.txns))
        index = np.repeat(np.arange(len(self.txns)), counts)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        position = np.arange(int(counts.sum()), dtype=np.int64) - starts + 1
        txn = TxnColumns(
            end_lsn=np.fromiter((t.end_lsn for t, _, _ in self.txns), np.int64,
                                len(self.txns)),
            xid=pa.array([t.xid for t, _, _ in self.txns], pa.int64()),
            tag=[tag for _, tag, _ in self.txns], database=[db for _, _, db in self.txns],
            commit_text=[t.commit_text for t, _, _ in self.txns])
        changes = self.changes
        cols = {**transaction_columns(self.database, txn, index, position),
                **change_columns(pa.array(list(map(_ACTION, changes)), pa.string()),
                                 pa.array(list(map(_SCHEMA, changes)), pa.string()),
                                 pa.array(list(map(_TABLE, changes)), pa.string()),
                                 self.key_columns)}
        maps = {"new_values": self._values(schema.field("new_values").type, "columns",
                                           ("I", "U")),
                "old_values": self._values(schema.field("old_values").type, "identity",
                                           ("U", "D"))}
        return assemble(len(changes), cols, maps)

    def _values(self, map_type: pa.MapType, attr: str, actions: tuple[str, ...]) -> pa.Array:
        """A value-map column from each change's ``columns`` or ``identity`` list."""
        import numpy as np
        import pyarrow as pa

        get = attrgetter(attr)
        lists = [get(c) if c.action in actions else None for c in self.changes]
        lengths = np.fromiter(map(len, map(_or_empty, lists)), np.int64, len(lists))
        offsets = np.zeros(len(lists) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        entries: list[Column] = list(chain.from_iterable(filter(None, lists)))
        names = pa.array(list(map(_NAME, entries)), pa.string()).dictionary_encode()
        keys = pa.array([canonical(x) for x in names.dictionary.to_pylist()],
                        pa.string()).take(names.indices)
        owners = np.repeat(np.arange(len(lists)), lengths)
        items = _items(map_type.item_type, entries, owners, self.changes)
        mask = pa.array([x is None for x in lists], pa.bool_())
        return pa.MapArray.from_arrays(pa.array(offsets), keys, items, type=map_type,
                                       mask=mask)


class TxnColumns(NamedTuple):
    """Per-transaction fields of a batch, one entry per transaction, in commit order."""

    end_lsn: np.ndarray  # int64
    xid: pa.Array  # int64
    tag: list[bytes | None]
    database: list[str]
    commit_text: pa.Array | list[str]  # commit timestamps as wal2json wrote them


def transaction_columns(database: str, txn: TxnColumns, index: np.ndarray,
                        position: np.ndarray) -> dict[str, Any]:
    """The fields every LCR of a transaction shares, and its ids and positions.

    Args:
        database: the capture's source database (its message ids name it).
        txn: the transactions.
        index: each LCR's transaction (an index into ``txn``).
        position: each LCR's 1-based position in its transaction.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    which = pa.array(index)
    # A message id is the source database, the commit LSN and the position: stable
    # across re-reads of the slot, so a replay is recognised.
    db_id = lcr.message_id(database.upper())[:8]
    prefixes = pa.array([f"{db_id}{lsn:016x}" for lsn in txn.end_lsn.tolist()], pa.string())
    top = int(position.max()) if len(position) else 0
    hexes = pa.array([f"{p:08x}" for p in range(1, top + 1)], pa.string())
    ids = pc.binary_join_element_wise(prefixes.take(which), hexes.take(pa.array(position - 1)),
                                      "")
    return {
        "msg_id": ids,
        "position": pa.array(position, pa.int64()),
        "tag": pa.array(txn.tag, pa.binary()).take(which),
        "source_database_name": pa.array(txn.database, pa.string()).take(which),
        "transaction_id": pc.cast(txn.xid, pa.string()).take(which),
        "commit_scn": pa.array(txn.end_lsn, pa.int64()).take(which),
        "commit_time": commit_times(txn.commit_text).take(which),
    }


def change_columns(action: Any, owner: Any, name: Any,
                   key_columns: Callable[[str, str], list[str]]) -> dict[str, Any]:
    """Kind, command, object and key columns of each change (per distinct value).

    Args:
        action, owner, name: each change's wal2json action, schema and table (Arrow
            string arrays).
        key_columns: ``(schema, table) -> canonical key column names``.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(action)
    action = pc.dictionary_encode(action)
    owner = pc.dictionary_encode(owner)
    name = pc.dictionary_encode(name)
    if isinstance(action, pa.ChunkedArray):
        action, owner, name = (c.combine_chunks() for c in (action, owner, name))
    acts = action.dictionary.to_pylist()
    truncate = pc.equal(action.indices, pa.scalar(acts.index("T"), action.indices.type)
                        ) if "T" in acts else None

    def by_action(values: dict[str, Any]) -> pa.Array:
        return pa.array([values.get(a) for a in acts], pa.string()).take(action.indices)

    n_names = len(name.dictionary)
    pair = (owner.indices.to_numpy().astype(np.int64) * n_names
            + name.indices.to_numpy().astype(np.int64))
    pairs, pair_code = np.unique(pair, return_inverse=True)
    rows = {int(p) for p in np.unique(pair[~truncate.to_numpy(zero_copy_only=False)])} \
        if truncate is not None else set(pairs.tolist())
    owners, names = owner.dictionary.to_pylist(), name.dictionary.to_pylist()
    keys = pa.array([key_columns(owners[p // n_names], names[p % n_names])
                     if p in rows else None for p in pairs.tolist()],
                    pa.list_(pa.string())).take(pa.array(pair_code.ravel()))
    out: dict[str, Any] = {
        "kind": by_action({"T": "DDL", **{a: "ROW" for a in COMMANDS}}),
        "command_type": by_action({"T": "TRUNCATE TABLE", **COMMANDS}),
        "object_owner": pa.array([canonical(x) for x in owners],
                                 pa.string()).take(owner.indices),
        "object_name": pa.array([canonical(x) for x in names],
                                pa.string()).take(name.indices),
        "object_type": by_action({"T": "TABLE"}),
        "key_columns": keys,
        "ddl_text": None,
    }
    if truncate is not None:
        out["key_columns"] = pc.if_else(truncate, pa.nulls(n, keys.type), keys)
        raw_owner = pa.array(owners, pa.string()).take(owner.indices)
        raw_name = pa.array(names, pa.string()).take(name.indices)
        text = pc.binary_join_element_wise('TRUNCATE TABLE "', raw_owner, '"."', raw_name,
                                           '"', "")
        out["ddl_text"] = pc.if_else(truncate, text, pa.scalar(None, pa.string()))
    return out


def assemble(n: int, cols: dict[str, Any], maps: dict[str, pa.Array]) -> pa.Table:
    """The LCR table from its computed columns (the others constant or null)."""
    import pyarrow as pa

    schema = lcr.arrow_schema()
    arrays = []
    for f in schema:
        if f.name == "schema_version":
            arrays.append(pa.array([lcr.SCHEMA_VERSION] * n, f.type))
        elif f.name == "origin":
            arrays.append(pa.array(["CAPTURED"] * n, f.type))
        elif f.name in maps:
            arrays.append(maps[f.name])
        elif cols.get(f.name) is not None:
            col = cols[f.name]
            if isinstance(col, pa.ChunkedArray):
                col = col.combine_chunks()
            arrays.append(col.cast(f.type) if isinstance(col, pa.Array)
                          else pa.array(col, f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _items(struct_type: pa.StructType, entries: list[Column], owners: np.ndarray,
           changes: list[Change]) -> pa.StructArray:
    """The value structs of every entry: its logical type and the value in its field."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    oids = pc.fill_null(pa.array(list(map(_TYPEOID, entries)), pa.int64()), -1).to_numpy()
    distinct, code = np.unique(oids, return_inverse=True)
    ltypes = []
    for i, oid in enumerate(distinct.tolist()):
        mapped = TYPE_MAP.get(oid)
        if mapped is None:
            at = int(np.argmax(code == i))
            change = changes[int(owners[at])]
            raise unsupported_type(f"{change.schema}.{change.table}", entries[at])
        ltypes.append(mapped[0])
    types = pa.array(ltypes, pa.string()).take(pa.array(code))
    values = list(map(_VALUE, entries))
    children = [types]
    for f in list(struct_type)[1:]:
        ltype = FIELD_OF[f.name]
        groups = [i for i, t in enumerate(ltypes) if t == ltype]
        if not groups:
            children.append(pa.nulls(len(entries), f.type))
            continue
        idx = np.flatnonzero(np.isin(code, groups))
        part = _typed(f.type, ltype, _pick(values, idx), idx, entries, owners, changes)
        where = np.full(len(entries), -1, np.int64)
        where[idx] = np.arange(len(idx))
        children.append(part.take(pa.array(where, mask=where < 0)))
    return pa.StructArray.from_arrays(children, fields=list(struct_type))


def _pick(values: list[Any], idx: np.ndarray) -> list[Any]:
    """``values`` at the positions ``idx`` (all of them when ``idx`` covers the list)."""
    from operator import itemgetter

    if len(idx) == len(values):
        return values
    if len(idx) == 1:
        return [values[int(idx[0])]]
    return list(itemgetter(*idx.tolist())(values))


def _typed(arrow_type: pa.DataType, ltype: str, values: list[Any], idx: np.ndarray,
           entries: list[Column], owners: np.ndarray, changes: list[Change]) -> pa.Array:
    """Entries of one logical type as an Arrow array: in bulk, else value by value."""
    import pyarrow as pa

    if ltype in NATIVE or ltype == "NUMBER":
        try:
            return pa.array(values, arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            pass  # some value needs converting, or is bad: the per-value path says which
    out = []
    for i in idx.tolist():
        e = entries[i]
        change = changes[int(owners[i])]
        out.append(convert_value(f"{change.schema}.{change.table}", e, ltype,
                                 TYPE_MAP[e.typeoid or 0][1]))
    try:
        return pa.array(out, arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise UnsupportedTypeError(f"a {ltype} value cannot be held as {arrow_type}: "
                                   f"{exc}") from exc
