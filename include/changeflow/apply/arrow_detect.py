"""Conflict detection of a Parquet apply pass over Arrow, on the driver (:mod:`.driver_pass`).

:func:`detect` is :func:`.conflicts.detect` over the effects of one table joined with the
current rows of their keys and sorted by key and run order: per effect, whether it is a
replay or superseded change (``skip``) or a uniqueness, delete or update conflict.
:func:`settle` is :meth:`.tables.TablePlan.conflicts`: keys in trouble are folded one by
one by :func:`.conflicts.fold` with the conflict handlers, exactly as in the Spark pass;
every other key's effects take the fast path as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from changeflow.apply import arrow_files as af
from changeflow.apply.arrow_effects import of_txns, same
from changeflow.apply.images import ORDER
from changeflow.apply.positions import TxnId

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from changeflow.apply.tables import TablePlan


class _Found:
    """:func:`.conflicts.detect`'s output over Arrow: the effects joined with their keys'
    current rows, sorted by key and run order, with per row whether it is its key's
    first, a replay or superseded change (``skip``) or a conflict."""

    def __init__(self, df: pa.Table, first: np.ndarray, skip: np.ndarray,
                 conflict: np.ndarray):
        self.df, self.first, self.skip, self.conflict = df, first, skip, conflict


def detect(eff: pa.Table, current: pa.Table | None, plan: TablePlan) -> _Found | None:
    """:func:`.conflicts.detect` over Arrow (None: nothing to detect)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t, compare, detect = plan.table, plan.compare, plan.detect
    if (current is None and not detect) or eff.num_rows == 0:
        return None
    keys = t.key_columns
    if current is not None:
        # Arrow joins carry no list columns: join the keys and a row number, then align
        index = pa.array(np.arange(eff.num_rows, dtype=np.int64))
        left = pa.table({**{k: eff.column(k) for k in keys}, "_cf_i": index})
        got = left.join(current, keys, join_type="left outer", use_threads=False,
                        coalesce_keys=True)
        if got.num_rows != eff.num_rows:
            raise af.Unproven("the current rows of a key are not one")
        got = got.take(pc.sort_indices(got.column("_cf_i")))
        df = eff
        for name in current.column_names:
            if name not in keys:
                df = df.append_column(name, got.column(name))
    else:
        df = eff.append_column("_c_exists", pa.nulls(eff.num_rows, pa.bool_())) \
            .append_column("_c_src", pa.nulls(eff.num_rows, pa.string())) \
            .append_column("_c_scn", pa.nulls(eff.num_rows, pa.int64())) \
            .append_column("_c_pos", pa.nulls(eff.num_rows, pa.int64()))
        for c in compare:
            df = df.append_column(f"_c_{c}", pa.nulls(eff.num_rows, eff.column(c).type))
    # Spark's window order: ascending, NULLs first
    order = pc.sort_indices(df, sort_keys=[*[(k, "ascending", "at_start") for k in keys],
                                           *[(c, "ascending", "at_start") for c in ORDER]])
    df = df.take(order).combine_chunks()
    n = df.num_rows
    first = firsts(df, keys)

    def arr(name: str) -> Any:
        return df.column(name).combine_chunks()

    def flag(x: Any) -> np.ndarray:
        return pc.fill_null(x, False).to_numpy(zero_copy_only=False)

    c_scn = arr("_c_scn")
    found = pc.is_valid(c_scn).to_numpy(zero_copy_only=False)
    same_src = found & flag(pc.equal(arr("_c_src"), arr("_e_src")))
    scn_eq, scn_gt = flag(pc.equal(c_scn, arr("_e_scn"))), flag(pc.greater(c_scn,
                                                                             arr("_e_scn")))
    pos_eq = flag(pc.equal(arr("_c_pos"), arr("_e_pos")))
    pos_gt = flag(pc.greater(arr("_c_pos"), arr("_e_pos")))
    skip = first & same_src & ((scn_eq & pos_eq) | scn_gt | (scn_eq & pos_gt))
    conflict = np.zeros(n, dtype=bool)
    if detect:
        kind = np.asarray(arr("_e_kind").to_pylist(), dtype=object)
        prev_kind = np.empty(n, dtype=object)
        prev_kind[1:] = kind[:-1]
        exists = np.where(first, flag(arr("_c_exists")), prev_kind != "D")
        is_i = kind == "I"
        differs = np.zeros(n, dtype=bool)
        absent = arr("_e_absent")
        for c in compare:
            col = arr(c)
            prev = pa.concat_arrays([pa.nulls(1, col.type), col.slice(0, n - 1)])
            prior = pc.if_else(pa.array(first), arr(f"_c_{c}"), prev)
            prev_absent = np.zeros(n, dtype=bool)
            if absent.null_count < n:
                lacks = flag(contains(absent, c))
                prev_absent[1:] = lacks[:-1]
            known = first | ((prev_kind != "D") & ~prev_absent)
            had = arr(f"_h_{c}").to_numpy(zero_copy_only=False)
            differs |= had & known & ~same(arr(f"_o_{c}"), prior).to_numpy(
                zero_copy_only=False)
        conflict = (is_i & exists) | (~is_i & ~exists) | (~is_i & differs)
    return _Found(df, first, skip, conflict)


