"""Pass 2: change events into LCRs, as a chain of code-generated projections.

:func:`to_lcrs` is a pure ``DataFrame -> DataFrame`` transform of
:func:`.reader.read_events`' output. It is shaped for Spark's whole-stage code
generation, which is what makes it fast:

1. the envelope's fields the LCR needs are lifted out of the nested event into flat
   columns, once (the commit position, which parses ``source.sequence``, is read once
   and used by the commit position, the transaction id and the message id);
2. each row image becomes its LCR value map in one ``map(...)`` expression per table
   (a ``CASE`` over the captured tables, by a table number computed in step 1); a
   partial image keeps the entries of the columns it holds;
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
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.debezium import envelope as E
from changeflow.debezium import types as T
from changeflow.debezium import unchanged as U
from changeflow.debezium.config import DebeziumSource
from changeflow.debezium.reader import TableTypes, first_unknown, is_snapshot, native_position

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

ERROR_PREFIX = "debezium value error: "
_IMAGES = {"before": "cf_before", "after": "cf_after"}
_ENTRIES = f"array<struct<`key`:string,`value`:{lcr.VALUE_DDL}>>"


def _lit(text: str) -> str:
    """A SQL string literal.

    >>> _lit("it's")
    "'it\\\\'s'"
    """
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _canon(c: Column) -> Column:
    from pyspark.sql import functions as F

    return F.when(c == F.lower(c), F.upper(c)).otherwise(c)


def _per_table(tables: dict[str, TableTypes], build: Any, default: Column | None = None
               ) -> Column:
    """``build(tt)`` for the row's table (by the number in ``cf_t``), one CASE."""
    from pyspark.sql import functions as F

    t = F.col("cf_t")
    out = None
    for i, tt in enumerate(tables.values()):
        out = F.when(t == i, build(tt)) if out is None else out.when(t == i, build(tt))
    if out is None:
        return F.lit(None) if default is None else default
    return out if default is None else out.otherwise(default)


def _table_number(tables: dict[str, TableTypes]) -> Column:
    """The captured table an event belongs to, as its number in ``tables`` (else NULL)."""
    from pyspark.sql import functions as F

    src = F.col("e")["source"]
    out = None
    for i, tt in enumerate(tables.values()):
        cond = (src["schema"] == tt.owner) & (src["table"] == tt.table)
        out = F.when(cond, i) if out is None else out.when(cond, i)
    return F.lit(None).cast("int") if out is None else out


def _raw(img: str, name: str) -> str:
    return f"`{_IMAGES[img]}`[{_lit(name)}]"


def decimal_slots(tables: dict[str, TableTypes]) -> dict[str, dict[str, int]]:
    """Per table, the slot of each Decimal column: its rank among the table's Decimals.

    Slot ``j`` holds, for every row, the ``j``-th Decimal column of the row's table,
    so the steps of decoding Decimals (:func:`.types.decimal_hex_sql` ...) are
    columns of their own, each computed once per row, however many tables there are.
    """
    return {label: {name: j for j, name in enumerate(
        n for n, ft in tt.columns.items() if ft.codec in T.DECIMAL_CODECS)}
        for label, tt in tables.items()}


def _with_decimals(df: DataFrame, tables: dict[str, TableTypes]) -> DataFrame:
    """Two projections: each Decimal slot's bytes as hex and its scale, then its digits.

    (Spark does not share a subexpression between the branches of a ``CASE``: pasted
    into the value maps, the bytes would be decoded once per use in the formula.)
    """
    from pyspark.sql import functions as F

    slots = decimal_slots(tables)
    width = max((len(s) for s in slots.values()), default=0)
    if not width:
        return df
    step1, step2 = [], []
    for img in _IMAGES:
        for j in range(width):
            def pick(tt: TableTypes, j: int = j, img: str = img, scale: bool = False) -> Column:
                name = next((n for n, k in slots[tt.label].items() if k == j), None)
                if name is None:
                    return F.lit(None)
                ft = tt.columns[name]
                sql = (T.decimal_scale_sql if scale else T.decimal_hex_sql)(_raw(img, name), ft)
                return F.expr(sql)

            hexed, scale = f"cf_h_{img}_{j}", f"cf_s_{img}_{j}"
            step1 += [_per_table(tables, pick).cast("string").alias(hexed),
                      _per_table(tables, lambda tt, p=pick: p(tt, scale=True))
                      .cast("int").alias(scale)]
            step2.append(F.expr(T.decimal_digits_sql(f"`{hexed}`")).alias(f"cf_d_{img}_{j}"))
    keep = list(df.columns)
    stepped = df.select("*", *step1)
    return stepped.select(*keep, *[c for c in stepped.columns if c.startswith("cf_s_")],
                          *step2)


