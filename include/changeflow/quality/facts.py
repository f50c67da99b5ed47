"""Pure transforms that turn a batch into the narrow *facts* its expectation suites read.

Great Expectations is good at checking columns, and slow when each expectation scans a
wide batch of nested maps on its own. So each per-message check is first expressed as
one derived column (:func:`message_facts`): ``True`` where a message satisfies it,
``False`` where it violates it, ``NULL`` where it does not apply (e.g. "INSERT has no
old values" for an UPDATE). In the same single pass over the batch, the messages are
rolled up per source transaction (:func:`transaction_facts`): violation counts per
check, commit positions and times. That rollup is about a hundredth of the batch, and
GX validates every LCR-batch expectation on it in one call: sums of violations must be
0, and the cross-message checks (one commit per transaction, commit order) are
booleans per transaction. Batch-wide figures (distinct message ids, the hop's
counters) join the rollup as constant columns (:func:`batch_facts`).
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

# Commit times of one source may disagree with its commit positions by this much. In
# PostgreSQL a backend takes its commit timestamp before it inserts its commit record,
# so two transactions committing at once can get timestamps in one order and WAL
# positions in the other (seen: 48 bytes of WAL apart, the later position with the
# earlier time, in a pgbench run with 4 clients). ``commit_order_in_batch`` compares a
# transaction only with those committed at least this long before it.
COMMIT_TIME_SKEW_US = 1_000_000


def _all_present(fields: Sequence[str]) -> Column:
    from functools import reduce

    from pyspark.sql import functions as F

    return reduce(lambda a, b: a & b, [F.col(f).isNotNull() for f in fields])


def _required_present() -> Column:
    """Whether every field required for the message's kind is non-null."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    by_kind = F.when(F.lit(False), F.lit(True))
    for k, fields in lcr.REQUIRED_BY_KIND.items():
        by_kind = by_kind.when(kind == k, _all_present(fields))
    return _all_present(ALWAYS_REQUIRED) & by_kind.otherwise(F.lit(True))


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
        reported), ``source_database_name``, ``txn_key`` (a hash of the source and the
        transaction id, NULL without a transaction id; narrower to cache and group by
        than the id), ``commit_scn``, ``commit_time`` and the boolean columns of
        :data:`MESSAGE_CHECKS`.
    """
    from pyspark.sql import functions as F

    kind, cmd = F.col("kind"), F.col("command_type")
    row = kind == "ROW"
    return batch.select(
        *keep,
        F.xxhash64("msg_id").alias("msg_hash"),
        "source_database_name",
        F.when(F.col("transaction_id").isNotNull(),
               F.xxhash64("source_database_name", "transaction_id")).alias("txn_key"),
        "commit_scn",
        "commit_time",
        _required_present().alias("required_fields"),
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


def transaction_facts(
    facts: DataFrame, prior: dict[str, int] | None = None, keep: Sequence[str] = ()
) -> DataFrame:
    """Roll message facts up to one row per source transaction: every LCR-batch check.

    Messages without a transaction (user messages) roll up into one row per source
    with ``txn_key`` NULL; the transaction checks do not apply to that row.

    Args:
        facts: the output of :func:`message_facts`.
        prior: per source database, the highest commit position the same producer
            committed to the same queue before this batch.
        keep: extra grouping columns carried in ``facts`` (e.g. ``transaction_id``, to
            show sample rows), each determined by the transaction.

    Returns:
        ``source_database_name``, ``txn_key``, ``n``, ``min_scn``/``max_scn``,
        ``min_time``/``max_time``; per message check, the number of messages violating
        it (``<check>_violations``); ``prev_scn`` (the highest commit position of the
        same source's transactions committed at least :data:`COMMIT_TIME_SKEW_US`
        earlier), ``prior_scn`` (from
        ``prior``) and the boolean columns of :data:`TRANSACTION_CHECKS`.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # Only fixed-width aggregates (no first() of a string): Spark then uses a hash
    # aggregate with partial aggregation, instead of sorting every message.
    txns = facts.groupBy("txn_key", "source_database_name", *keep).agg(
        F.count(F.lit(1)).alias("n"),
        F.min("commit_scn").alias("min_scn"),
        F.max("commit_scn").alias("max_scn"),
        F.min("commit_time").alias("min_time"),
        F.max("commit_time").alias("max_time"),
        *[F.count_if(~F.col(c)).alias(f"{c}_violations") for c in MESSAGE_CHECKS],
    )
    known = F.col("txn_key").isNotNull() & F.col("source_database_name").isNotNull()
    order = Window.partitionBy("source_database_name").orderBy(F.unix_micros("min_time")) \
        .rangeBetween(Window.unboundedPreceding, -COMMIT_TIME_SKEW_US)
    same_scn = Window.partitionBy("source_database_name", "min_scn")
    prior_map = F.create_map(*[x for db, scn in sorted((prior or {}).items())
                               for x in (F.lit(db), F.lit(int(scn)).cast("bigint"))])
    prior_scn = (F.element_at(prior_map, F.col("source_database_name")) if prior
                 else F.lit(None).cast("bigint"))
    timed = known & F.col("min_time").isNotNull()
    prev = F.when(timed, F.max(F.when(timed, F.col("max_scn"))).over(order))
    scn_known = known & F.col("min_scn").isNotNull()
    return txns.select(
        "*",
        prev.alias("prev_scn"),
        prior_scn.alias("prior_scn"),
        F.when(scn_known, F.col("min_scn") == F.col("max_scn"))
        .alias("single_commit_scn"),
        F.when(known & F.col("min_time").isNotNull(), F.col("min_time") == F.col("max_time"))
        .alias("single_commit_time"),
        F.when(scn_known, F.sum(known.cast("int")).over(same_scn) == 1)
        .alias("commit_scn_one_transaction"),
        F.when(scn_known & prev.isNotNull(), F.col("min_scn") >= prev)
        .alias("commit_order_in_batch"),
        F.when(scn_known & prior_scn.isNotNull(), F.col("min_scn") >= prior_scn)
        .alias("commit_order_across_batches"),
    )


def id_counts(batch: DataFrame) -> tuple[int, int]:
    """Messages with an id, and distinct 64-bit hashes of those ids, in one aggregate.

    Equal counts prove the ids unique (distinct hashes imply distinct ids); a
    difference is confirmed on the ids themselves before anything is reported.
    """
    from pyspark.sql import functions as F

    mid = F.col("msg_id")
    row = batch.select(F.count(mid), F.count_distinct(F.xxhash64(mid))).first()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def batch_facts(rollup: DataFrame, ids: tuple[int, int],
                hop: tuple[int, int] | None = None) -> DataFrame:
    """The rollup plus the batch-wide figures as constant columns, for one GX call.

    Args:
        rollup: the output of :func:`transaction_facts`.
        ids: what :func:`id_counts` returned.
        hop: the hop's (messages read, messages propagated + discarded), if any.
    """
    from pyspark.sql import functions as F

    def lit(v: int | None) -> Column:
        return F.lit(v).cast("bigint")

    return rollup.withColumns({
        "messages_with_id": lit(ids[0]), "distinct_ids": lit(ids[1]),
        "messages_read": lit(hop[0] if hop else None),
        "messages_accounted": lit(hop[1] if hop else None),
    })
