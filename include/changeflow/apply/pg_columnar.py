"""Netting a group of source transactions column-wise, for the set-based apply.

:func:`.pg_bulk.net` nets a group change by change in Python, with value maps decoded to
dicts. Here the same netting is done over the group's Arrow columns, for the groups whose
netting is plain, which is what an OLTP source with primary keys produces:

* every LCR is a row INSERT, UPDATE or DELETE of a table keyed by its key columns, none
  of them an import table;
* per table, the new images (INSERT, UPDATE) list the same columns in the same order,
  and so do the old images (UPDATE, DELETE), which hold key columns only: no old value
  is compared, so netting checks nothing but the key;
* an UPDATE does not change its key, and a key changed more than once in the group is
  only UPDATEd (an UPDATE chain nets to one UPDATE of the last values).

The net changes, and so the statements, are those :func:`.pg_bulk.net` and
:meth:`.pg_bulk.BulkApplier.apply` make (same statements, same rows in the same order,
same parameters); anything else returns ``None`` and the group goes through
:func:`.pg_bulk.net`, which also gives the reasons a group cannot be set-based.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow.apply import pg_bulk
from changeflow.apply.pg_txns import SourceTxn

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from changeflow.apply.pg_statements import StatementBuilder

@dataclass
class NetTable:
    """One table's net changes: statement shape -> one parameter list per column."""

    owner: str
    name: str
    keys: tuple[str, ...]
    deletes: list[list[Any]] = field(default_factory=list)  # key columns
    update_cols: tuple[str, ...] = ()
    updates: list[list[Any]] = field(default_factory=list)  # update_cols, then keys
    insert_cols: tuple[str, ...] = ()
    inserts: list[list[Any]] = field(default_factory=list)  # insert_cols


def net(builder: StatementBuilder, txns: list[SourceTxn]) -> list[NetTable] | None:
    """The group's net changes per table (in order of first change), or None."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not builder.detect or not txns:
        return None
    source = txns[0].source
    start, stop = txns[0].rows[0] if txns[0].rows else 0, (txns[-1].rows or [0])[-1] + 1
    if source is None or any(t.source is not source or t.columns is None for t in txns) or \
            stop - start != sum(len(t.rows) for t in txns):
        return None  # not one contiguous run of the round's table (re-delivered rows)
    rows = source.slice(start, stop - start)
    if not pc.all(pc.equal(rows.column("kind"), "ROW")).as_py() or \
            not pc.all(pc.is_in(rows.column("command_type"),
                                pa.array(["INSERT", "UPDATE", "DELETE"]))).as_py():
        return None
    owner = pc.dictionary_encode(rows.column("object_owner")).combine_chunks()
    name = pc.dictionary_encode(rows.column("object_name")).combine_chunks()
    if owner.null_count or name.null_count:
        return None
    import numpy as np

    pair = (owner.indices.to_numpy().astype(np.int64) * len(name.dictionary)
            + name.indices.to_numpy().astype(np.int64))
    _, first_at, code = np.unique(pair, return_index=True, return_inverse=True)
    out = []
    for group in np.argsort(first_at, kind="stable").tolist():
        at = np.flatnonzero(code == group)
        o, n = owner.dictionary[owner.indices[int(at[0])].as_py()].as_py(), \
            name.dictionary[name.indices[int(at[0])].as_py()].as_py()
        if f"{o}.{n}".upper() in builder.import_tables:
            return None
        got = _table(o, n, rows.select(["key_columns", "command_type", "new_values",
                                        "old_values"]).take(pa.array(at)))
        if got is None:
            return None
        out.append(got)
    return out


def _table(owner: str, name: str, rows: pa.Table) -> NetTable | None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys_col = rows.column("key_columns").combine_chunks()
    if keys_col.null_count or len(pc.unique(pc.binary_join(keys_col, "\x1f"))) != 1:
        return None
    keys = tuple(keys_col[0].as_py())
    if not keys:
        return None
    cmd = rows.column("command_type").combine_chunks().to_numpy(zero_copy_only=False)
    ins, upd, dele = cmd == "INSERT", cmd == "UPDATE", cmd == "DELETE"
    new = _Image.of(rows.column("new_values").combine_chunks(), ins | upd)
    old = _Image.of(rows.column("old_values").combine_chunks(), upd | dele)
    if new is None or old is None:
        return None
    if old.names and not set(old.names) <= set(keys):
        return None  # old values compared besides the key: the Python netting checks them
    if (ins.any() and not set(keys) <= set(new.names)) or \
            ((upd | dele).any() and not set(keys) <= set(old.names)):
        return None
    # the key of every change: from the old image when it has one, else the new one
    key_values = []
    for k in keys:
        from_new = new.column(k) if ins.any() else None
        from_old = old.column(k) if (upd | dele).any() else None
        if from_new is not None and from_old is not None:
            if from_new.type != from_old.type:
                return None
            key_values.append(pc.if_else(pa.array(ins), from_new, from_old))
        else:
            key_values.append(from_new if from_new is not None else from_old)
        if key_values[-1] is None or key_values[-1].null_count:
            return None
        if upd.any() and k in new.names:  # an UPDATE must not change its key
            same = pc.equal(new.column(k).filter(pa.array(upd)),
                            old.column(k).filter(pa.array(upd)))
            if same.null_count or not pc.all(same).as_py():
                return None
    if any(pa.types.is_floating(v.type) for v in key_values):
        return None  # NaN and -0.0 group otherwise than Python's equality
    last, order, count, first = _by_key(key_values)
    if np.any((count[order] > 1) & ~upd):
        return None  # a key inserted or deleted among other changes of it
    out = NetTable(owner, name, keys)
    take = last[np.argsort(first, kind="stable")]  # each key's last change, by first change
    kinds = cmd[take]
    key_lists = [v.take(pa.array(take)).to_pylist() for v in key_values]
    for kind in ("DELETE", "UPDATE", "INSERT"):
        at = np.flatnonzero(kinds == kind)
        if not len(at):
            continue
        by_key = [[kv[i] for i in at.tolist()] for kv in key_lists]
        values = [new.column(c).take(pa.array(take[at])).to_pylist() for c in new.names] \
            if kind != "DELETE" else []
        if kind == "DELETE":
            out.deletes = by_key
        elif kind == "UPDATE":
            out.update_cols, out.updates = new.names, values + by_key
        else:
            out.insert_cols, out.inserts = new.names, values
    return out


def _by_key(key_values: list[pa.Array]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct key its last row, each row's key, per key its number of rows and its
    first row."""
    import numpy as np
    import pyarrow.compute as pc

    codes = np.stack([pc.dictionary_encode(v).indices.to_numpy().astype(np.int64)
                      for v in key_values])
    if len(key_values) == 1:
        _, order, count = np.unique(codes[0], return_inverse=True, return_counts=True)
    else:
        _, order, count = np.unique(codes.T, axis=0, return_inverse=True, return_counts=True)
    order = order.ravel()
    rows = np.arange(len(order))
    last = np.full(len(count), -1, np.int64)
    np.maximum.at(last, order, rows)
    first = np.full(len(count), len(order), np.int64)
    np.minimum.at(first, order, rows)
    return last, order, count, first


