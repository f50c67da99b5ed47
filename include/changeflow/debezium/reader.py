"""Reading Debezium change-event files into LCRs, in two Spark passes.

1. :func:`survey`: one aggregate over the files gives, per table, the column types the
   events' schemas declare, the sets of columns the row images hold, and every kind of
   bad record (not JSON, no ``op``, an unknown op, no table): :func:`column_types`
   turns it into the types of each table, or a clear error naming the file.
2. :func:`.convert.to_lcrs`: a pure ``DataFrame -> DataFrame`` transform of the same
   files into the LCR contract. Values are decoded with Spark expressions
   (:mod:`.types`); a value that does not decode as its column's type stops the job
   with an error naming the file, table, column and value.

Row images are read as ``map<string,string>`` (each value as its JSON text), so one
read schema serves every table and a column that is absent stays absent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from changeflow.debezium import envelope as E
from changeflow.debezium import types as T
from changeflow.debezium.config import DebeziumSource
from changeflow.errors import TerminalError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


class DebeziumFileError(TerminalError):
    """A change-event file is not JSON, or an event in it breaks the envelope or its table."""


_SOURCE = ", ".join(f"`{n}` {'bigint' if t == 'int64' else 'string'}"
                    for n, t, _ in E.SOURCE_FIELDS)
_ENV_FIELDS = (
    f"`before` map<string,string>, `after` map<string,string>, `op` string, "
    f"`source` struct<{_SOURCE.replace(' bigint', ':bigint').replace(' string', ':string')}>, "
    "`ts_ms` bigint, "
    "`transaction` struct<`id`:string,`total_order`:bigint,`data_collection_order`:bigint>, "
    "`status` string, `id` string, `event_count` bigint, `__deleted` string, `__op` string")
ENV_NAMES = ("before", "after", "op", "source", "ts_ms", "transaction", "status", "id",
             "event_count", E.DELETED, E.FLAT_OP)
CORRUPT = "_corrupt_record"


def read_schema(with_schemas: bool) -> str:
    """The DDL Spark reads event files with (``with_schemas``: keep the ``schema`` block).

    The ``schema`` block is read as its JSON text: the survey groups events by it and
    parses each distinct block once (:func:`after_fields`), instead of Spark building
    a nested struct for every event.
    """
    env = _ENV_FIELDS.replace(" map<", ":map<").replace(" string", ":string") \
        .replace(" struct<", ":struct<").replace(" bigint", ":bigint")
    parts = [_ENV_FIELDS, f"`payload` struct<{env}>", f"`{CORRUPT}` string"]
    if with_schemas:
        parts.insert(0, "`schema` string")
    return ", ".join(parts)


def after_fields(schema_text: str | None) -> str | None:
    """The ``after`` image's field list of an event's ``schema`` block, as JSON text.

    Each field keeps what the types need (``field``, ``type``, ``name``, ``parameters``
    as text); a block that is not a Kafka Connect struct schema gives ``None``.
    """
    try:
        block = json.loads(schema_text) if schema_text else None
    except ValueError:
        return None
    fields = block.get("fields") if isinstance(block, dict) else None
    after = next((f for f in (fields if isinstance(fields, list) else [])
                  if isinstance(f, dict) and f.get("field") == "after"), None)
    if after is None or not isinstance(after.get("fields"), list):
        return None
    out = []
    for f in after["fields"]:
        if not isinstance(f, dict):
            continue
        kept = {k: f[k] if isinstance(f[k], str) or f[k] is None else json.dumps(f[k])
                for k in ("field", "type", "name") if k in f}
        if isinstance(f.get("parameters"), dict):
            kept["parameters"] = {str(k): v if isinstance(v, str) else json.dumps(v)
                                  for k, v in f["parameters"].items()}
        out.append({k: v for k, v in kept.items() if v is not None})
    return json.dumps(out)


def read_events(spark: SparkSession, files: list[str], *, with_schemas: bool) -> DataFrame:
    """The events of ``files``: column ``e`` (the envelope, bare or from ``payload``),
    ``file``, the corrupt text, and (``with_schemas``) the ``schema`` block."""
    from pyspark.sql import functions as F

    df = (spark.read.schema(read_schema(with_schemas)).option("mode", "PERMISSIVE")
          .option("columnNameOfCorruptRecord", CORRUPT).json(files))
    return envelope_columns(df, F.input_file_name(), with_schemas=with_schemas)


def envelope_columns(df: DataFrame, file: Column, *, with_schemas: bool) -> DataFrame:
    """:func:`read_events`' columns from rows read with :func:`read_schema`."""
    from pyspark.sql import functions as F

    bare = F.struct(*[F.col(f"`{n}`") for n in ENV_NAMES])
    cols = [F.when(F.col("payload").isNotNull(), F.col("payload")).otherwise(bare).alias("e"),
            file.alias("file"), F.col(CORRUPT).alias("corrupt")]
    if with_schemas:
        cols.append(F.col("schema"))
    return df.select(*cols)


