"""Conflict detection and resolution for Parquet targets (SPEC §7).

For each target table, the apply looks up the current rows of the keys its effects
touch (:func:`changeflow.apply.tables.lookup_current`: the key, provenance and compared
columns of the Iceberg table at the snapshot the pass read, semi-joined with the keys: a
scan of a few columns, never a rewrite) and checks every effect, in run order:

* an ``I`` on an existing key is a **uniqueness** conflict;
* a ``U`` or ``D`` on a missing key is a **delete** conflict (row missing);
* a ``U`` or ``D`` whose old value of a compared column differs from the row's is an
  **update** conflict;
* an effect whose key has a NULL column cannot be applied (``null_key``): its
  transaction fails (a target row needs its whole key).

An effect whose key's current image comes from the same LCR is a *replay* and one
whose image comes from a later commit of the same source is *superseded*: both are
dropped quietly (a source's own commit order always wins; different sources are
applied in arrival order and meet the conflict handlers).

Detection is vectorised (:func:`detect`). Keys without conflicts take the fast path:
their effects become images as they are. Keys with a conflict go to :func:`fold`,
which replays their effects one by one in Python on the driver (conflicts are few)
and resolves each conflict with the prebuilt handlers; an unresolved one fails its
transaction, which then goes to the error queue whole.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select

from changeflow.apply.config import ConflictHandlerSpec
from changeflow.apply.errorq import FailedTxn
from changeflow.apply.images import ORDER
from changeflow.apply.positions import TxnId
from changeflow.errors import ConfigError
from changeflow.state import StateStore, utcnow
from changeflow.state.schema_apply import conflict_handlers
from changeflow.targets.catalog import TargetTable

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

H = conflict_handlers


# -- handler declarations ---------------------------------------------------------------
def stored_handlers(store: StateStore, apply: str) -> list[ConflictHandlerSpec]:
    """Conflict handlers set from the CLI or Python (kept in the state store)."""
    with store.read() as conn:
        rows = conn.execute(select(H).where(H.c.apply == apply)).mappings().all()
    return [ConflictHandlerSpec(
        table=r["table_name"], conflict=r["conflict"],
        columns=[] if r["columns_key"] == "*" else r["columns_key"].split(","),
        method=r["method"], resolution_column=r["resolution_column"]) for r in rows]


def effective_handlers(store: StateStore, apply: str,
                       configured: Iterable[ConflictHandlerSpec]) -> list[ConflictHandlerSpec]:
    """The configuration's handlers, overridden by stored ones for the same column group."""
    stored = stored_handlers(store, apply)
    keys = {(h.table, h.conflict, h.columns_key) for h in stored}
    return [h for h in configured if (h.table, h.conflict, h.columns_key) not in keys] + stored


def set_handler(store: StateStore, apply: str, handler: ConflictHandlerSpec,
                table_columns: list[str] | None) -> None:
    """Store a conflict handler (SET_UPDATE_CONFLICT_HANDLER).

    Args:
        table_columns: the target table's columns when it exists: every column the
            handler names must be one of them.

    Raises:
        ConfigError: a column is not a column of the table.
    """
    check_columns(handler, table_columns)
    with store.begin() as conn:
        conn.execute(delete(H).where(
            H.c.apply == apply, H.c.table_name == handler.table,
            H.c.conflict == handler.conflict, H.c.columns_key == handler.columns_key))
        conn.execute(H.insert().values(
            apply=apply, table_name=handler.table, conflict=handler.conflict,
            columns_key=handler.columns_key, method=handler.method,
            resolution_column=handler.resolution_column, created_at=utcnow()))


def remove_handler(store: StateStore, apply: str, table: str, conflict: str,
                   columns: list[str]) -> int:
    """Remove a stored conflict handler. Returns how many were removed."""
    key = ",".join(sorted({c.lower() for c in columns})) or "*"
    with store.begin() as conn:
        return conn.execute(delete(H).where(
            H.c.apply == apply, H.c.table_name == table.lower(), H.c.conflict == conflict,
            H.c.columns_key == key)).rowcount or 0


def check_columns(handler: ConflictHandlerSpec, table_columns: list[str] | None) -> None:
    """Refuse a handler naming a column the table does not have.

    Raises:
        ConfigError: naming the handler, the column and the table's columns.
    """
    if table_columns is None:
        return
    have = {c.lower() for c in table_columns}
    named = list(handler.columns) + ([handler.resolution_column]
                                     if handler.resolution_column else [])
    for c in named:
        if c not in have:
            raise ConfigError(
                f"conflict handler {handler.method} for {handler.table}: column {c!r} is not "
                f"a column of the table (it has {', '.join(sorted(have))})")


