"""A Parquet apply pass's messages over Arrow, on the driver (:mod:`.driver_pass`).

What the Spark pass computes with DataFrames, computed here from the batch as an Arrow
table, with the same results:

* :func:`transactions` and :func:`shapes`: :func:`.survey.transactions` and
  :func:`.survey.tables` of row LCRs;
* :func:`effects`: :func:`.images.effects`, the LCRs' effects on keys (key, data columns
  typed as the table declares them, old values of the compared columns, the columns a
  partial UPDATE lacks), for LCRs whose UPDATEs keep their key.

Whatever it cannot show to be the Spark pass's result raises
:class:`.arrow_files.Unproven` (the pass then runs in Spark).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.apply import arrow_files as af
from changeflow.apply import survey
from changeflow.apply.images import lcr_key
from changeflow.apply.positions import TxnId
from changeflow.apply.target import TargetTable

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

_TXN = ("source_database_name", "commit_scn", "transaction_id")


def table_names(table: pa.Table) -> pa.ChunkedArray:
    """Each message's target table name (``owner.name``, lower case)."""
    import pyarrow.compute as pc

    return pc.utf8_lower(pc.binary_join_element_wise(
        table.column("object_owner"), table.column("object_name"), "."))


def transactions(table: pa.Table) -> list[survey.TxnInfo]:
    """:func:`.survey.transactions` of plain row LCRs."""
    import pyarrow as pa

    if table.num_rows == 0:
        return []
    t = pa.table({**{c: table.column(c) for c in _TXN}, "t": table.column("commit_time"),
                  "name": table_names(table), "one": pa.array([1] * table.num_rows, pa.int64())})
    g = t.group_by(list(_TXN), use_threads=False).aggregate(
        [("t", "max"), ("one", "sum"), ("name", "distinct")])
    out = []
    for src, scn, txn, ct, n, names in zip(*(g.column(c).to_pylist() for c in (
            *_TXN, "t_max", "one_sum", "name_distinct")), strict=True):
        # as Spark's collect gives a timestamp: the local wall time, naive
        local = ct.astimezone().replace(tzinfo=None) if ct is not None else None
        out.append(survey.TxnInfo(TxnId(src, int(scn or 0), txn), local, int(n),
                                  {x for x in names if x is not None}, False, None))
    return sorted(out, key=lambda t: (t.id.scn, t.id.source, t.id.txn))


def of_txns(table: pa.Table, txns: set[TxnId], names: tuple[str, str, str] = _TXN
            ) -> pa.Array:
    """Per row, whether it belongs to one of ``txns`` (its source, commit position and
    transaction id in the columns ``names``; matched by :attr:`.TxnId.key`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    src, scn, txn = names
    ids = pc.binary_join_element_wise(
        table.column(src), pc.cast(table.column(scn), pa.string()), table.column(txn), "\x1f")
    return pc.fill_null(pc.is_in(ids, value_set=pa.array([t.key for t in txns], pa.string())),
                        False)


def _joined(map_col: Any, part: str) -> pa.Array:
    """Per row, the names or types of a value map joined into one string."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys, values, offsets = _entries(map_col)
    flat = keys if part == "key" else pc.struct_field(values, ["type"])
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pc.fill_null(flat, "\x00"))
    return pc.binary_join(lists, "\x1e")