@dataclass
class SurveyGroup:
    """One group of the survey: events alike in kind, table, schema and image columns."""

    kind: str
    connector: str | None
    owner: str | None
    table: str | None
    op: str | None
    signature: str | None
    image_keys: list[str]
    all_keys: list[str]
    key_columns: str | None
    count: int
    file: str
    sample: str | None
    min_scn: int | None = None
    schema_text: str | None = None  # the events' ``schema`` block, as compact JSON text
    txn_fix: bool = False  # some event needs its transaction's position or time


#: Finds the line of a group's first record in its file (None: not found), for errors.
Locator = Callable[[SurveyGroup], "int | None"]


def event_kind() -> Column:
    """What a record of :func:`read_events` is: ``event``; one a capture skips
    (:data:`.envelope.SKIPPED`: ``txmeta``, ``tombstone``, ``heartbeat``, ``message``);
    or what is wrong with it (``corrupt``, ``flattened``, ``not_event``, ``no_op``,
    ``bad_op``, ``no_table``).

    A tombstone is a ``null`` line (what ``kafka-console-consumer`` prints for one), a
    heartbeat an object holding only ``ts_ms``; an object with none of the envelope's
    fields is not an event (a row flattened without ``__deleted``, say).
    """
    from pyspark.sql import functions as F

    e, op = F.col("e"), F.col("e")["op"]
    bare = op.isNull() & e["source"].isNull() & e["before"].isNull() & e["after"].isNull()
    return (F.when(F.col("corrupt").isNotNull(),
                   F.when(F.trim(F.col("corrupt")) == "null", "tombstone").otherwise("corrupt"))
            .when(e["status"].isNotNull(), "txmeta")
            .when(e[E.DELETED].isNotNull() | e[E.FLAT_OP].isNotNull(), "flattened")
            .when(bare & e["ts_ms"].isNotNull() & e["transaction"].isNull(), "heartbeat")
            .when(bare, "not_event")
            .when(op == E.MESSAGE, "message")
            .when(op.isNull(), "no_op")
            .when(~op.isin(*[o.value for o in E.Op]), "bad_op")
            .when(e["source"]["table"].isNull(), "no_table")
            .otherwise("event"))


def survey(df: DataFrame) -> list[SurveyGroup]:
    """Pass 1: group the events by kind, table, schema and the columns their images hold."""
    from pyspark.sql import functions as F

    e = F.col("e")
    op = e["op"]
    kind = event_kind()
    image = F.when(op == "d", e["before"]).otherwise(e["after"])
    empty = F.array().cast("array<string>")
    sig = F.col("schema") if "schema" in df.columns else F.lit(None)
    rows = df.select(
        kind.alias("kind"), e["source"]["connector"].alias("connector"),
        e["source"]["schema"].alias("owner"), e["source"]["table"].alias("tbl"),
        op.alias("op"), sig.cast("string").alias("sig"),
        F.array_sort(F.coalesce(F.map_keys(image), empty)).alias("image_keys"),
        F.array_sort(F.array_union(F.coalesce(F.map_keys(e["before"]), empty),
                                   F.coalesce(F.map_keys(e["after"]), empty))).alias("all_keys"),
        e["source"]["cf_key_columns"].alias("key_columns"), F.col("file"),
        F.when(kind == "event", native_position(e)).alias("scn"),
        F.coalesce(F.col("corrupt"), op).alias("sample"),
        ((kind == "event") & needs_transaction(e)).alias("fix"),
    ).groupBy("kind", "connector", "owner", "tbl", "op", "sig", "image_keys", "all_keys") \
        .agg(F.count(F.lit(1)).alias("n"), F.first("file").alias("file"),
             F.first("sample").alias("sample"), F.max("key_columns").alias("key_columns"),
             F.min("scn").alias("min_scn"), F.max("fix").alias("fix"))
    return [SurveyGroup(r.kind, r.connector, r.owner, r.tbl, r.op, after_fields(r.sig),
                        list(r.image_keys), list(r.all_keys), r.key_columns, int(r.n), r.file,
                        r.sample, r.min_scn, r.sig, bool(r.fix)) for r in rows.collect()]


@dataclass
class TableTypes:
    """What pass 2 needs of one table: its key and its columns' types, in order."""

    owner: str
    table: str
    key: list[str]
    columns: dict[str, T.FieldType] = field(default_factory=dict)  # source name -> type

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.table}"


