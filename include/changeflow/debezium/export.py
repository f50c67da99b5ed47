"""Exporting a queue to Debezium change-event files (the envelope, both ways: SPEC §1).

Every row LCR (and TRUNCATE DDL LCR) of a queue's batches becomes one JSON line, in
one directory per table named after its Debezium topic (``<prefix>.<owner>.<table>``),
files named as Kafka Connect's S3 sink names them (``<topic>+0+<first offset>.json``),
in commit order. With ``schemas`` each line is ``{"schema": ..., "payload": ...}`` as
the JSON converter writes it with ``schemas.enable=true``.

Values are written with the PostgreSQL connector's mapping for their LCR type
(:func:`changeflow.debezium.types.for_logical`); what Debezium has no field for (the
source database's global name, the message id, the tag, the key columns) goes into
``cf_*`` fields of the source block. Row images hold only the columns the LCR holds,
so reading the files back (:mod:`.reader`) gives the same LCRs, types and values.
User messages and other DDL have no envelope and are counted, not written.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from changeflow import lcr
from changeflow.config import PipelineConfig
from changeflow.debezium import envelope as E
from changeflow.debezium import types as T
from changeflow.pipeline import Pipeline, resolve
from changeflow.queues import io as qio
from changeflow.queues.catalog import READY, Batch, _batch
from changeflow.state import schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass
class ExportResult:
    """What an export wrote: events per topic, and the messages it had no envelope for."""

    queue: str
    directory: str
    topics: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    batches: int = 0

    @property
    def events(self) -> int:
        """Events written in all."""
        return sum(self.topics.values())


def queue_batches(pipeline: PipelineConfig | Pipeline, queue_ref: str) -> list[Batch]:
    """Every retained, ready batch of a queue, oldest first."""
    handle = resolve(pipeline).queue(queue_ref)
    rt, queue = handle.site, handle.name
    B = schema.queue_batches
    with rt.store.read() as c:
        rows = c.execute(select(B).where(B.c.queue == queue, B.c.path != "",
                                         B.c.state == READY).order_by(B.c.seq)).all()
    return [_batch(r) for r in rows]


def table_columns(df: DataFrame) -> dict[tuple[str, str], tuple[list[str], list[tuple[str, str]]]]:
    """Per ``(owner, table)``: key columns and ``(column, logical type)`` in map order."""
    from pyspark.sql import functions as F

    shapes = df.groupBy(
        "object_owner", "object_name", "key_columns",
        F.map_keys("old_values").alias("ok"), F.map_values("old_values")["type"].alias("ot"),
        F.map_keys("new_values").alias("nk"), F.map_values("new_values")["type"].alias("nt"),
    ).count().collect()
    out: dict[tuple[str, str], tuple[list[str], list[tuple[str, str]]]] = {}
    for r in shapes:
        keys, cols = out.setdefault((r.object_owner, r.object_name), ([], []))
        if not keys and r.key_columns:
            keys.extend(r.key_columns)
        known = {c for c, _ in cols}
        for names, types in ((r.nk, r.nt), (r.ok, r.ot)):
            for c, t in zip(names or [], types or [], strict=True):
                if c not in known:
                    cols.append((c, t))
                    known.add(c)
    return out


def _json(expr: str) -> str:
    """SQL: the JSON text of one value (strings quoted and escaped, NULL as null)."""
    s = f"to_json(named_struct('v', {expr}), map('ignoreNullFields', 'false'))"
    return f"substring({s}, 6, length({s}) - 6)"


def _image(values: str, cols: list[tuple[str, str]]) -> Column:
    from pyspark.sql import functions as F

    parts = []
    for col, logical in cols:
        ft = T.for_logical(logical)
        raw = f"`{values}`['{col}'].`{lcr.LOGICAL_TYPES[logical].field}`"
        name = json.dumps(E.source_name(col))
        parts.append(f"if(map_contains_key(`{values}`, '{col}'), concat('{name}:', "
                     f"{_json(T.encode_sql(raw, ft))}), null)")
    body = f"concat('{{', concat_ws(',', {', '.join(parts) or 'null'}), '}}')"
    return F.expr(f"if(`{values}` is null, 'null', {body})")


def _source(prefix: str) -> Column:
    from pyspark.sql import functions as F

    micros = F.unix_micros(F.col("commit_time"))
    txid = F.when(F.col("transaction_id").rlike("^[0-9]{1,18}$"),
                  F.col("transaction_id").cast("bigint"))
    return F.to_json(F.struct(
        F.lit(E.VERSION).alias("version"), F.lit(E.CONNECTOR).alias("connector"),
        F.lit(prefix).alias("name"), F.floor(micros / 1000).cast("bigint").alias("ts_ms"),
        micros.alias("ts_us"), (micros * 1000).alias("ts_ns"), F.lit("false").alias("snapshot"),
        F.col("source_database_name").alias("db"),
        F.to_json(F.array(F.lit(None).cast("string"), F.col("commit_scn").cast("string")))
        .alias("sequence"),
        _source_name(F.col("object_owner")).alias("schema"),
        _source_name(F.col("object_name")).alias("table"), txid.alias("txId"),
        F.col("commit_scn").alias("lsn"), F.lit(None).cast("bigint").alias("xmin"),
        F.col("source_database_name").alias("cf_source_database"),
        F.col("msg_id").alias("cf_msg_id"), F.lower(F.hex("tag")).alias("cf_tag"),
        F.to_json("key_columns").alias("cf_key_columns"),
    ), {"ignoreNullFields": "false"})


def _source_name(c: Column) -> Column:
    from pyspark.sql import functions as F

    return F.when(c == F.upper(c), F.lower(c)).otherwise(c)


def envelope_schema(topic: str, cols: list[tuple[str, str]], keys: list[str]) -> dict[str, Any]:
    """The ``schema`` block of a table's events, as Kafka Connect's JSON converter writes it."""
    fields = [{**T.for_logical(t).schema(), "optional": c not in keys,
               "field": E.source_name(c)} for c, t in cols]
    value = {"type": "struct", "fields": fields, "optional": True, "name": f"{topic}.Value"}
    src = {"type": "struct", "optional": False, "name": f"{E.CONNECTOR}.Source",
           "fields": [{"type": t, "optional": o, "field": n} for n, t, o in E.SOURCE_FIELDS]}
    txn = {"type": "struct", "optional": True, "name": "event.block", "version": 1,
           "fields": [{"type": "string", "optional": False, "field": "id"},
                      {"type": "int64", "optional": False, "field": "total_order"},
                      {"type": "int64", "optional": False, "field": "data_collection_order"}]}
    return {"type": "struct", "optional": False, "name": f"{topic}.Envelope", "version": 2,
            "fields": [{**value, "field": E.BEFORE}, {**value, "field": E.AFTER},
                       {**src, "field": E.SOURCE}, {**txn, "field": E.TRANSACTION},
                       {"type": "string", "optional": False, "field": E.OP},
                       {"type": "int64", "optional": True, "field": E.TS_MS},
                       {"type": "int64", "optional": True, "field": E.TS_US},
                       {"type": "int64", "optional": True, "field": E.TS_NS}]}


def event_lines(df: DataFrame, prefix: str, cols: list[tuple[str, str]], keys: list[str],
                topic: str, *, schemas: bool, now: dt.datetime,
                with_key: bool = False) -> DataFrame:
    """One table's LCRs as envelope lines (column ``value``), in commit order. Pure.

    ``with_key``: also the record key (column ``key``), the row's key columns as the
    connector writes its keys (``{"id": 1}``, with a ``schema`` block with ``schemas``).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ts = int(now.timestamp() * 1_000_000)
    op = F.expr("case command_type " + " ".join(
        f"when '{c}' then '{E.Op.for_command(c).value}'"
        for c in ("INSERT", "UPDATE", "DELETE", "TRUNCATE TABLE")) + " end")
    order = Window.partitionBy("commit_scn", "transaction_id").orderBy("position")
    txn = F.to_json(F.struct(F.col("transaction_id").alias("id"),
                             F.col("position").alias("total_order"),
                             F.row_number().over(order).cast("bigint")
                             .alias("data_collection_order")))
    payload = F.concat(
        F.lit('{"before":'), _image("old_values", cols), F.lit(',"after":'),
        _image("new_values", cols), F.lit(',"source":'), _source(prefix),
        F.lit(',"transaction":'), txn, F.lit(',"op":"'), op,
        F.lit(f'","ts_ms":{ts // 1000},"ts_us":{ts},"ts_ns":{ts * 1000}}}'))
    if schemas:
        head = json.dumps(envelope_schema(topic, cols, keys), separators=(",", ":"))
        payload = F.concat(F.lit('{"schema":' + head + ',"payload":'), payload, F.lit("}"))
    out = df.select(payload.alias("value"), _key(cols, keys, topic, schemas).alias("key"),
                    "commit_scn", "position").orderBy("commit_scn", "position")
    return out.select("key", "value") if with_key else out.select("value")