def shapes(table: pa.Table) -> dict[str, survey.TableShape]:
    """:func:`.survey.tables` of plain row LCRs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return {}
    kc = table.column("key_columns").combine_chunks()
    keys = pc.binary_join(pa.ListArray.from_arrays(
        pc.subtract(kc.offsets, kc.offsets[0]), pc.fill_null(pc.list_flatten(kc), "")), "\x1e")
    t = pa.table({
        "o": table.column("object_owner"), "n": table.column("object_name"),
        "k": pc.fill_null(keys, ""), "c": table.column("command_type"),
        "nc": _joined(table.column("new_values"), "key"),
        "nt": _joined(table.column("new_values"), "type"),
        "oc": _joined(table.column("old_values"), "key"),
        "ot": _joined(table.column("old_values"), "type"),
        "one": pa.array([1] * table.num_rows, pa.int64())})
    g = t.group_by(["o", "n", "k", "c", "nc", "nt", "oc", "ot"], use_threads=False).aggregate(
        [("one", "sum")])

    def split(s: str | None) -> list[str]:
        return s.split("\x1e") if s else []

    # A new table's columns come in the order the first shape lists them: the INSERTs'
    # (every column, as the source lists them), then the widest (Spark's survey takes
    # its groups in whatever order they come).
    groups = sorted(g.to_pylist(), key=lambda r: (r["o"], r["n"], r["c"] != "INSERT",
                                                  -len(split(r["nc"])), r["nc"], r["oc"]))
    out: dict[str, survey.TableShape] = {}
    for r in groups:
        name = f"{r['o']}.{r['n']}".lower()
        shape = out.setdefault(name, survey.TableShape(name))
        shape.n += int(r["one_sum"])
        if not shape.key_columns and r["k"]:
            shape.key_columns.extend(k.lower() for k in split(r["k"]))
        known = {c for c, _ in shape.columns}
        for names, types in ((split(r["nc"]), split(r["nt"])), (split(r["oc"]),
                                                                 split(r["ot"]))):
            for col, ltype in zip(names, types, strict=True):
                if col.lower() not in known and ltype and ltype != "\x00":
                    shape.columns.append((col.lower(), ltype))
                    known.add(col.lower())
        shape.old_columns.update(c.lower() for c in split(r["oc"]))
        if r["c"] == "UPDATE":
            shape.update_sets.append({c.lower() for c in split(r["nc"])})
    return out


def _entries(col: Any) -> tuple[Any, Any, np.ndarray]:
    """A map column's keys and values (every row's entries, in row order) and per row the
    offset of its first entry in them (``n + 1`` offsets)."""
    import numpy as np
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    offsets = arr.offsets.to_numpy().astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    # a map's keys and items are its whole child arrays, whatever slice it is
    return arr.keys.slice(lo, hi - lo), arr.items.slice(lo, hi - lo), offsets - lo


class _Values:
    """One value map column (``new_values`` or ``old_values``), looked up by column."""

    def __init__(self, col: Any):
        import numpy as np

        self.keys, self.values, offsets = _entries(col)
        self.n = len(offsets) - 1
        self.parents = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(offsets))

    def find(self, column: str) -> np.ndarray:
        """Per row, the entry index of the column's value (-1: the map does not carry it)."""
        import numpy as np
        import pyarrow.compute as pc

        hit = pc.equal(self.keys, lcr_key(column))
        idx = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
        rows = self.parents[idx]
        if len(np.unique(rows)) != len(rows):
            raise af.Unproven(f"a value map carries {column!r} twice")
        out = np.full(self.n, -1, dtype=np.int64)
        out[rows] = idx
        return out

    def typed(self, where: np.ndarray, field: str) -> pa.Array:
        """The values at ``where`` (entry indices; -1 gives NULL), one struct field."""
        import pyarrow as pa
        import pyarrow.compute as pc

        picked = self.values.take(pa.array(where, mask=where < 0))
        return pc.struct_field(picked, [field])

    def whole(self, where: np.ndarray) -> pa.Array:
        import pyarrow as pa

        return self.values.take(pa.array(where, mask=where < 0))