def check_records(groups: list[SurveyGroup], locate: Locator | None = None) -> None:
    """Refuse bad records, naming the file (and, with ``locate``, the line).

    Raises:
        DebeziumFileError: a record that is not JSON, lacks ``op``, has an unknown op or
            names no table; a flattened row or an object that is no change event; an
            event of a connector changeflow does not read.
    """
    for g in groups:
        if g.kind in E.SKIPPED or (g.kind == "event" and g.connector in E.CONNECTORS):
            continue
        where = where_of(g, locate)
        if g.kind == "flattened":
            raise DebeziumFileError(
                f"{where}: {g.count} records are rows flattened by Debezium's "
                "ExtractNewRecordState transform (a row plus '__deleted'), not change events: "
                "they carry no log position or transaction, so changeflow cannot order or "
                "group them; capture the connector's change events (without that transform)")
        if g.kind == "not_event":
            raise DebeziumFileError(
                f"{where}: {g.count} records are not Debezium change events (none of op, "
                "source, before, after): rows flattened by a transform, or another topic's "
                "records; capture the connector's change events")
        if g.kind == "corrupt":
            raise DebeziumFileError(
                f"{where}: not a JSON change event ({g.count} such lines), e.g. "
                f"{(g.sample or '')[:80]!r}; Debezium files hold one JSON event per line")
        if g.kind == "no_op":
            raise DebeziumFileError(
                f"{where}: {g.count} events have no 'op' field (table "
                f"{g.owner}.{g.table}); every change event needs op c, u, d, r or t")
        if g.kind == "bad_op":
            raise DebeziumFileError(f"{where}: unknown op {g.op!r} in {g.count} events (known: "
                                    + ", ".join(o.value for o in E.Op) + ")")
        if g.kind == "no_table":
            raise DebeziumFileError(f"{where}: {g.count} events name no source.table")
        if g.kind == "event" and g.connector not in E.CONNECTORS:
            raise DebeziumFileError(
                f"{where}: events of connector {g.connector!r} are not supported (supported: "
                f"{', '.join(E.CONNECTORS)}): changeflow needs the connector's log position "
                "to order transactions")


def short_name(file: str) -> str:
    """A file as a person names it: no ``file://``, no URL encoding (``%20``).

    >>> short_name("file:///data/my%20topics/t+0+0000000000.json")
    '/data/my topics/t+0+0000000000.json'
    """
    return unquote(file.removeprefix("file://"))


def where_of(g: SurveyGroup, locate: Locator | None) -> str:
    """``<file>`` or ``<file>, line <n>`` of a group's first record."""
    line = locate(g) if locate is not None else None
    return short_name(g.file) + (f", line {line}" if line else "")


def column_types(groups: list[SurveyGroup], source: DebeziumSource,
                 locate: Locator | None = None) -> dict[str, TableTypes]:
    """Each captured table's key and column types, checked against every event.

    Raises:
        DebeziumFileError: an event's image has a column the table does not have, lacks
            a key column, or its schema contradicts the declared table.
        UnsupportedColumnTypeError: a column type without an LCR type.
    """
    out: dict[str, TableTypes] = {}
    for g in sorted((g for g in groups if g.kind == "event"), key=lambda g: g.file):
        assert g.owner is not None and g.table is not None
        declared = source.table(g.owner, g.table)
        if source.tables and declared is None:
            continue
        tt = out.get(f"{g.owner}.{g.table}")
        if tt is None:
            tt = out[f"{g.owner}.{g.table}"] = TableTypes(g.owner, g.table,
                                                          _key(g, declared, locate))
            if declared is not None:
                tt.columns.update(_declared(declared, source))
        if g.signature:
            _merge_schema(tt, json.loads(g.signature) or [], declared is not None
                          and bool(declared.columns), g, locate)
        _check_image(tt, g, locate)
    return out


def _key(g: SurveyGroup, declared: Any, locate: Locator | None) -> list[str]:
    if declared is not None and declared.key:
        return list(declared.key)
    if g.key_columns and json.loads(g.key_columns):
        return [E.source_name(k) for k in json.loads(g.key_columns)]
    if g.op == E.Op.TRUNCATE.value:
        return []
    raise DebeziumFileError(
        f"{where_of(g, locate)}: table {g.owner}.{g.table} has no key: Debezium events do not "
        f"carry it; declare it in the capture's source (tables: [{{name: {g.owner}."
        f"{g.table}, key: [...]}}])")


def _declared(declared: Any, source: DebeziumSource) -> dict[str, T.FieldType]:
    return {c: T.from_postgres(t, decimal_handling_mode=source.decimal_handling_mode,
                               time_precision_mode=source.time_precision_mode,
                               binary_handling_mode=source.binary_handling_mode,
                               where=f"{declared.name}.{c}")
            for c, t in declared.columns.items()}


