"""The facts of :mod:`changeflow.quality.facts`, computed over an in-memory Arrow batch.

A stage that builds its batch in Arrow (the PostgreSQL capture) has every message in
memory when it writes the batch; reading the Parquet files back into Spark only to
derive a per-transaction rollup costs it far more than building the batch did. This
module derives the same rollup with ``pyarrow.compute`` (message facts, then a group-by
per source transaction) and pandas (the per-source windows), so that GX can validate
the ``lcr_batch`` suite on it with its pandas engine.

The rollup has the columns :func:`facts.batch_facts` gives the suite, with the same
meaning. Two deliberate differences, both on the strict side: message ids are counted
exactly (not by 64-bit hash), and an UPDATE whose key list holds a NULL name counts as
missing its key. A batch that fails here is checked again by the Spark path
(:func:`changeflow.quality.batch.check_arrow_batch`), which reports it, with samples,
exactly as it reports any other batch; so the Arrow path only decides that a clean
batch is clean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.quality.facts import ALWAYS_REQUIRED, COMMIT_TIME_SKEW_US, MESSAGE_CHECKS

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

_GROUP = ("source_database_name", "transaction_id")
BITMAP_PAIRS = 1 << 26  # (message, key name) pairs matched with a bitmap up to this many


@dataclass
class ArrowFacts:
    """What the suite validates, and what the stage records, for one batch.

    Attributes:
        rollup: one row per source transaction (pandas), the suite's columns.
        ids: messages with an id, and distinct ids.
        watermarks: per source, the highest commit position seen by the producer.
    """

    rollup: pd.DataFrame
    ids: tuple[int, int]
    watermarks: dict[str, int]


def _valid_all(table: pa.Table, fields: tuple[str, ...]) -> pa.Array:
    import pyarrow.compute as pc

    out = pc.is_valid(table.column(fields[0]))
    for f in fields[1:]:
        out = pc.and_(out, pc.is_valid(table.column(f)))
    return out


def _violation(applies: Any, satisfied: Any) -> Any:
    """1 where a check applies (non-null True) and is not satisfied, else 0."""
    import pyarrow as pa
    import pyarrow.compute as pc

    bad = pc.invert(satisfied)
    if applies is not True:
        bad = pc.and_kleene(pc.fill_null(applies, False), bad)
    return pc.cast(pc.fill_null(bad, False), pa.int64())


def _required(table: pa.Table) -> Any:
    """Whether the fields required for each message's kind are all non-null."""
    import pyarrow.compute as pc

    kind = table.column("kind")
    ok = _valid_all(table, ALWAYS_REQUIRED)
    for k, fields in lcr.REQUIRED_BY_KIND.items():
        is_k = pc.fill_null(pc.equal(kind, k), False)
        ok = pc.and_(ok, pc.or_(pc.invert(is_k), _valid_all(table, fields)))
    return ok


def _map_entries(values: Any) -> tuple[Any, Any]:
    """``(row index, key)`` of every entry of a map column (chunk by chunk, no copy)."""
    import numpy as np
    import pyarrow as pa

    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    rows, keys, base = [], [], 0
    for arr in chunks:
        offsets = arr.offsets.to_numpy()
        keys.append(arr.keys.slice(int(offsets[0]), int(offsets[-1] - offsets[0])))
        rows.append(np.repeat(np.arange(base, base + len(arr), dtype=np.int64),
                              np.diff(offsets)))
        base += len(arr)
    if not chunks:
        return np.zeros(0, np.int64), pa.array([], values.type.key_type)
    return np.concatenate(rows), pa.concat_arrays(keys)