def _value_sql(sql: str, logical: str) -> str:
    """SQL of a typed-value struct holding ``sql`` in the field of ``logical`` (as
    :func:`changeflow.values.value_struct` builds it).

    The conversion's expressions are written as SQL text, each parsed once by Spark:
    built as trees of ``Column`` objects they cost thousands of calls into the JVM,
    about a second of every capture run.
    """
    target = lcr.LOGICAL_TYPES[logical].field
    parts = []
    for name, ddl in lcr.VALUE_FIELDS:
        if name == "type":
            value = _lit(logical)
        elif name == target:
            value = f"CAST(({sql}) AS {ddl})"
        else:
            value = f"CAST(NULL AS {ddl})"
        parts += [_lit(name), value]
    return f"named_struct({', '.join(parts)})"


def _decoded(img: str, name: str, ft: T.FieldType, slot: int | None) -> str:
    if slot is not None:
        scale = str(ft.scale or 0) if ft.codec == "decimal" else f"`cf_s_{img}_{slot}`"
        sql = T.decimal_value_sql(f"`cf_d_{img}_{slot}`", scale)
    else:
        sql = T.decode_sql(_raw(img, name), ft)
    return _value_sql(sql, ft.logical)


def _per_table_sql(tables: dict[str, TableTypes], build: Any) -> str:
    """SQL of ``build(tt)`` (SQL text) for the row's table (by its number in ``cf_t``)."""
    branches = [f"WHEN cf_t = {i} THEN {build(tt)}" for i, tt in enumerate(tables.values())]
    return f"CASE {' '.join(branches)} END" if branches else "NULL"


def full_map(img: str, tt: TableTypes, slots: dict[str, int] | None = None) -> str:
    """SQL of every column of a row image of table ``tt`` decoded into one value map.

    A column the image does not hold is a value struct with a NULL typed field there;
    :func:`image_map` keeps only the columns the image holds. ``slots``: the table's
    Decimal slots (:func:`decimal_slots`), whose digits are columns.
    """
    pairs = [f"{_lit(lcr.canonical_identifier(name))}, "
             f"{_decoded(img, name, ft, (slots or {}).get(name))}"
             for name, ft in tt.columns.items()]
    return f"map({', '.join(pairs)})" if pairs else "NULL"


def image_map(img: str, full: str, tt: TableTypes) -> str:
    """SQL of the LCR value map of a row image of table ``tt`` (NULL: no image).

    ``full`` names the column holding :func:`full_map`. An image holding every column
    (what the connector writes with schemas) is that map; a partial one (schemaless
    files, an export's key-only old values) keeps only the entries of the columns it
    holds, read from that map, so an absent column stays absent and no value is
    decoded twice in the generated code. A column that held the unchanged-TOAST
    placeholder is absent from the image already (:func:`without_unchanged`).
    """
    ref = f"`{_IMAGES[img]}`"
    entries = []
    for name in tt.columns:
        key = _lit(lcr.canonical_identifier(name))
        # one entry or none (flatten, not array_compact: a lambda, not code-generated)
        entries.append(f"CASE WHEN map_contains_key({ref}, {_lit(name)}) THEN "
                       f"array(named_struct('key', {key}, 'value', `{full}`[{key}])) "
                       f"ELSE CAST(array() AS {_ENTRIES}) END")
    if not entries:
        return "NULL"
    return (f"CASE WHEN {ref} IS NULL THEN NULL WHEN size({ref}) = {len(tt.columns)} "
            f"THEN `{full}` ELSE map_from_entries(flatten(array({', '.join(entries)}))) END")


def bad_value(img: str, built: str, tt: TableTypes) -> str:
    """SQL of ``<table>.<column>`` of the first value of image ``img`` that did not
    decode (else NULL).

    ``built`` names the column holding the image's map: a value that is present in
    the image but NULL in its typed field there did not decode. Only the column's
    name is a per-column branch; :func:`_checked` describes it from literal maps, so
    the generated code stays small.
    """
    branches = []
    for name, ft in tt.columns.items():
        field = lcr.LOGICAL_TYPES[ft.logical].field
        branches.append(
            f"WHEN {_raw(img, name)} IS NOT NULL AND "
            f"`{built}`[{_lit(lcr.canonical_identifier(name))}].`{field}` IS NULL "
            f"THEN {_lit(f'{tt.label}.{name}')}")
    return f"CASE {' '.join(branches)} END" if branches else "CAST(NULL AS STRING)"


