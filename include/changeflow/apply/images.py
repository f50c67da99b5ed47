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
    from pyspark.sql import DataFrame

ORDER = ("_e_scn", "_e_src", "_e_txn", "_e_pos", "_e_sub")
E_META = ("_e_kind", "_e_src", "_e_scn", "_e_txn", "_e_pos", "_e_sub", "_e_msg", "_e_absent")


def lcr_key(column: str) -> str:
    """The LCR map key of a target column (canonical upper case)."""
    return column.upper()


# The effects are built as Spark SQL text and handed to the JVM in one call: built from
# Column objects, each map lookup, field, cast and CASE branch is a round trip through
# py4j (some 800 for a 12-column table, 0.2 s of every pass). Same expressions, same plan.
def ident(name: str) -> str:
    """A column or field name, quoted for Spark SQL.

    >>> ident("a`b")
    '`a``b`'
    """
    return "`" + name.replace("`", "``") + "`"


def text(value: str) -> str:
    """A string literal for Spark SQL.

    >>> print(text("it's"))
    'it\\'s'
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def typed(side: str, column: str, ltype: str) -> str:
    """One column's value from an LCR value map, typed as the table declares it (SQL).

    >>> typed("new_values", "salary", "NUMBER")
    "CAST(`new_values`['SALARY'].`dec` AS decimal(38,10))"
    """
    t = lcr.LOGICAL_TYPES[ltype]
    return f"CAST({ident(side)}[{text(lcr_key(column))}].{ident(t.field)} AS {t.spark_type})"


def carried(side: str, column: str) -> str:
    """Whether an LCR's value map carries a column (NULL map: no) (SQL)."""
    return f"coalesce(map_contains_key({ident(side)}, {text(lcr_key(column))}), false)"


def key_moved(table: TargetTable) -> str:
    """An UPDATE whose key columns differ between old and new values (SQL)."""
    moved = []
    for k in table.key_columns:
        o = f"{ident('old_values')}[{text(lcr_key(k))}]"
        n = f"{ident('new_values')}[{text(lcr_key(k))}]"
        moved.append(f"({o} IS NOT NULL AND {n} IS NOT NULL AND NOT ({o} <=> {n}))")
    return f"({ident('command_type')} = 'UPDATE' AND ({' OR '.join(moved) or 'false'}))"


def _key(side: str, column: str, ltype: str) -> str:
    """A key value: from ``side``, or for ``old_or_new`` the old value, else the new one
    (an UPDATE may carry no old values at all) (SQL)."""
    if side != "old_or_new":
        return typed(side, column, ltype)
    return (f"CASE WHEN {carried('old_values', column)} THEN "
            f"{typed('old_values', column, ltype)} ELSE {typed('new_values', column, ltype)} END")


def effects(changes: DataFrame, table: TargetTable, compare: list[str], *,
            partial: bool) -> DataFrame:
    """The effects of one table's row LCRs (see the module docstring).

    Args:
        changes: row LCRs of this table only, command types already checked.
        compare: the columns whose old values are compared with the target.
        partial: some UPDATEs may lack columns (else ``_e_absent`` is NULL throughout).
    """
    cmd = ident("command_type")
    types = dict(table.columns)
    data_cols = [(c, t) for c, t in table.columns if c not in table.key_columns]

    def select(kind: str, key_side: str, value_side: str | None, sub: int,
               absent: str | None) -> str:
        fields = [(k, _key(key_side, k, types[k])) for k in table.key_columns]
        for c, t in data_cols:
            if value_side is None:
                fields.append((c, f"CAST(NULL AS {lcr.LOGICAL_TYPES[t].spark_type})"))
            elif value_side == "moved":  # the new key's image: new value, else old value
                fields.append((c, f"CASE WHEN {carried('new_values', c)} THEN "
                                  f"{typed('new_values', c, t)} ELSE "
                                  f"{typed('old_values', c, t)} END"))
            else:
                fields.append((c, typed(value_side, c, t)))
        fields += [
            ("_e_kind", text(kind)), ("_e_src", ident("source_database_name")),
            ("_e_scn", ident("commit_scn")), ("_e_txn", ident("transaction_id")),
            ("_e_pos", ident("position")), ("_e_sub", str(int(sub))),
            ("_e_msg", ident("msg_id")),
            ("_e_absent", absent if absent is not None else "CAST(NULL AS array<string>)"),
        ]
        for c in compare:
            fields.append((f"_o_{c}", typed("old_values", c, types[c])))
            fields.append((f"_h_{c}", carried("old_values", c)))
        # an effect's columns, named as the output columns
        return "named_struct(" + ", ".join(f"{text(n)}, {e}" for n, e in fields) + ")"

    def missing(*sides: str) -> str | None:
        if not partial or not data_cols:
            return None
        flags = []
        for c, _ in data_cols:
            there = " OR ".join(carried(s, c) for s in sides)
            flags.append(f"CASE WHEN NOT ({there}) THEN {text(c)} END")
        arr = f"array_compact(array({', '.join(flags)}))"
        return f"CASE WHEN size({arr}) > 0 THEN {arr} END"

    # One scan of the changes: each LCR gives an array of its effects (two for an UPDATE
    # that moves its key), inlined into rows. A CASE evaluates only its chosen branch, so
    # every LCR's maps are read once (a union of one select per kind read them five times).
    per_lcr = (
        f"CASE WHEN {key_moved(table)} THEN array("
        f"{select('D', 'old_values', None, 0, None)}, "
        f"{select('I', 'new_values', 'moved', 1, missing('new_values', 'old_values'))}) "
        f"WHEN {cmd} = 'INSERT' THEN array({select('I', 'new_values', 'new_values', 0, None)}) "
        f"WHEN {cmd} = 'UPDATE' THEN array("
        f"{select('U', 'old_or_new', 'new_values', 0, missing('new_values'))}) "
        f"WHEN {cmd} = 'DELETE' THEN array({select('D', 'old_values', None, 0, None)}) END"
    )
    return changes.selectExpr(f"inline({per_lcr})")


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