def _has_keys(table: pa.Table, values: str) -> Any:
    """Per message: key columns named, non-empty, and every one a key of ``values``.

    Each (message, name) pair is matched as one integer, ``row * n + code`` with
    ``code`` the name's index among the batch's distinct map keys: a name in another
    message's map does not count, nor does a NULL name or one no map has.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = table.column("key_columns").combine_chunks()
    n = len(keys)
    key_rows = pc.list_parent_indices(keys).to_numpy().astype(np.int64)
    key_names = pc.list_flatten(keys).cast(pa.string())
    map_rows, map_keys = _map_entries(table.column(values))
    map_keys = map_keys.cast(pa.string())
    names = pc.unique(map_keys)
    width = max(len(names), 1)
    key_code = pc.index_in(key_names, value_set=names)  # NULL: a name no map has
    map_code = pc.index_in(map_keys, value_set=names).to_numpy().astype(np.int64)
    pairs = map_rows * width + map_code
    wanted = key_rows * width + pc.fill_null(key_code, 0).to_numpy().astype(np.int64)
    if n * width <= BITMAP_PAIRS:  # a bitmap of every (row, name) pair
        present = np.zeros(n * width, bool)
        present[pairs] = True
        found = present[wanted] if len(wanted) else np.zeros(0, bool)
    else:
        found = np.isin(wanted, pairs)
    found &= key_code.is_valid().to_numpy(zero_copy_only=False)
    missing = np.bincount(key_rows, weights=~found, minlength=n) if n else np.zeros(0)
    ok = pc.and_(pc.fill_null(pc.greater(pc.list_value_length(keys), 0), False),
                 pc.is_valid(table.column(values)))
    return pc.and_(ok, pa.array(missing == 0))


def _in(values: Any, allowed: tuple[str, ...]) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.is_in(values, value_set=pa.array(list(allowed), pa.string()))


def message_violations(table: pa.Table) -> dict[str, Any]:
    """Per message check of :data:`facts.MESSAGE_CHECKS`: 1 where the message violates it."""
    import pyarrow.compute as pc

    kind, cmd = table.column("kind"), table.column("command_type")
    row = pc.fill_null(pc.equal(kind, "ROW"), False)
    old_ok, new_ok = pc.is_valid(table.column("old_values")), pc.is_valid(
        table.column("new_values"))

    def row_cmd(c: str) -> Any:
        return pc.and_(row, pc.fill_null(pc.equal(cmd, c), False))

    is_update = row_cmd("UPDATE")
    update_ok = (pc.and_(_has_keys(table, "old_values"), _has_keys(table, "new_values"))
                 if pc.any(is_update).as_py() else is_update)
    user = pc.fill_null(pc.equal(kind, "USER"), False)
    out = {
        "required_fields": _violation(True, _required(table)),
        "kind_allowed": _violation(pc.is_valid(kind), _in(kind, lcr.KINDS)),
        "origin_allowed": _violation(pc.is_valid(table.column("origin")),
                                     _in(table.column("origin"), lcr.ORIGINS)),
        "command_type_allowed": pc.add(
            _violation(pc.and_(row, pc.is_valid(cmd)), _in(cmd, lcr.DML_COMMANDS)),
            _violation(user, pc.is_null(cmd))),
        "insert_no_old_values": _violation(row_cmd("INSERT"),
                                           pc.and_(pc.invert(old_ok), new_ok)),
        "delete_no_new_values": _violation(row_cmd("DELETE"),
                                           pc.and_(pc.invert(new_ok), old_ok)),
        "update_has_key": _violation(is_update, update_ok),
    }
    assert tuple(out) == MESSAGE_CHECKS
    return out


def _rollup(table: pa.Table) -> pd.DataFrame:
    """Per (source, transaction): counts, commit position/time ranges, violation sums."""
    import pyarrow as pa

    cols = {c: table.column(c) for c in (*_GROUP, "commit_scn", "commit_time")}
    cols.update({f"{c}_violations": v for c, v in message_violations(table).items()})
    facts = pa.table(cols)
    aggs = [([], "count_all"), ("commit_scn", "min"), ("commit_scn", "max"),
            ("commit_time", "min"), ("commit_time", "max"),
            *[(f"{c}_violations", "sum") for c in MESSAGE_CHECKS]]
    grouped = facts.group_by(list(_GROUP), use_threads=False).aggregate(aggs)
    names = {"count_all": "n", "commit_scn_min": "min_scn", "commit_scn_max": "max_scn",
             "commit_time_min": "min_time", "commit_time_max": "max_time"}
    grouped = grouped.rename_columns([names.get(c, c.removesuffix("_sum"))
                                      for c in grouped.column_names])
    import pandas as pd

    return grouped.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def _when(cond: Any, value: Any) -> Any:
    """``value`` where ``cond``, else None (object dtype, as the suite reads booleans)."""
    return value.astype(object).where(cond.to_numpy(dtype=bool, na_value=False), None)


def _prev_scn(df: pd.DataFrame, known: pd.Series) -> pd.Series:
    """Per transaction, the highest commit position of its source's transactions
    committed at least :data:`facts.COMMIT_TIME_SKEW_US` before it (``df`` sorted by
    source and time; NULL where there is none, or the time is unknown)."""
    import numpy as np
    import pandas as pd

    none = np.iinfo(np.int64).min
    timed = (known & df["min_time"].notna()).to_numpy(dtype=bool)
    scn = df["max_scn"].to_numpy(dtype="int64", na_value=none)
    micros = np.zeros(len(df), dtype="int64")
    if timed.any():
        micros[timed] = pd.DatetimeIndex(df["min_time"][timed]).as_unit("us").asi8
    out = np.full(len(df), none, dtype="int64")
    for rows in df.groupby("source_database_name", dropna=False, sort=False).indices.values():
        rows = rows[timed[rows]]  # in time order: ``df`` is sorted
        if not len(rows):
            continue
        best = np.maximum.accumulate(scn[rows])
        upto = np.searchsorted(micros[rows], micros[rows] - COMMIT_TIME_SKEW_US, "right") - 1
        out[rows] = np.where(upto >= 0, best[np.maximum(upto, 0)], none)
    return pd.Series(pd.arrays.IntegerArray(out, out == none), index=df.index)


def transaction_checks(df: pd.DataFrame, prior: dict[str, int]) -> pd.DataFrame:
    """Add ``prev_scn``, ``prior_scn`` and the :data:`facts.TRANSACTION_CHECKS` columns."""
    import pandas as pd

    src = df["source_database_name"]
    known = df["transaction_id"].notna() & src.notna()
    df = df.assign(_known=known).sort_values(
        ["source_database_name", "min_time", "min_scn"], na_position="first", kind="stable")
    known = df["_known"]
    prev = _prev_scn(df, known)
    prior_scn = df["source_database_name"].map(lambda s: prior.get(s) if prior else None)
    prior_scn = pd.array(prior_scn.tolist(), dtype="Int64")
    scn_known = known & df["min_scn"].notna()
    same = known.astype(int).groupby([df["source_database_name"], df["min_scn"]],
                                     dropna=False).transform("sum")
    return df.drop(columns="_known").assign(
        prev_scn=prev, prior_scn=prior_scn,
        single_commit_scn=_when(scn_known, df["min_scn"] == df["max_scn"]),
        single_commit_time=_when(known & df["min_time"].notna(),
                                 df["min_time"] == df["max_time"]),
        commit_scn_one_transaction=_when(scn_known, same == 1),
        commit_order_in_batch=_when(scn_known & prev.notna(), df["min_scn"] >= prev),
        commit_order_across_batches=_when(scn_known & pd.Series(prior_scn).notna().to_numpy(),
                                          df["min_scn"] >= pd.Series(prior_scn, index=df.index)),
    )


def batch_facts(table: pa.Table, prior: dict[str, int] | None = None) -> ArrowFacts:
    """The suite's rollup of an Arrow LCR batch, its id counts and its watermarks.

    Args:
        table: the batch (following :func:`lcr.arrow_schema`).
        prior: per source database, the highest commit position the same producer
            committed to the same queue before this batch.
    """
    import pyarrow.compute as pc

    prior = prior or {}
    ids = (int(pc.count(table.column("msg_id")).as_py()),
           int(pc.count_distinct(table.column("msg_id")).as_py()))
    df = transaction_checks(_rollup(table), prior)
    df = df.assign(messages_with_id=ids[0], distinct_ids=ids[1], messages_read=None,
                   messages_accounted=None)
    return ArrowFacts(df.reset_index(drop=True), ids, watermarks(df, prior, "transaction_id"))


def watermarks(rollup: pd.DataFrame, prior: dict[str, int], key: str) -> dict[str, int]:
    """Per source, the highest commit position this producer has put in the queue: the
    ``prior`` ones raised by the rollup's transactions (rows with ``key`` and
    ``max_scn``)."""
    marks = dict(prior)
    known = rollup[rollup[key].notna() & rollup["max_scn"].notna()]
    for src, scn in known.groupby("source_database_name")["max_scn"].max().items():
        marks[str(src)] = max(int(scn), marks.get(str(src), 0))
    return marks