def _key(cols: list[tuple[str, str]], keys: list[str], topic: str, schemas: bool) -> Column:
    """The record key of a row LCR: its key columns (NULL for a truncate)."""
    from pyspark.sql import functions as F

    key_cols = [(c, t) for c, t in cols if c in keys]
    image = F.when(F.col("new_values").isNull(), _image("old_values", key_cols)) \
        .otherwise(_image("new_values", key_cols))
    key = F.when(image == "null", F.lit(None)).otherwise(image)
    if not schemas:
        return key
    fields = [{**T.for_logical(t).schema(), "optional": False, "field": E.source_name(c)}
              for c, t in key_cols]
    head = json.dumps({"type": "struct", "fields": fields, "optional": False,
                       "name": f"{topic}.Key"}, separators=(",", ":"))
    return F.concat(F.lit('{"schema":' + head + ',"payload":'), key, F.lit("}"))


def export_queue(spark: SparkSession, pipeline: PipelineConfig | Pipeline, queue_ref: str,
                 directory: str, *, schemas: bool = True, topic_prefix: str | None = None,
                 batches: list[Batch] | None = None) -> ExportResult:
    """Write a queue's row LCRs as Debezium change-event files under ``directory``.

    Args:
        batches: the batches to export (default: every retained batch of the queue).
        topic_prefix: the Debezium ``topic.prefix`` (default: the queue's site).
    """
    def write(lines: DataFrame, topic: str) -> int:
        return _write_topic(spark, lines, directory, topic)

    return _export(spark, resolve(pipeline), queue_ref, directory, write, schemas=schemas,
                   topic_prefix=topic_prefix, batches=batches, with_key=False)