# -- detection ---------------------------------------------------------------------------
def detect(eff: DataFrame, current: DataFrame | None, table: TargetTable,
           compare: list[str], *, detect_conflicts: bool, single: bool = False) -> DataFrame:
    """Effects with ``_x_skip`` (replay or superseded), ``_x_conflict`` (uniqueness,
    delete, update or NULL) and ``_x_bad`` (the key needs the exact fold).

    With ``single`` (every key has one effect), each effect is its key's first: the
    same checks without the windows over the key's effects (no sort of the effects).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = table.key_columns
    null_key = _null_key(keys)
    if current is None and not detect_conflicts:
        return eff.withColumn("_x_skip", F.lit(False)).withColumn(
            "_x_conflict", F.when(null_key, "null_key")).withColumn("_x_bad", null_key)
    if current is None:  # a new table, or no file in the touched buckets: no row exists
        nothing = F.lit(None)
        df = eff.select("*", nothing.cast("boolean").alias("_c_exists"),
                        nothing.cast("string").alias("_c_src"),
                        nothing.cast("bigint").alias("_c_scn"),
                        nothing.cast("bigint").alias("_c_pos"),
                        *[F.when(F.lit(False), F.col(c)).alias(f"_c_{c}") for c in compare])
    else:
        df = eff.join(current, keys, "left")
    w = Window.partitionBy(*keys).orderBy(*[F.col(c) for c in ORDER])
    first = F.lit(True) if single else F.row_number().over(w) == 1
    kind = F.col("_e_kind")
    prev_kind = F.lit(None).cast("string") if single else F.lag(kind).over(w)
    found = F.col("_c_scn").isNotNull()
    same_src = found & (F.col("_c_src") == F.col("_e_src"))
    replay = first & same_src & (F.col("_c_scn") == F.col("_e_scn")) & (
        F.col("_c_pos") == F.col("_e_pos"))
    superseded = first & same_src & ((F.col("_c_scn") > F.col("_e_scn")) | (
        (F.col("_c_scn") == F.col("_e_scn")) & (F.col("_c_pos") > F.col("_e_pos"))))
    exists = F.when(first, F.coalesce(F.col("_c_exists"), F.lit(False))).otherwise(
        prev_kind != "D")
    conflict = F.lit(None).cast("string")
    if detect_conflicts:
        differs = F.lit(False)
        for c in compare:
            if single:
                prior, known = F.col(f"_c_{c}"), F.lit(True)
            else:
                prior = F.when(first, F.col(f"_c_{c}")).otherwise(F.lag(F.col(c)).over(w))
                known = first | ((prev_kind != "D") & ~F.coalesce(
                    F.array_contains(F.lag("_e_absent").over(w), c), F.lit(False)))
            differs = differs | (F.col(f"_h_{c}") & known & ~F.col(f"_o_{c}").eqNullSafe(prior))
        conflict = (F.when(null_key, "null_key")
                    .when((kind == "I") & exists, "uniqueness")
                    .when((kind != "I") & ~exists, "delete")
                    .when((kind != "I") & differs, "update"))
    else:
        conflict = F.when(null_key, "null_key")
    skip = replay | superseded
    df = df.withColumn("_x_skip", skip).withColumn("_x_conflict", conflict)
    if single:  # the key's only effect: bad when it conflicts
        return df.withColumn("_x_bad", F.col("_x_conflict").isNotNull())
    by_key = Window.partitionBy(*keys)
    n = F.count(F.lit(1)).over(by_key)
    trouble = F.max((F.col("_x_conflict").isNotNull() | (F.col("_x_skip") & (n > 1)))
                    .cast("int")).over(by_key) > 0
    return df.withColumn("_x_bad", trouble)


def _null_key(keys: list[str]) -> Column:
    """Whether an effect's key has a NULL column."""
    from pyspark.sql import functions as F

    out = F.lit(False)
    for k in keys:
        out = out | F.col(k).isNull()
    return out