def _merge_schema(tt: TableTypes, fields: list[dict[str, Any]], checked: bool,
                  g: SurveyGroup, locate: Locator | None) -> None:
    for f in fields:
        name = f["field"]
        ft = T.from_schema(f, where=f"{tt.label}.{name}")
        have = tt.columns.get(name)
        if have is None and checked:
            raise DebeziumFileError(
                f"{where_of(g, locate)}: the events' schema of {tt.label} has column {name!r}, "
                f"which the declared table does not have")
        if have is not None and have.logical != ft.logical:
            raise DebeziumFileError(
                f"{where_of(g, locate)}: column {tt.label}.{name} is {ft.logical} in the events' "
                f"schema but {have.logical} in the declared table (or an earlier schema)")
        if have is None or have.codec != ft.codec:
            tt.columns[name] = ft


def _check_image(tt: TableTypes, g: SurveyGroup, locate: Locator | None) -> None:
    if not tt.columns or any(k not in tt.columns for k in g.all_keys) or (
            E.Op.of(g.op).key_image is not None and any(k not in g.image_keys for k in tt.key)):
        where = where_of(g, locate)
    else:
        return
    if not tt.columns:
        raise DebeziumFileError(
            f"{where}: events of {tt.label} carry no schema and the capture declares no "
            f"columns for it; declare them (tables: [{{name: {tt.label}, columns: {{...}}}}])")
    unknown = [k for k in g.all_keys if k not in tt.columns]
    if unknown:
        raise DebeziumFileError(
            f"{where}: an event of {tt.label} (op {g.op}) has column {unknown[0]!r}, which "
            f"the declared table does not have (it has {', '.join(tt.columns)})")
    op = E.Op.of(g.op)
    missing = [k for k in tt.key if k not in g.image_keys]
    if op.key_image is not None and missing:
        raise DebeziumFileError(
            f"{where}: {g.count} {op.command} events of {tt.label} lack key column "
            f"{missing[0]!r} in '{op.key_image}'")


# --- positions ---------------------------------------------------------------------

#: ``source.sequence`` as the PostgreSQL connector writes it: group 1 is the first LSN
_SEQUENCE = r'^\[\s*"(-?[0-9]+)"\s*,\s*(?:"-?[0-9]+"|null)\s*\]$'


def native_position(e: Column) -> Column:
    """The commit position of an event's transaction, by connector.

    PostgreSQL: the first element of ``source.sequence`` (the last commit LSN before
    the transaction; change LSNs of interleaved transactions do not follow commit
    order), else ``lsn``. changeflow: ``lsn``, where an export writes the LCR's.
    """
    from pyspark.sql import functions as F

    src = e["source"]
    seq = src["sequence"]
    # What the connector writes, ``["<digits>","<digits>"]`` (or null second), is read
    # with a regular expression; anything else is parsed as JSON. The two agree on every
    # text the pattern matches, and the pattern costs a fraction of a JSON parser per
    # event (the capture job's CPU -12%).
    written = F.regexp_extract(seq, _SEQUENCE, 1).try_cast("bigint")
    last_commit = F.coalesce(written, F.get_json_object(seq, "$[0]").try_cast("bigint"))
    return F.when(src["connector"] == "postgresql",
                  F.coalesce(last_commit, src["lsn"])).otherwise(src["lsn"])


#: ``source.sequence`` whose first element (the last commit LSN) is null: the connector
#: did not know it (the first transaction after it started, a snapshot)
_FIRST_UNKNOWN = r'^\[\s*null\s*,'
#: ``source.snapshot`` of events that are not part of a snapshot
_NOT_SNAPSHOT = ("false", "")


def first_unknown(e: Column) -> Column:
    """A PostgreSQL event whose ``source.sequence`` lacks the last commit LSN.

    Each event of such a transaction then has only its own ``lsn``; the transaction's
    commit position is the lowest of them (:func:`changeflow.debezium.convert.by_transaction`),
    still below the next transaction's, whose last commit LSN is at least this one's commit.
    """
    from pyspark.sql import functions as F

    src = e["source"]
    return F.coalesce((src["connector"] == "postgresql")
                      & src["sequence"].rlike(_FIRST_UNKNOWN), F.lit(False))


def is_snapshot(e: Column) -> Column:
    """An event read by a snapshot (``source.snapshot`` true, first, last, ...): its
    ``ts_ms`` is when the row was read, different for each row of one transaction."""
    from pyspark.sql import functions as F

    snap = F.lower(e["source"]["snapshot"])
    return F.coalesce(~snap.isin(*_NOT_SNAPSHOT), F.lit(False))


def needs_transaction(e: Column) -> Column:
    """An event whose commit position or time comes from its whole transaction."""
    return first_unknown(e) | is_snapshot(e)
