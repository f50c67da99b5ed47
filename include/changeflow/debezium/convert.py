"""Pass 2: change events into LCRs, as a chain of code-generated projections.

:func:`to_lcrs` is a pure ``DataFrame -> DataFrame`` transform of
:func:`.reader.read_events`' output. It is shaped for Spark's whole-stage code
generation, which is what makes it fast:

1. the envelope's fields the LCR needs are lifted out of the nested event into flat
   columns, once (the commit position, which parses ``source.sequence``, is read once
   and used by the commit position, the transaction id and the message id);
2. each row image becomes its LCR value map in one ``map(...)`` expression per table
   (a ``CASE`` over the captured tables, by a table number computed in step 1); a
   partial image keeps the entries of the columns it holds (the SQL of steps 2 and 3
   is built in :mod:`.images`);
3. the value checks read the built maps back (a value that was present in the image
   but did not decode is NULL in its map) and stop the job with an error naming file,
   table, column and value; the message id is hashed.

Each step is a generated-code unit of its own (:func:`codegen_barrier`): compiled as
one, they made a Java method HotSpot would not compile.

No step carries a wide column: Spark generates code only for operators whose rows
have at most ``spark.sql.codegen.maxFields`` (100) fields, nested fields counted, and
runs wider ones row by row through interpreted expressions, many times slower. (An
earlier design decoded each value into a slot column holding a 10-field value struct,
so twelve slots already went over the limit.) Nothing here uses a lambda
(``transform``, ``filter``) on the common path, as Spark does not generate code for
those either.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from changeflow import lcr
from changeflow.debezium import envelope as E
from changeflow.debezium import unchanged as U
from changeflow.debezium.config import DebeziumSource
from changeflow.debezium.images import (
    IMAGES,
    bad_value,
    checked,
    decimal_slots,
    full_map,
    image_map,
    key_of,
    lit,
    per_table,
    per_table_sql,
    with_decimals,
)
from changeflow.debezium.reader import TableTypes, first_unknown, is_snapshot, native_position

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

def _canon(c: Column) -> Column:
    from pyspark.sql import functions as F

    return F.when(c == F.lower(c), F.upper(c)).otherwise(c)



def _table_number(tables: dict[str, TableTypes]) -> Column:
    """The captured table an event belongs to, as its number in ``tables`` (else NULL)."""
    from pyspark.sql import functions as F

    src = F.col("e")["source"]
    out = None
    for i, tt in enumerate(tables.values()):
        cond = (src["schema"] == tt.owner) & (src["table"] == tt.table)
        out = F.when(cond, i) if out is None else out.when(cond, i)
    return F.lit(None).cast("int") if out is None else out



def message_id() -> Column:
    """``source.cf_msg_id`` (an export's), else a hash of what identifies the event.

    The hash covers the source database, commit position, transaction, table, the
    position in the transaction and both row images as written, so a replay of the
    same file gives the same ids and two different events different ones (a
    snapshot's events share position and transaction and differ in their images).
    """
    from pyspark.sql import functions as F

    c = F.col
    text = F.concat_ws("\x1f", c("cf_db"), c("cf_scn").cast("string"), c("cf_txn"),
                       c("cf_owner"), c("cf_name"), c("cf_position").cast("string"),
                       F.to_json(c("cf_after")), F.to_json(c("cf_before")))
    return F.coalesce(c("cf_msg_id"), F.substring(F.sha2(text, 256), 1, 32))


def _flat(df: DataFrame, source: DebeziumSource, tables: dict[str, TableTypes]) -> DataFrame:
    """Step 1: the captured events, with the envelope fields the LCR needs as columns."""
    from pyspark.sql import functions as F

    e = F.col("e")
    src = e["source"]
    number = _table_number(tables)
    events = df.where(F.col("corrupt").isNull() & e["status"].isNull() & e["op"].isNotNull()
                      & (e["op"] != E.MESSAGE) & number.isNotNull())
    if not source.include_tagged_lcr:
        events = events.where(src["cf_tag"].isNull())
    return events.select(
        number.alias("cf_t"), e["op"].alias("cf_op"), F.col("file"),
        e["before"].alias("cf_before"), e["after"].alias("cf_after"),
        F.coalesce(src["cf_source_database"], F.lit(source.database.upper())).alias("cf_db"),
        native_position(e).alias("cf_scn"), transaction_of(e).alias("cf_txn0"),
        F.coalesce(e["transaction"]["total_order"], src["lsn"], F.lit(0)).alias("cf_position"),
        _canon(src["schema"]).alias("cf_owner"), _canon(src["table"]).alias("cf_name"),
        src["schema"].alias("cf_raw_owner"), src["table"].alias("cf_raw_name"),
        F.coalesce(F.timestamp_micros(src["ts_us"]), F.timestamp_millis(src["ts_ms"]),
                   F.timestamp_millis(e["ts_ms"])).alias("cf_time"),
        src["cf_msg_id"].alias("cf_msg_id"), src["cf_tag"].alias("cf_tag"),
        first_unknown(e).alias("cf_first_unknown"), is_snapshot(e).alias("cf_snapshot"),
    ).withColumn("cf_txn", F.coalesce(F.col("cf_txn0"), F.concat(
        F.lit("dbz:"), F.col("cf_scn").cast("string"))))


def without_unchanged(flat: DataFrame, tables: dict[str, TableTypes], placeholder: str
                      ) -> DataFrame:
    """Step 1b: the row images without the columns holding the unchanged-TOAST
    placeholder (:mod:`.unchanged`): such a column did not change, and is left out of
    the LCR's values.

    Per table, the pairs (column, placeholder as that column's codec writes it) are a
    literal array; an image holding any form of the placeholder loses those entries
    (``array_except`` over its entries). Lambda-free, one small generated-code unit.
    """
    from pyspark.sql import functions as F

    def pairs(tt: TableTypes) -> str:
        found = [f"named_struct('key', {lit(name)}, 'value', {lit(form)})"
                 for name, ft in tt.columns.items()
                 for form in U.column_forms(ft.codec, placeholder)]
        return f"array({', '.join(found)})" if found else "NULL"

    table_pairs = per_table_sql(tables, pairs)
    out = {}
    for img in IMAGES.values():
        out[img] = F.expr(
            f"CASE WHEN {U.holds_placeholder(f'`{img}`', placeholder)} AND "
            f"({table_pairs}) IS NOT NULL THEN map_from_entries(array_except("
            f"map_entries(`{img}`), {table_pairs})) ELSE `{img}` END")
    return flat.withColumns(out)


def transaction_of(e: Column) -> Column:
    """The source transaction of an event (NULL: unknown).

    PostgreSQL: ``source.txId``. With transaction metadata on, the connector writes
    ``transaction.id`` as ``"<txId>:<lsn>"``, different on every event of one
    transaction, so it is only used (up to its ``:``) when ``txId`` is missing. A
    changeflow export: ``transaction.id``, the LCR's own transaction id.
    """
    from pyspark.sql import functions as F

    src, given = e["source"], e["transaction"]["id"]
    pg = F.coalesce(src["txId"].cast("string"),
                    F.nullif(F.substring_index(given, ":", 1), F.lit("")))
    return F.when(src["connector"] == "postgresql", pg) \
        .otherwise(F.coalesce(given, src["txId"].cast("string")))


def by_transaction(flat: DataFrame) -> DataFrame:
    """One commit position and one commit time per transaction, where the events do not
    carry them (:func:`.reader.needs_transaction`).

    * events whose ``source.sequence`` lacks the last commit LSN (the first transaction
      after the connector started: ``[null, "<lsn>"]``) take the lowest LSN of their
      transaction's such events, instead of each its own;
    * snapshot events take the earliest ``ts_ms`` of their transaction's snapshot events
      (each row's is when it was read).

    A window over the transaction (a shuffle): used only when some event needs it.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c = F.col
    w = Window.partitionBy("cf_db", "cf_txn")
    return flat.withColumns({
        "cf_scn": F.when(c("cf_first_unknown"), F.min(F.when(c("cf_first_unknown"),
                                                              c("cf_scn"))).over(w))
        .otherwise(c("cf_scn")),
        "cf_time": F.when(c("cf_snapshot"), F.min(F.when(c("cf_snapshot"), c("cf_time")))
                          .over(w)).otherwise(c("cf_time")),
    })


def _old_values(tables: dict[str, TableTypes]) -> Column:
    """The LCR's old values: the checked ``before`` map; the key alone when ``before``
    holds nothing else (a key-only old image's fillers, :mod:`.unchanged`) or is
    missing from an update (the key did not change)."""
    from pyspark.sql import functions as F

    c = F.col

    def key_only(tt: TableTypes) -> str:
        return U.key_only_sql("cf_old", U.canonical_types(
            {n: ft.logical for n, ft in tt.columns.items()}),
            [lcr.canonical_identifier(k) for k in tt.key])

    filler = F.expr(per_table_sql(tables, key_only))
    old = checked("before", "cf_old", "cf_old_bad", tables)
    return F.when(c("cf_before").isNull() & (c("cf_op") == E.Op.UPDATE.value),
                  per_table(tables, lambda tt: key_of(tt, "cf_new"))) \
        .when(c("cf_before").isNotNull() & c("cf_op").isin(E.Op.DELETE.value, E.Op.UPDATE.value)
              & F.coalesce(filler, F.lit(False)) & c("cf_old_bad").isNull(),
              per_table(tables, lambda tt: key_of(tt, "cf_old"))) \
        .otherwise(old)


def to_lcrs(df: DataFrame, source: DebeziumSource, tables: dict[str, TableTypes], *,
            by_txn: bool = False) -> DataFrame:
    """The events of the captured tables as LCRs (contract columns, in order).

    A pure transform of :func:`.reader.read_events`' output. Transaction metadata
    events, tombstones, heartbeats, logical-decoding messages and events of tables not
    captured are left out. A value that does not decode as its column's type fails the
    job (:data:`.images.ERROR_PREFIX`). ``by_txn``: some events take their commit position or
    time from their transaction (:func:`by_transaction`).
    """
    from pyspark.sql import functions as F

    c = F.col
    is_row = c("cf_op") != E.Op.TRUNCATE.value
    slots = decimal_slots(tables)
    images = (("after", "cf_new"), ("before", "cf_old"))
    # one projection per step: each column is referenced more than once by the next,
    # so Spark keeps it computed once per row instead of pasting it into every use;
    # and a code-generation barrier between the steps (see codegen_barrier)
    flat = _flat(df, source, tables)
    if by_txn:
        flat = by_transaction(flat)
    flat = codegen_barrier(without_unchanged(flat, tables, source.unavailable_value_placeholder))
    decimals = codegen_barrier(with_decimals(flat, tables))
    fulls = codegen_barrier(decimals.select(
        "*",
        *[F.when(is_row & c(IMAGES[img]).isNotNull(), F.expr(per_table_sql(
            tables, lambda tt, img=img: full_map(img, tt, slots[tt.label])))).alias(f"{built}_all")
          for img, built in images]))
    built_maps = codegen_barrier(fulls.select(
        "*",
        *[F.when(is_row, F.expr(per_table_sql(tables, lambda tt, img=img, built=built: image_map(
            img, f"{built}_all", tt)))).alias(built) for img, built in images]))
    maps = codegen_barrier(built_maps.select(
        "*",
        *[F.expr(per_table_sql(tables, lambda tt, img=img, built=built: bad_value(
            img, built, tt))).alias(f"{built}_bad") for img, built in images]))
    command = F.expr("case cf_op " + " ".join(f"when '{o.value}' then '{o.command}'"
                                              for o in E.Op) + " end")
    # elements nullable, as the contract's array<string>: a cast of a literal array to it
    # is dropped by Spark's optimizer, and the batch's list elements would be `required`
    keys = per_table(tables, lambda tt: F.slice(F.array(
        *[F.lit(lcr.canonical_identifier(k)) for k in tt.key], F.lit(None).cast("string")),
        1, len(tt.key)))
    new = checked("after", "cf_new", "cf_new_bad", tables)
    old = _old_values(tables)
    given: dict[str, Column] = {
        "msg_id": message_id(),
        "kind": F.when(is_row, "ROW").otherwise("DDL"),
        "origin": F.lit("CAPTURED"),
        "source_database_name": F.upper(c("cf_db")),
        "command_type": command,
        "object_owner": c("cf_owner"),
        "object_name": c("cf_name"),
        "object_type": F.when(~is_row, "TABLE"),
        "ddl_text": F.when(~is_row, F.concat(F.lit('TRUNCATE TABLE "'), c("cf_raw_owner"),
                                             F.lit('"."'), c("cf_raw_name"), F.lit('"'))),
        "tag": F.try_to_binary(c("cf_tag"), F.lit("hex")),
        "transaction_id": c("cf_txn"),
        "commit_scn": c("cf_scn"),
        "commit_time": c("cf_time"),
        "position": c("cf_position"),
        "key_columns": F.when(is_row, keys),
        "old_values": F.when(is_row, old),
        "new_values": F.when(is_row, new),
    }
    return maps.select(*[_field(f, given) for f in lcr.LCR_FIELDS])


def codegen_barrier(df: DataFrame) -> DataFrame:
    """``df`` as it is, in a whole-stage generated-code unit of its own.

    Spark compiles a chain of projections into one Java method per row
    (``processNext``); the whole conversion with the captures' rule filter above it
    made one of some 35 KB of bytecode, which HotSpot's compilers give up on ("out of
    virtual registers", "out of nodes"), so it ran in the interpreter or half
    compiled: the stage took twice as long with a rule filter as without, and its
    speed changed from run to run. An observed metric (a count nobody reads) is an
    operator without generated code: the stages on either side get methods of their
    own, each small enough to compile.
    """
    from pyspark.sql import functions as F

    return df.observe(f"cf_dbz_stage_{uuid.uuid4().hex}", F.count(F.lit(1)).alias("rows"))


def _field(spec: tuple[str, str, bool], given: dict[str, Column]) -> Column:
    from pyspark.sql import functions as F

    name, ddl, _ = spec
    if name == "schema_version":
        return F.lit(lcr.SCHEMA_VERSION).alias(name)
    return given.get(name, F.lit(None)).cast(lcr.spark_type(ddl)).alias(name)