def export_to_kafka(spark: SparkSession, pipeline: PipelineConfig | Pipeline, queue_ref: str,
                    bootstrap_servers: str, *, schemas: bool = True,
                    topic_prefix: str | None = None, batches: list[Batch] | None = None,
                    options: dict[str, str] | None = None) -> ExportResult:
    """Write a queue's row LCRs to Kafka: one topic per table (``<prefix>.<owner>.<table>``),
    each record keyed by the row's primary key, values as :func:`export_queue` writes
    lines (JsonConverter's form, with or without schemas), in commit order.

    Written with Spark's Kafka sink, at least once: re-exporting the same batches
    writes their events again (a consumer recognises them by ``source.cf_msg_id``).
    """
    def write(lines: DataFrame, topic: str) -> int:
        # counted apart: Spark reports no observed metrics for a write to its Kafka sink
        one = lines.coalesce(1).persist()
        try:
            writer = one.write.format("kafka").option(
                "kafka.bootstrap.servers", bootstrap_servers).option("topic", topic)
            for k, v in (options or {}).items():
                writer = writer.option(f"kafka.{k}", v)
            writer.save()
            return int(one.count())
        finally:
            one.unpersist()

    return _export(spark, resolve(pipeline), queue_ref, f"kafka://{bootstrap_servers}", write,
                   schemas=schemas, topic_prefix=topic_prefix, batches=batches, with_key=True)


def _export(spark: SparkSession, pipe: Pipeline, queue_ref: str, where: str,
            write: Any, *, schemas: bool, topic_prefix: str | None,
            batches: list[Batch] | None, with_key: bool) -> ExportResult:
    """The batches' row LCRs, table by table, as envelope lines handed to ``write``."""
    from pyspark.sql import functions as F

    q = pipe.cfg.queue(queue_ref)
    prefix = topic_prefix or q.site
    todo = queue_batches(pipe, queue_ref) if batches is None else batches
    result = ExportResult(f"{q.name}@{q.site}", where, batches=len(todo))
    if not todo:
        return result
    df = qio.read_batches(spark, todo)
    with qio.guard(todo):
        kinds = df.groupBy("kind", "command_type").count().collect()
    ok = (F.col("kind") == "ROW") | ((F.col("kind") == "DDL")
                                      & (F.col("command_type") == "TRUNCATE TABLE"))
    for r in kinds:
        if not (r.kind == "ROW" or (r.kind == "DDL" and r.command_type == "TRUNCATE TABLE")):
            result.skipped[f"{r.kind} {r.command_type or ''}".strip()] = int(r["count"])
    rows = df.where(ok).persist()
    try:
        now = dt.datetime.now(dt.UTC)
        for (owner, table), (keys, cols) in sorted(table_columns(rows).items()):
            topic = E.topic(prefix, E.source_name(owner), E.source_name(table))
            mine = rows.where((F.col("object_owner") == owner) & (F.col("object_name") == table))
            lines = event_lines(mine, prefix, cols, keys, topic, schemas=schemas, now=now,
                                with_key=with_key)
            result.topics[topic] = write(lines, topic)
    finally:
        rows.unpersist()
    return result


def _write_topic(spark: SparkSession, lines: DataFrame, directory: str, topic: str) -> int:
    """Write lines as one ``<topic>+0+<offset>.json`` file after the topic's existing ones.

    The offset is the number of events exported to the topic before, as Kafka Connect
    names a file by the offset of its first record.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    Path = jvm.org.apache.hadoop.fs.Path
    staging = f"{directory.rstrip('/')}/_export_{uuid.uuid4().hex}"
    obs = Observation(f"export_{uuid.uuid4().hex}")
    lines.coalesce(1).observe(obs, F.count(F.lit(1)).alias("n")) \
        .write.option("compression", "none").text(staging)
    written = int(obs.get.get("n") or 0)
    hfs = Path(staging).getFileSystem(conf)
    target = Path(f"{directory.rstrip('/')}/{topic}")
    hfs.mkdirs(target)
    existing = [str(st.getPath().toString()) for st in hfs.listStatus(target)
                if str(st.getPath().getName()).startswith(f"{topic}+0+")]
    offset = spark.read.text(existing).count() if existing else 0
    parts = [st.getPath() for st in hfs.listStatus(Path(staging))
             if str(st.getPath().getName()).startswith("part-")]
    if written and parts:
        name = f"{topic}+0+{offset:010d}.json"
        hfs.rename(parts[0], Path(target, name))
        crc = Path(target, f".{name}.crc")  # the local file system's checksum, moved along
        if hfs.exists(crc):
            hfs.delete(crc, False)
    hfs.delete(Path(staging), True)
    return written
