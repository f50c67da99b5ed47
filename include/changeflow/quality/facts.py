"""Pure transforms that turn a batch into the narrow *facts* its expectation suites read.

Great Expectations is good at checking columns, and slow when each expectation scans a
wide batch of nested maps on its own. So each check is first expressed as one derived
column of a narrow DataFrame, computed in a single pass over the batch: ``True`` where a
message satisfies the check, ``False`` where it violates it, ``NULL`` where the check
does not apply (e.g. "INSERT has no old values" for an UPDATE). The suites then expect
each column's values to be in ``{True}``, and GX computes every expectation's
unexpected count in one aggregate over the cached facts.

Checks that span messages (transactions, commit order) read a second, much smaller
DataFrame: one row per source transaction, aggregated from the message facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from changeflow import lcr

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

ALWAYS_REQUIRED = ("schema_version", "msg_id", "kind", "origin")
_FAST_KEYS = 4
_UNREAD = ("tag", "payload", "payload_raw", "payload_text")

# Message-fact columns and the check each one carries (True = satisfied).
MESSAGE_CHECKS = (
    "required_fields",
    "kind_allowed",
    "origin_allowed",
    "command_type_allowed",
    "insert_no_old_values",
    "delete_no_new_values",
    "update_has_key",
)

TRANSACTION_CHECKS = (
    "single_commit_scn",
    "single_commit_time",
    "commit_scn_one_transaction",
    "commit_order_in_batch",
    "commit_order_across_batches",
)


def _missing_required() -> Column:
    """The first required field (by message kind) that is NULL, or NULL when none is."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    checks = [F.when(F.col(f).isNull(), F.lit(f)) for f in ALWAYS_REQUIRED]
    for k, fields in lcr.REQUIRED_BY_KIND.items():
        checks += [F.when((kind == k) & F.col(f).isNull(), F.lit(f)) for f in fields]
    return F.coalesce(*checks)


def _has_keys(values: str) -> Column:
    """Whether a value map holds every key column (and there is at least one).

    Up to :data:`_FAST_KEYS` key columns are probed one by one (no per-row array is
    built, which keeps this the cheap part of the pass); longer keys fall back to a set
    difference.
    """
    from pyspark.sql import functions as F

    keys, vals = F.col("key_columns"), F.col(values)
    n = F.size(keys)
    ok = keys.isNotNull() & (n > 0) & vals.isNotNull()
    for i in range(_FAST_KEYS):
        probe = F.map_contains_key(vals, F.try_element_at(keys, F.lit(i + 1)))
        ok = ok & F.when(n > i, probe).otherwise(F.lit(True))
    slow = F.size(F.array_except(keys, F.map_keys(vals))) == 0
    return ok & F.when(n > _FAST_KEYS, slow).otherwise(F.lit(True))


def read_schema() -> StructType:
    """The columns the checks need, with value maps pruned to their ``type`` field.

    Reading a batch with this schema skips payloads and every typed-value field but
    one, so the checks read a fraction of the batch's bytes.
    """
    from pyspark.sql import types as T

    pruned = T.MapType(T.StringType(), T.StructType([T.StructField("type", T.StringType())]))
    return T.StructType([
        T.StructField(f.name, pruned if f.name in ("old_values", "new_values") else f.dataType)
        for f in lcr.spark_schema().fields
        if f.name not in _UNREAD
    ])


def message_facts(batch: DataFrame, keep: Sequence[str] = ()) -> DataFrame:
    """One narrow row per message: identity, ordering fields and one column per check.

    A pure transform; the batch must follow the LCR contract.

    Args:
        batch: the messages of one batch.
        keep: extra batch columns to carry along (to show sample rows).

    Returns:
        Columns ``msg_hash`` (a 64-bit hash of ``msg_id``, used to find duplicates
        cheaply; a collision is confirmed against the ids themselves before anything is
        reported), ``kind``, ``source_database_name``, ``transaction_id``,
        ``commit_scn``, ``commit_time`` and the boolean columns of
        :data:`MESSAGE_CHECKS`.
    """
    from pyspark.sql import functions as F

    kind, cmd = F.col("kind"), F.col("command_type")
    row = kind == "ROW"
    return batch.select(
        *keep,
        F.xxhash64("msg_id").alias("msg_hash"),
        "kind",
        "source_database_name",
        "transaction_id",
        "commit_scn",
        "commit_time",
        _missing_required().isNull().alias("required_fields"),
        kind.isin(*lcr.KINDS).alias("kind_allowed"),
        F.col("origin").isin(*lcr.ORIGINS).alias("origin_allowed"),
        F.when(row, cmd.isin(*lcr.DML_COMMANDS)).when(kind == "USER", cmd.isNull())
        .alias("command_type_allowed"),
        F.when(row & (cmd == "INSERT"), F.col("old_values").isNull() & F.col("new_values")
               .isNotNull()).alias("insert_no_old_values"),
        F.when(row & (cmd == "DELETE"), F.col("new_values").isNull() & F.col("old_values")
               .isNotNull()).alias("delete_no_new_values"),
        F.when(row & (cmd == "UPDATE"), _has_keys("old_values") & _has_keys("new_values"))
        .alias("update_has_key"),
    )


def transaction_facts(facts: DataFrame, prior: dict[str, int] | None = None) -> DataFrame:
    """One row per source transaction of a batch, for the cross-message checks.

    Args:
        facts: the output of :func:`message_facts`.
        prior: per source database, the highest commit position the same producer
            committed to the same queue before this batch.

    Returns:
        ``source_database_name``, ``transaction_id``, ``n``, ``min_scn``/``max_scn``,
        ``min_time``/``max_time``, ``prev_scn`` (the commit position of the previous
        transaction of the same source in commit-time order), ``prior_scn`` (from
        ``prior``) and the boolean columns of :data:`TRANSACTION_CHECKS`.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    txns = (
        facts.where(F.col("transaction_id").isNotNull() & F.col("source_database_name")
                    .isNotNull())
        .groupBy("source_database_name", "transaction_id")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.min("commit_scn").alias("min_scn"),
            F.max("commit_scn").alias("max_scn"),
            F.min("commit_time").alias("min_time"),
            F.max("commit_time").alias("max_time"),
        )
    )
    order = Window.partitionBy("source_database_name").orderBy("min_time", "min_scn")
    same_scn = Window.partitionBy("source_database_name", "min_scn")
    prior_map = F.create_map(*[x for db, scn in sorted((prior or {}).items())
                               for x in (F.lit(db), F.lit(int(scn)).cast("bigint"))])
    prior_scn = (F.element_at(prior_map, F.col("source_database_name")) if prior
                 else F.lit(None).cast("bigint"))
    prev = F.lag("max_scn").over(order)
    scn_known = F.col("min_scn").isNotNull()
    return txns.select(
        "*",
        prev.alias("prev_scn"),
        prior_scn.alias("prior_scn"),
        F.when(scn_known, F.col("min_scn") == F.col("max_scn"))
        .alias("single_commit_scn"),
        F.when(F.col("min_time").isNotNull(), F.col("min_time") == F.col("max_time"))
        .alias("single_commit_time"),
        F.when(scn_known, F.count(F.lit(1)).over(same_scn) == 1)
        .alias("commit_scn_one_transaction"),
        F.when(scn_known & prev.isNotNull(), F.col("min_scn") >= prev)
        .alias("commit_order_in_batch"),
        F.when(scn_known & prior_scn.isNotNull(), F.col("min_scn") >= prior_scn)
        .alias("commit_order_across_batches"),
    )