def same(a: pa.Array, b: pa.Array) -> pa.Array:
    """NULL-safe equality (``<=>``), NaN equal to NaN as in Spark."""
    import pyarrow as pa
    import pyarrow.compute as pc

    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    eq = pc.fill_null(pc.equal(a, b), False)
    if pa.types.is_floating(a.type):
        eq = pc.or_(eq, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    return pc.or_(both_null, eq)


def effects(changes: pa.Table, table: TargetTable, compare: list[str], *,
            partial: bool) -> pa.Table:
    """:func:`.images.effects` over Arrow, for LCRs whose UPDATEs keep their key.

    Raises:
        NotHere: an UPDATE moves its key (its two effects are the Spark path's).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = changes.num_rows
    new, old = _Values(changes.column("new_values")), _Values(changes.column("old_values"))
    cmd = changes.column("command_type").combine_chunks()
    is_i = pc.equal(cmd, "INSERT").to_numpy(zero_copy_only=False)
    is_u = pc.equal(cmd, "UPDATE").to_numpy(zero_copy_only=False)
    is_d = pc.equal(cmd, "DELETE").to_numpy(zero_copy_only=False)
    types = dict(table.columns)
    where_new = {c: new.find(c) for c in table.column_names}
    where_old = {c: old.find(c) for c in {*table.key_columns, *compare}}
    for k in table.key_columns:
        o, nw = where_old[k], where_new[k]
        both = is_u & (o >= 0) & (nw >= 0)
        if both.any():
            ov, nv = old.whole(o), new.whole(nw)
            equal = pa.array([True] * n)
            for i in range(ov.type.num_fields):
                f = ov.type.field(i).name
                equal = pc.and_(equal, same(pc.struct_field(ov, [f]), pc.struct_field(nv, [f])))
            o_there = pc.is_valid(ov).to_numpy(zero_copy_only=False)
            n_there = pc.is_valid(nv).to_numpy(zero_copy_only=False)
            moved = both & o_there & n_there & ~equal.to_numpy(zero_copy_only=False)
            if moved.any():
                raise af.Unproven("an UPDATE moves its key")
    cols: dict[str, Any] = {}
    for k in table.key_columns:
        field = lcr.LOGICAL_TYPES[types[k]].field
        # INSERT: the new value; DELETE: the old one; UPDATE: the old one if carried.
        use_old = is_d | (is_u & (where_old[k] >= 0))
        where = np.where(use_old, -1, where_new[k])
        from_new = new.typed(where, field)
        from_old = old.typed(np.where(use_old, where_old[k], -1), field)
        cols[k] = pc.if_else(pa.array(use_old), from_old, from_new)
    for c, t in table.columns:
        if c in table.key_columns:
            continue
        cols[c] = new.typed(np.where(is_d, -1, where_new[c]), lcr.LOGICAL_TYPES[t].field)
    kind = np.where(is_i, "I", np.where(is_u, "U", "D"))
    cols["_e_kind"] = pa.array(kind, pa.string())
    cols["_e_src"] = changes.column("source_database_name")
    cols["_e_scn"] = changes.column("commit_scn")
    cols["_e_txn"] = changes.column("transaction_id")
    cols["_e_pos"] = changes.column("position")
    cols["_e_sub"] = pa.array(np.zeros(n, dtype=np.int32))
    cols["_e_msg"] = changes.column("msg_id")
    cols["_e_absent"] = _absent(table, where_new, where_old, is_u, partial, n)
    for c in compare:
        cols[f"_o_{c}"] = old.typed(where_old[c], lcr.LOGICAL_TYPES[types[c]].field)
        cols[f"_h_{c}"] = pa.array(where_old[c] >= 0)
    return pa.table(cols)


def _absent(table: TargetTable, where_new: dict[str, np.ndarray],
            where_old: dict[str, np.ndarray], is_u: np.ndarray, partial: bool,
            n: int) -> pa.Array:
    """Per UPDATE effect, the data columns its new values lack (NULL: none or not U)."""
    import pyarrow as pa

    data = [c for c, _ in table.columns if c not in table.key_columns]
    if not partial or not data:
        return pa.nulls(n, pa.list_(pa.string()))
    lacking: list[list[str]] = [[] for _ in range(n)]
    for c in data:
        for i in (is_u & (where_new[c] < 0)).nonzero()[0].tolist():
            lacking[i].append(c)
    return pa.array([x or None for x in lacking], pa.list_(pa.string()))


def distinct_keys(eff: pa.Table, key_columns: list[str]) -> pa.Table:
    return eff.select(key_columns).group_by(key_columns, use_threads=False).aggregate([])