class _Image:
    """The value maps of the rows that have one (new or old), as columns by name."""

    def __init__(self, names: tuple[str, ...], columns: dict[str, pa.Array]):
        self.names, self._columns = names, columns

    def column(self, name: str) -> pa.Array:
        """The column's value for every row (null where the row has no image)."""
        return self._columns[name]

    @classmethod
    def of(cls, maps: pa.MapArray, rows: np.ndarray) -> _Image | None:
        """None unless every row of ``rows`` has an image listing the same columns in the
        same order with one logical type each, and no other row has one."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from changeflow import lcr

        valid = maps.is_valid().to_numpy(zero_copy_only=False)
        if not np.array_equal(valid, rows):
            return None
        if not rows.any():
            return cls((), {})
        offsets = maps.offsets.to_numpy()
        lengths = np.diff(offsets)
        width = int(lengths[rows][0])
        if width == 0 or np.any(lengths[rows] != width) or np.any(lengths[~rows] != 0):
            return None
        base = offsets[:-1][rows]  # each image's first entry
        keys = maps.keys
        names = tuple(keys.slice(int(base[0]), width).to_pylist())
        items = maps.items
        types = items.field("type")
        columns = {}
        where = np.flatnonzero(rows)
        for j, col in enumerate(names):
            at = pa.array(base + j)
            if not pc.all(pc.equal(keys.take(at), col)).as_py():
                return None
            kinds = pc.unique(types.take(at))
            if len(kinds) != 1 or kinds[0].as_py() not in lcr.LOGICAL_TYPES:
                return None
            values = items.field(lcr.LOGICAL_TYPES[kinds[0].as_py()].field).take(at)
            # back to one value per row of the table (null for rows without an image)
            spread = np.full(len(rows), -1, np.int64)
            spread[where] = np.arange(len(where))
            columns[col] = values.take(pa.array(spread, mask=spread < 0))
        return cls(names, columns)


def apply(bulk: pg_bulk.BulkApplier, tables: list[NetTable], txns: list[SourceTxn],
          apply_name: str) -> None:
    """Run the net changes' statements and the done records (inside the caller's
    transaction), as :meth:`.pg_bulk.BulkApplier.apply` does for :func:`.pg_bulk.net`'s.

    Raises:
        NotBulk: as :meth:`.pg_bulk.BulkApplier.apply`.
        psycopg.Error: from the statements.
    """
    infos = [bulk.eligible(t) for t in tables]
    for t, info in zip(tables, infos, strict=True):
        if t.deletes:
            bulk.run_columns(t, info, "delete", (), (), [pg_bulk.pack(c) for c in t.deletes],
                             len(t.deletes[0]))
        if t.updates:
            bulk.run_columns(t, info, "update", t.update_cols, (),
                             [pg_bulk.pack(c) for c in t.updates], len(t.updates[0]))
        if t.inserts:
            bulk.run_columns(t, info, "insert", t.insert_cols, (),
                             [pg_bulk.pack(c) for c in t.inserts], len(t.inserts[0]))
    bulk.record(txns, apply_name)
