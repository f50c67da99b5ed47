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
    import numpy as np
    import pyarrow.compute as pc

    if not builder.detect or not txns:
        return None
    source = txns[0].source
    start, stop = txns[0].rows[0] if txns[0].rows else 0, (txns[-1].rows or [0])[-1] + 1
    if source is None or any(t.source is not source or t.columns is None for t in txns) or \
            stop - start != sum(len(t.rows) for t in txns):
        return None  # not one contiguous run of the round's table (re-delivered rows)
    rows = source.slice(start, stop - start)
    if not pc.all(pc.equal(rows.column("kind"), "ROW")).as_py():
        return None
    cmd = _array(rows, "command_type").to_numpy(zero_copy_only=False)
    if not np.isin(cmd, ["INSERT", "UPDATE", "DELETE"]).all():
        return None
    owner = pc.dictionary_encode(_array(rows, "object_owner"))
    name = pc.dictionary_encode(_array(rows, "object_name"))
    keys = pc.dictionary_encode(pc.binary_join(_array(rows, "key_columns"), "\x1f"))
    if owner.null_count or name.null_count or keys.null_count:
        return None
    pair = (owner.indices.to_numpy().astype(np.int64) * len(name.dictionary)
            + name.indices.to_numpy().astype(np.int64))
    _, first_at, code = np.unique(pair, return_index=True, return_inverse=True)
    code = code.ravel()
    key_code = keys.indices.to_numpy()
    new = _Maps(_array(rows, "new_values"))
    old = _Maps(_array(rows, "old_values"))
    out = []
    for group in np.argsort(first_at, kind="stable").tolist():
        at = np.flatnonzero(code == group)
        o = owner.dictionary[owner.indices[int(at[0])].as_py()].as_py()
        n = name.dictionary[name.indices[int(at[0])].as_py()].as_py()
        if f"{o}.{n}".upper() in builder.import_tables or \
                len(np.unique(key_code[at])) != 1:
            return None
        key_list = _array(rows, "key_columns")[int(at[0])].as_py()
        got = _table(NetTable(o, n, tuple(key_list)), cmd[at], new.image(at), old.image(at))
        if got is None:
            return None
        out.append(got)
    return out


def _array(table: pa.Table, name: str) -> Any:
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _table(out: NetTable, cmd: np.ndarray, new: _Image | None, old: _Image | None
           ) -> NetTable | None:
    """One table's net changes from its rows' commands and images (None: declined)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = out.keys
    if not keys or new is None or old is None:
        return None
    ins, upd, dele = cmd == "INSERT", cmd == "UPDATE", cmd == "DELETE"
    if not np.array_equal(new.rows, ins | upd) or not np.array_equal(old.rows, upd | dele):
        return None  # an image missing, or one the netting would not read
    if not set(old.names) <= set(keys):
        return None  # old values compared besides the key: the Python netting checks them
    if (ins.any() and not set(keys) <= set(new.names)) or \
            ((upd | dele).any() and not set(keys) <= set(old.names)):
        return None
    all_rows = np.arange(len(cmd))
    # the key of every change: from the old image when it has one, else the new one
    key_values = []
    for k in keys:
        from_new = new.column(k, all_rows) if ins.any() else None
        from_old = old.column(k, all_rows) if (upd | dele).any() else None
        if from_new is not None and from_old is not None:
            if from_new.type != from_old.type:
                return None
            value = pc.if_else(pa.array(ins), from_new, from_old)
        else:
            value = from_new if from_new is not None else from_old
        if value is None or value.null_count or pa.types.is_floating(value.type):
            return None  # (NaN and -0.0 group otherwise than Python's equality)
        key_values.append(value)
        if upd.any() and k in new.names:  # an UPDATE must not change its key
            at = np.flatnonzero(upd)
            same = pc.equal(new.column(k, at), old.column(k, at))
            if same.null_count or not pc.all(same).as_py():
                return None
    last, order, count, first = _by_key(key_values)
    if np.any((count[order] > 1) & ~upd):
        return None  # a key inserted or deleted among other changes of it
    take = last[np.argsort(first, kind="stable")]  # each key's last change, by first change
    kinds = cmd[take]
    key_lists = [v.take(pa.array(take)).to_pylist() for v in key_values]
    for kind in ("DELETE", "UPDATE", "INSERT"):
        at = np.flatnonzero(kinds == kind)
        if not len(at):
            continue
        by_key = [[kv[i] for i in at.tolist()] for kv in key_lists]
        values = [new.column(c, take[at]).to_pylist() for c in new.names] \
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


class _Maps:
    """A group's value-map column, read without copying: entry names and logical types
    dictionary-encoded once for the group."""

    def __init__(self, maps: pa.MapArray):
        import pyarrow.compute as pc

        offsets = maps.offsets.to_numpy()
        # the children of a slice are the whole array's: keep the slice's entries only
        start, stop = int(offsets[0]), int(offsets[-1])
        self.offsets = offsets - start
        self.valid = maps.is_valid().to_numpy(zero_copy_only=False)
        self.items = maps.items.slice(start, stop - start)
        names = pc.dictionary_encode(maps.keys.slice(start, stop - start))
        types = pc.dictionary_encode(self.items.field("type"))
        self.names, self.name_code = names.dictionary.to_pylist(), names.indices.to_numpy()
        self.types, self.type_code = types.dictionary.to_pylist(), \
            pc.fill_null(types.indices, -1).to_numpy()

    def image(self, at: np.ndarray) -> _Image | None:
        """The images of rows ``at`` (None unless every one that has an image lists the
        same columns in the same order, each of one logical type)."""
        import numpy as np

        from changeflow import lcr

        rows = self.valid[at]
        starts = self.offsets[at]
        widths = self.offsets[at + 1] - starts
        if not rows.any():
            return _Image((), rows, starts, {}, self.items)
        if np.any(widths[~rows] != 0):
            return None
        base = starts[rows]
        width = int(widths[rows][0])
        if width == 0 or np.any(widths[rows] != width):
            return None
        names, fields = [], {}
        for j in range(width):
            name_codes = self.name_code[base + j]
            type_codes = self.type_code[base + j]
            if np.any(name_codes != name_codes[0]) or np.any(type_codes != type_codes[0]) \
                    or type_codes[0] < 0:
                return None
            ltype = lcr.LOGICAL_TYPES.get(self.types[type_codes[0]])
            if ltype is None:
                return None
            names.append(self.names[name_codes[0]])
            fields[names[-1]] = (j, ltype.field)
        return _Image(tuple(names), rows, starts, fields, self.items)


class _Image:
    """The images (new or old values) of one table's rows in a group, as columns."""

    def __init__(self, names: tuple[str, ...], rows: np.ndarray, starts: np.ndarray,
                 fields: dict[str, tuple[int, str]], items: pa.StructArray):
        self.names, self.rows, self._starts = names, rows, starts
        self._fields, self._items = fields, items

    def column(self, name: str, at: np.ndarray) -> pa.Array:
        """The column's values at rows ``at`` (null for a row without an image)."""
        import numpy as np
        import pyarrow as pa

        j, f = self._fields[name]
        index = np.where(self.rows[at], self._starts[at] + j, -1)
        return self._items.field(f).take(pa.array(index, mask=index < 0))


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