def _descriptions(tables: dict[str, TableTypes]) -> tuple[str, str]:
    """SQL of literal maps from ``<table>.<column>`` to the column's name in the images
    and to what its value should have been."""
    names: list[str] = []
    wanted: list[str] = []
    for tt in tables.values():
        for name, ft in tt.columns.items():
            label = _lit(f"{tt.label}.{name}")
            names.append(f"{label}, {_lit(name)}")
            wanted.append(f"{label}, {_lit(f' is not a {ft.logical} (Debezium codec {ft.codec})')}")
    empty = "CAST(map() AS map<string,string>)"
    return (f"map({', '.join(names)})" if names else empty,
            f"map({', '.join(wanted)})" if wanted else empty)


def _checked(img: str, built: str, bad: str, tables: dict[str, TableTypes]) -> Column:
    """The map in column ``built``, or a job failure naming the first bad value, whose
    ``<table>.<column>`` is in column ``bad`` (:func:`bad_value`)."""
    from pyspark.sql import functions as F

    names, wanted = _descriptions(tables)
    return F.expr(
        f"CASE WHEN `{bad}` IS NOT NULL THEN raise_error(concat({_lit(ERROR_PREFIX)}, file, "
        f"': ', `{bad}`, ': value ', substring(`{_IMAGES[img]}`[{names}[`{bad}`]], 1, 60), "
        f"{wanted}[`{bad}`])) ELSE `{built}` END")


def _key_of(tt: TableTypes, built: str) -> Column:
    """The key columns of the map in column ``built`` (an update's old values when the
    event has no ``before``: the key did not change)."""
    from pyspark.sql import functions as F

    keys = [lcr.canonical_identifier(k) for k in tt.key]
    if not keys:
        return F.lit(None)
    m = F.col(built)
    return F.create_map(*[x for k in keys for x in (F.lit(k), m[k])])


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
        found = [f"named_struct('key', {_lit(name)}, 'value', {_lit(form)})"
                 for name, ft in tt.columns.items()
                 for form in U.column_forms(ft.codec, placeholder)]
        return f"array({', '.join(found)})" if found else "NULL"

    table_pairs = _per_table_sql(tables, pairs)
    out = {}
    for img in _IMAGES.values():
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

    filler = F.expr(_per_table_sql(tables, key_only))
    checked = _checked("before", "cf_old", "cf_old_bad", tables)
    return F.when(c("cf_before").isNull() & (c("cf_op") == E.Op.UPDATE.value),
                  _per_table(tables, lambda tt: _key_of(tt, "cf_new"))) \
        .when(c("cf_before").isNotNull() & c("cf_op").isin(E.Op.DELETE.value, E.Op.UPDATE.value)
              & F.coalesce(filler, F.lit(False)) & c("cf_old_bad").isNull(),
              _per_table(tables, lambda tt: _key_of(tt, "cf_old"))) \
        .otherwise(checked)


def to_lcrs(df: DataFrame, source: DebeziumSource, tables: dict[str, TableTypes], *,
            by_txn: bool = False) -> DataFrame:
    """The events of the captured tables as LCRs (contract columns, in order).

    A pure transform of :func:`.reader.read_events`' output. Transaction metadata
    events, tombstones, heartbeats, logical-decoding messages and events of tables not
    captured are left out. A value that does not decode as its column's type fails the
    job (:data:`ERROR_PREFIX`). ``by_txn``: some events take their commit position or
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
    decimals = codegen_barrier(_with_decimals(flat, tables))
    fulls = codegen_barrier(decimals.select(
        "*",
        *[F.when(is_row & c(_IMAGES[img]).isNotNull(), F.expr(_per_table_sql(
            tables, lambda tt, img=img: full_map(img, tt, slots[tt.label])))).alias(f"{built}_all")
          for img, built in images]))
    built_maps = codegen_barrier(fulls.select(
        "*",
        *[F.when(is_row, F.expr(_per_table_sql(tables, lambda tt, img=img, built=built: image_map(
            img, f"{built}_all", tt)))).alias(built) for img, built in images]))
    maps = codegen_barrier(built_maps.select(
        "*",
        *[F.expr(_per_table_sql(tables, lambda tt, img=img, built=built: bad_value(
            img, built, tt))).alias(f"{built}_bad") for img, built in images]))
    command = F.expr("case cf_op " + " ".join(f"when '{o.value}' then '{o.command}'"
                                              for o in E.Op) + " end")
    # elements nullable, as the contract's array<string>: a cast of a literal array to it
    # is dropped by Spark's optimizer, and the batch's list elements would be `required`
    keys = _per_table(tables, lambda tt: F.slice(F.array(
        *[F.lit(lcr.canonical_identifier(k)) for k in tt.key], F.lit(None).cast("string")),
        1, len(tt.key)))
    new = _checked("after", "cf_new", "cf_new_bad", tables)
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
