"""From row LCRs to *effects* on keys, and from effects to row images (Spark).

An LCR's effect on a target table is one of:

* ``I``: the key must not exist; the new image is written;
* ``U``: the key must exist (and its current values equal the LCR's old values in
  the compared columns); the new image is written, as a *partial image* when the LCR
  does not carry every column (unchanged columns keep their values);
* ``D``: the key must exist (same comparison); a tombstone is written.

An UPDATE that changes the key has two effects: ``D`` on the old key, then ``I`` on
the new one. Effects keep the run order ``(commit position, source, transaction,
position, sub)``, which is the order the apply applies them in.

Effect columns: the key columns and data columns (typed as the table declares),
``_e_kind``, ``_e_src``, ``_e_scn``, ``_e_txn``, ``_e_pos``, ``_e_sub``, ``_e_msg``,
``_e_absent`` (columns a partial image lacks), and for each compared column ``c``
``_o_c`` (the old value) and ``_h_c`` (whether the LCR carries it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from changeflow import lcr
from changeflow.targets.catalog import TargetTable

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

ORDER = ("_e_scn", "_e_src", "_e_txn", "_e_pos", "_e_sub")
E_META = ("_e_kind", "_e_src", "_e_scn", "_e_txn", "_e_pos", "_e_sub", "_e_msg", "_e_absent")


def lcr_key(column: str) -> str:
    """The LCR map key of a target column (canonical upper case)."""
    return column.upper()


def typed(side: str, column: str, ltype: str) -> Column:
    """One column's value from an LCR value map, typed as the table declares it."""
    from pyspark.sql import functions as F

    t = lcr.LOGICAL_TYPES[ltype]
    return F.col(side).getItem(lcr_key(column)).getField(t.field).cast(t.spark_type)