def troubled_keys(eff: DataFrame, current: DataFrame | None, table: TargetTable,
                  compare: list[str], *, detect_conflicts: bool,
                  single: bool = False) -> DataFrame:
    """The distinct keys whose effects do not all take the fast path.

    :func:`detect` over only the columns it reads (keys, run order, kind, absent
    columns, compared columns with their old values), so the join and the sort carry
    narrow rows. A key is troubled when one of its effects is ``_x_bad`` (then all are)
    or ``_x_skip`` (the key's only effect, else it would be bad): the fast path is the
    effects of every other key, whole (:func:`by_keys`).
    """
    from pyspark.sql import functions as F

    olds = [x for c in compare for x in (c, f"_o_{c}", f"_h_{c}")]
    cols = dict.fromkeys([*table.key_columns, *ORDER, "_e_kind", "_e_absent", *olds])
    det = detect(eff.select(*cols), current, table, compare, detect_conflicts=detect_conflicts,
                 single=single)
    return det.where(F.col("_x_bad") | F.col("_x_skip")).select(*table.key_columns).distinct()


def by_keys(df: DataFrame, keys: DataFrame, key_columns: list[str], how: str) -> DataFrame:
    """``df``'s rows whose key is (``left_semi``) or is not (``left_anti``) in the small
    frame ``keys``; a NULL key matches a NULL key, as in :func:`detect`'s windows."""
    from pyspark.sql import functions as F

    k = keys.toDF(*[f"_k_{c}" for c in key_columns])
    on = [df[c].eqNullSafe(k[f"_k_{c}"]) for c in key_columns]
    return df.join(F.broadcast(k), on, how)


# -- the exact fold ----------------------------------------------------------------------
@dataclass
class Folded:
    """What :func:`fold` produced: effects to write, failed transactions, counts."""

    effects: list[dict[str, Any]] = field(default_factory=list)
    failed: dict[TxnId, FailedTxn] = field(default_factory=dict)
    resolved: int = 0
    skipped: int = 0


def _txn(e: dict[str, Any]) -> TxnId:
    return TxnId(e["_e_src"], int(e["_e_scn"]), e["_e_txn"])


def _wins(method: str, new: Any, cur: Any) -> bool:
    """Whether the LCR's value wins (MAXIMUM/MINIMUM; a NULL current value loses)."""
    if cur is None:
        return True
    if new is None:
        return False
    return bool(new > cur) if method == "MAXIMUM" else bool(new < cur)


def fold(rows: list[dict[str, Any]], table: TargetTable, compare: list[str],
         handlers: list[ConflictHandlerSpec], commit_times: dict[TxnId, Any]) -> Folded:
    """Replay the effects of conflicting keys one by one, resolving conflicts.

    Args:
        rows: :func:`detect` output rows of the keys with ``_x_bad``, any order.
        commit_times: commit time per transaction (for the error queue).
    """
    out = Folded()
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(tuple(r[k] for k in table.key_columns), []).append(r)
    for effects in by_key.values():
        effects.sort(key=lambda e: tuple(e[c] for c in ORDER))
        _fold_key(effects, table, compare, handlers, commit_times, out)
    return out


def _fold_key(effects: list[dict[str, Any]], table: TargetTable, compare: list[str],
              handlers: list[ConflictHandlerSpec], commit_times: dict[TxnId, Any],
              out: Folded) -> None:
    first = effects[0]
    state: dict[str, Any] = {"exists": bool(first.get("_c_exists")), "src": first.get("_c_src"),
             "scn": first.get("_c_scn"), "pos": first.get("_c_pos"),
             "values": {c: first.get(f"_c_{c}") for c in _known(table, compare, handlers)},
             "found": first.get("_c_scn") is not None}
    for e in effects:
        if state["found"] and state["src"] == e["_e_src"] and (
                (state["scn"], state["pos"]) >= (e["_e_scn"], e["_e_pos"])):
            out.skipped += 1  # a replay, or superseded by a later commit of its source
            continue
        result = _one(e, state, table, compare, handlers)
        if isinstance(result, str):
            txn = _txn(e)
            out.failed.setdefault(txn, FailedTxn(
                txn_key=txn.key, error_kind="conflict", error_message=result,
                source_database=txn.source, transaction_id=txn.txn, commit_scn=txn.scn,
                commit_time=commit_times.get(txn), failing_msg_id=e["_e_msg"],
                failing_position=e["_e_pos"], tables=[table.name]))
            continue
        if result is None:
            out.skipped += 1
            continue
        image, resolved = result
        out.resolved += int(resolved)
        out.effects.append(image)
        state.update(exists=image["_e_kind"] != "D", src=e["_e_src"], scn=e["_e_scn"],
                     pos=e["_e_pos"], found=True)
        absent = set(image.get("_e_absent") or [])
        for c in state["values"]:
            if image["_e_kind"] == "D":
                state["values"][c] = None
            elif c not in absent:
                state["values"][c] = image.get(c)