def settle(effects: pa.Table, current: pa.Table | None, plan: TablePlan,
           failed: set[TxnId], times: dict[TxnId, Any]
           ) -> tuple[pa.Table, pa.Table | None, dict[TxnId, Any]]:
    """:meth:`.tables.TablePlan.conflicts` over Arrow: detect without the failed
    transactions' effects, fold the keys in trouble exactly (:func:`.conflicts.fold`,
    with the handlers), and keep every other key's effects as they are. Sets the plan's
    ``folded``, ``resolved`` and ``skipped``.

    Returns:
        The fast path's effects, the fold's (None: none), and the transactions that fail
        on this table (unresolved conflicts).
    """
    import numpy as np
    import pyarrow as pa

    from changeflow.apply import conflicts

    eff = without(effects, failed)
    plan.folded, plan.resolved, plan.skipped = [], 0, 0
    found = detect(eff, current, plan)
    if found is None:
        return eff, None, {}
    group = np.cumsum(found.first) - 1
    groups = int(group[-1]) + 1
    size = np.bincount(group, minlength=groups)
    bad = np.bincount(group, weights=found.conflict | (found.skip & (size[group] > 1)),
                      minlength=groups)[group] > 0
    troubled = bad | (np.bincount(group, weights=found.skip, minlength=groups)[group] > 0)
    if not troubled.any():
        return eff, None, {}
    rows = found.df.filter(pa.array(bad)).to_pylist()
    out = conflicts.fold(rows, plan.table, plan.compare, plan.handlers, times)
    fast = found.df.filter(pa.array(~troubled)).select(eff.column_names)
    folded = pa.Table.from_pylist([{c: r.get(c) for c in eff.column_names}
                                   for r in out.effects], schema=eff.schema) \
        if out.effects else None
    plan.folded, plan.resolved = out.effects, out.resolved
    plan.skipped = out.skipped + int((found.skip & ~bad).sum())
    return fast, folded, out.failed


def without(eff: pa.Table, txns: set[TxnId]) -> pa.Table:
    """Effects without those of the given transactions."""
    import pyarrow.compute as pc

    if not txns or eff.num_rows == 0:
        return eff
    return eff.filter(pc.invert(of_txns(eff, txns, ("_e_src", "_e_scn", "_e_txn"))))


def firsts(ranked: pa.Table, keys: list[str]) -> np.ndarray:
    """Per row of a table sorted by key, whether it is its key's first (NULL = NULL)."""
    import numpy as np

    n = ranked.num_rows
    first = np.ones(n, dtype=bool)
    if n > 1:
        equal = np.ones(n - 1, dtype=bool)
        for k in keys:
            col = ranked.column(k)
            equal &= same(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        first[1:] = ~equal
    return first


def contains(lists: pa.Array, value: str) -> pa.Array:
    """Per list, whether it holds ``value`` (NULL for a NULL list)."""
    import pyarrow as pa

    return pa.array([None if x is None else value in x for x in lists.to_pylist()])