def carried(side: str, column: str) -> Column:
    """Whether an LCR's value map carries a column (NULL map: no)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.map_contains_key(F.col(side), lcr_key(column)), F.lit(False))


def key_moved(table: TargetTable) -> Column:
    """An UPDATE whose key columns differ between old and new values."""
    from pyspark.sql import functions as F

    moved = F.lit(False)
    for k in table.key_columns:
        o = F.col("old_values").getItem(lcr_key(k))
        n = F.col("new_values").getItem(lcr_key(k))
        moved = moved | (o.isNotNull() & n.isNotNull() & ~o.eqNullSafe(n))
    return (F.col("command_type") == "UPDATE") & moved


def _key(side: str, column: str, ltype: str) -> Column:
    """A key value: from ``side``, or for ``old_or_new`` the old value, else the new one
    (an UPDATE may carry no old values at all)."""
    from pyspark.sql import functions as F

    if side != "old_or_new":
        return typed(side, column, ltype)
    return F.when(carried("old_values", column), typed("old_values", column, ltype)) \
        .otherwise(typed("new_values", column, ltype))


def effects(changes: DataFrame, table: TargetTable, compare: list[str], *,
            partial: bool) -> DataFrame:
    """The effects of one table's row LCRs (see the module docstring).

    Args:
        changes: row LCRs of this table only, command types already checked.
        compare: the columns whose old values are compared with the target.
        partial: some UPDATEs may lack columns (else ``_e_absent`` is NULL throughout).
    """
    from pyspark.sql import functions as F

    cmd = F.col("command_type")
    moved = key_moved(table)
    types = dict(table.columns)
    data_cols = [(c, t) for c, t in table.columns if c not in table.key_columns]

    def select(kind: str, key_side: str, value_side: str | None, sub: int,
               absent: Column | None) -> list[Column]:
        keys = [_key(key_side, k, types[k]).alias(k) for k in table.key_columns]
        data = []
        for c, t in data_cols:
            if value_side is None:
                data.append(F.lit(None).cast(lcr.LOGICAL_TYPES[t].spark_type).alias(c))
            elif value_side == "moved":  # the new key's image: new value, else old value
                data.append(F.when(carried("new_values", c), typed("new_values", c, t))
                            .otherwise(typed("old_values", c, t)).alias(c))
            else:
                data.append(typed(value_side, c, t).alias(c))
        olds = []
        for c in compare:
            olds.append(typed("old_values", c, types[c]).alias(f"_o_{c}"))
            olds.append(carried("old_values", c).alias(f"_h_{c}"))
        meta = [
            F.lit(kind).alias("_e_kind"), F.col("source_database_name").alias("_e_src"),
            F.col("commit_scn").alias("_e_scn"), F.col("transaction_id").alias("_e_txn"),
            F.col("position").alias("_e_pos"), F.lit(sub).alias("_e_sub"),
            F.col("msg_id").alias("_e_msg"),
            (absent if absent is not None else F.lit(None).cast("array<string>"))
            .alias("_e_absent"),
        ]
        return keys + data + meta + olds

    def missing(*sides: str) -> Column | None:
        if not partial or not data_cols:
            return None
        flags = []
        for c, _ in data_cols:
            there = F.lit(False)
            for s in sides:
                there = there | carried(s, c)
            flags.append(F.when(~there, F.lit(c)))
        arr = F.array_compact(F.array(*flags))
        return F.when(F.size(arr) > 0, arr)

    # One scan of the changes: each LCR gives an array of its effects (two for an UPDATE
    # that moves its key), inlined into rows. A CASE evaluates only its chosen branch, so
    # every LCR's maps are read once (a union of one select per kind read them five times).
    one = F.struct  # an effect's columns, named as the output columns
    per_lcr = (
        F.when(moved, F.array(one(*select("D", "old_values", None, 0, None)),
                              one(*select("I", "new_values", "moved", 1,
                                          missing("new_values", "old_values")))))
        .when(cmd == "INSERT", F.array(one(*select("I", "new_values", "new_values", 0, None))))
        .when(cmd == "UPDATE", F.array(one(*select("U", "old_or_new", "new_values", 0,
                                                   missing("new_values")))))
        .when(cmd == "DELETE", F.array(one(*select("D", "old_values", None, 0, None))))
    )
    return changes.select(F.inline(per_lcr))


def final_images(effects_df: DataFrame, table: TargetTable, tag: bytes, *,
                 partial: bool) -> DataFrame:
    """One image per changed key: what the key holds once the pass's effects are applied.

    The newest effect (run order) decides: ``_cf_op`` ``D`` (the row goes) or ``W`` (the
    row is written). Its bookkeeping columns are the newest effect's. With ``partial``,
    each data column takes the newest value an effect of the pass carried (a delete
    carries NULL throughout: a later insert starts from nothing), and ``_cf_absent``
    lists the columns no effect carried: the row keeps them (an unchanged TOASTed value
    is never overwritten).
    """
    from pyspark.sql import functions as F

    keys = table.key_columns
    data = [c for c in table.column_names if c not in keys]
    order = F.struct(*[F.col(c) for c in ORDER])
    kind = F.col("_e_kind")
    meta = [F.col("_e_src").alias("_cf_src"), F.col("_e_scn").alias("_cf_scn"),
            F.col("_e_pos").alias("_cf_pos"),
            F.when(kind == "D", "D").otherwise("W").alias("_cf_op")]
    if not partial:
        newest = F.max_by(F.struct(*[F.col(c) for c in data], *meta), order).alias("_n")
        out = effects_df.groupBy(*keys).agg(newest).select(*keys, "_n.*")
    else:
        aggs = []
        for c in data:
            carries = (kind != "U") | F.col("_e_absent").isNull() | ~F.array_contains(
                "_e_absent", c)
            aggs.append(F.max_by(F.when(kind != "D", F.col(c)), F.when(carries, order))
                        .alias(c))
            aggs.append(F.max(carries).alias(f"_has_{c}"))
        aggs.append(F.max_by(F.struct(*meta), order).alias("_m"))
        absent = F.array_compact(F.array(*[F.when(~F.col(f"_has_{c}"), F.lit(c))
                                           for c in data])) if data else \
            F.array().cast("array<string>")
        out = effects_df.groupBy(*keys).agg(*aggs).select(
            *keys, *data, "_m.*", absent.alias("_cf_absent"))
    return out.withColumn("_cf_tag", F.lit(tag).cast("binary"))


def single_images(effects_df: DataFrame, table: TargetTable, tag: bytes) -> DataFrame:
    """:func:`final_images` of effects that hold one effect per key, as whole images: each
    effect is its key's newest, so the images are a projection (no shuffle of the rows
    to group them by key)."""
    from pyspark.sql import functions as F

    keys = table.key_columns
    data = [c for c in table.column_names if c not in keys]
    return effects_df.select(
        *keys, *data, F.col("_e_src").alias("_cf_src"), F.col("_e_scn").alias("_cf_scn"),
        F.col("_e_pos").alias("_cf_pos"),
        F.when(F.col("_e_kind") == "D", "D").otherwise("W").alias("_cf_op"),
        F.lit(tag).cast("binary").alias("_cf_tag"))