def _known(table: TargetTable, compare: list[str],
           handlers: list[ConflictHandlerSpec]) -> list[str]:
    cols = set(compare) | {h.resolution_column for h in handlers if h.resolution_column}
    return [c for c in table.column_names if c in cols and c not in table.key_columns]


def _find(handlers: list[ConflictHandlerSpec], conflict: str) -> ConflictHandlerSpec | None:
    return next((h for h in handlers if h.conflict == conflict), None)


def _key_text(table: TargetTable, e: dict[str, Any]) -> str:
    return ", ".join(f"{k}={e[k]!r}" for k in table.key_columns)


def _one(e: dict[str, Any], state: dict[str, Any], table: TargetTable, compare: list[str],
         handlers: list[ConflictHandlerSpec]) -> tuple[dict[str, Any], bool] | str | None:
    """One effect against the key's state: (image, resolved?), None to skip, or an error."""
    kind = e["_e_kind"]
    where = f"{table.name} key ({_key_text(table, e)}), LCR {e['_e_msg']} at position {e['_e_pos']}"
    nulls = [k for k in table.key_columns if e.get(k) is None]
    if nulls:
        return (f"key column {nulls[0]!r} is NULL: {where} cannot be applied (a target row "
                "needs its whole key)")
    if kind == "I":
        if not state["exists"]:
            return dict(e), False
        h = _find(handlers, "uniqueness")
        if h is None:
            return (f"uniqueness conflict: INSERT into {where}, but the key exists in the "
                    "target; no uniqueness conflict handler for the table")
        if h.method == "OVERWRITE" or (h.method in ("MAXIMUM", "MINIMUM") and _wins(
                h.method, e.get(h.resolution_column or ""),
                state["values"].get(h.resolution_column or ""))):
            return dict(e), True
        return None
    if not state["exists"]:
        h = _find(handlers, "delete")
        what = "UPDATE" if kind == "U" else "DELETE"
        if h is None:
            return (f"delete conflict: {what} of {where}, but the row is missing in the target;"
                    " no delete conflict handler for the table")
        if kind == "U" and h.method == "OVERWRITE":
            return dict(e), True
        return None
    conflicting = [c for c in compare if e.get(f"_h_{c}") and c in state["values"]
                   and e.get(f"_o_{c}") != state["values"][c]]
    if not conflicting:
        return dict(e), False
    return _update_conflict(e, state, table, handlers, conflicting, where)


def _update_conflict(e: dict[str, Any], state: dict[str, Any], table: TargetTable,
                     handlers: list[ConflictHandlerSpec], conflicting: list[str],
                     where: str) -> tuple[dict[str, Any], bool] | str | None:
    groups: dict[int, ConflictHandlerSpec] = {}
    data = [c for c in table.column_names if c not in table.key_columns]
    for c in conflicting:
        h = next((h for h in handlers if h.conflict == "update"
                  and (not h.columns or c in h.columns)), None)
        if h is None:
            diffs = "; ".join(
                f"{x}: target {state['values'][x]!r}, LCR old value {e.get(f'_o_{x}')!r}"
                for x in conflicting)
            return (f"update conflict: {'UPDATE' if e['_e_kind'] == 'U' else 'DELETE'} of "
                    f"{where}: the target's values differ from the LCR's old values ({diffs});"
                    f" no update conflict handler covers column {c!r}")
        groups[id(h)] = h
    keep: set[str] = set()
    for h in groups.values():
        members = h.columns or data
        lcr_wins = h.method == "OVERWRITE" or (h.method in ("MAXIMUM", "MINIMUM") and _wins(
            h.method, e.get(h.resolution_column or ""),
            state["values"].get(h.resolution_column or "")))
        if e["_e_kind"] == "D":
            if h.method in ("MAXIMUM", "MINIMUM"):
                return (f"update conflict: DELETE of {where}: {h.method} needs a new value of "
                        f"{h.resolution_column!r}, which a DELETE does not have")
            if not lcr_wins:
                return None
            continue
        if not lcr_wins:
            keep.update(members)
    image = dict(e)
    if keep:
        if set(data) <= keep:
            return None  # every column keeps its current value: nothing to write
        image["_e_absent"] = sorted(set(image.get("_e_absent") or []) | keep)
        image["_e_kind"] = "U"
    return image, True


def commit_time_of(value: Any) -> dt.datetime | None:
    """A commit time as a datetime (Arrow gives one already)."""
    return value if isinstance(value, dt.datetime) else None
