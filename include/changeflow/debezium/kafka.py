"""Capture from Kafka: Debezium change events in topics, exactly once into a queue.

One run, holding the capture's lease:

1. the next offset of every partition of the source's topics comes from the state
   store (``capture_progress``: ``kafka:<topic>:<partition>``; a partition never read
   starts at its earliest offset); the partitions' earliest and end offsets come from
   the broker (a ``KafkaConsumer`` of Spark's own kafka-clients, on the driver);
2. a stored offset below the earliest one (the records were deleted by retention or
   compacted away) or above the end (the topic was recreated) stops the run: a
   terminal :class:`KafkaOffsetsError` naming topic, partition and the offsets gone;
   nothing is skipped silently;
3. the records between the stored offsets and the end offsets are read with Spark's
   Kafka source (a batch read with explicit ``startingOffsets``/``endingOffsets``),
   each value parsed as the file capture parses a line (:mod:`.reader`: with or
   without schemas; a ``null`` value is a tombstone) and converted by the same code as
   files (:mod:`.convert`). **Once**, when the first record of each partition (fetched
   on the driver, :func:`head_records`) describes every record, checked in the same
   job (:mod:`.onepass`); otherwise (a schema change within the range, a record that
   is not an event ...) that batch is dropped, and every record is surveyed and
   checked, then converted (two more reads). An error names topic, partition and
   offset of the record;
4. one state-store transaction commits the batch (dedup key
   ``kafkacapture:<name>:<digest of the start offsets>``) and the new offsets: a run
   killed before it leaves nothing (the next run reads the same records and writes
   the same batch), one killed after it has committed both.

Transactions: PostgreSQL events carry ``source.txId``, which groups them (see
:func:`.convert.transaction_of`); the transaction metadata topic's BEGIN/END events
are skipped and counted. Events without a transaction id are each a transaction of
their own (``dbz:<position>``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from changeflow import faults, fs
from changeflow.config import CaptureSpec, PipelineConfig
from changeflow.debezium import convert, onepass, reader
from changeflow.debezium import envelope as E
from changeflow.debezium.capture import (
    MISS,
    RuleFilter,
    check_quality,
    write_batch,
)
from changeflow.debezium.config import KafkaSource
from changeflow.errors import ConfigError, TerminalError
from changeflow.pipeline import Pipeline, resolve
from changeflow.quality.batch import commit_capture
from changeflow.state import schema, utcnow
from changeflow.state.leases import Lease

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
CP = schema.capture_progress
PREFIX = "kafka:"


class KafkaOffsetsError(TerminalError):
    """Records a capture has not read are gone from Kafka (or the topic was recreated)."""


@dataclass
class KafkaCaptureResult:
    """What one Kafka capture run did."""

    capture: str
    records: int = 0
    events: int = 0
    messages: int = 0
    batches: int = 0
    passes: int = 0  # reads of the records: 1 (typed by first records) or 2
    skipped: dict[str, int] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next
    seconds: float = 0.0


def kafka_source(spec: CaptureSpec) -> KafkaSource:
    """The capture's Kafka source.

    Raises:
        ConfigError: the capture has another kind of source.
    """
    if not isinstance(spec.source, KafkaSource):
        raise ConfigError(f"capture {spec.name!r} does not read Kafka "
                          f"(its source is {spec.source.type})")
    return spec.source


def _consumer(jvm: Any, source: KafkaSource, settings: dict[str, str]) -> Any:
    """A ``KafkaConsumer`` of Spark's kafka-clients on the driver (byte values, no
    auto-commit), with the source's options."""
    props = jvm.java.util.Properties()
    for k, v in {"bootstrap.servers": source.bootstrap_servers, "enable.auto.commit": "false",
                 **settings, **source.options}.items():
        props.put(k, v)
    des = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
    props.put("key.deserializer", des)
    props.put("value.deserializer", des)
    return jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)


def broker_offsets(spark: SparkSession, source: KafkaSource
                   ) -> dict[tuple[str, int], tuple[int, int]]:
    """``(topic, partition) -> (earliest, end)`` offsets, asked of the broker."""
    jvm: Any = spark.sparkContext._jvm
    consumer = _consumer(jvm, source, {"group.id": "changeflow-probe"})
    try:
        parts = jvm.java.util.ArrayList()
        for topic in source.topics:
            infos = consumer.partitionsFor(topic, jvm.java.time.Duration.ofSeconds(30))
            for i in range(infos.size() if infos is not None else 0):
                parts.add(jvm.org.apache.kafka.common.TopicPartition(
                    topic, infos.get(i).partition()))
        timeout = jvm.java.time.Duration.ofSeconds(30)
        first = consumer.beginningOffsets(parts, timeout)
        end = consumer.endOffsets(parts, timeout)
        return {(str(p.topic()), int(p.partition())): (int(first.get(p)), int(end.get(p)))
                for p in parts}
    finally:
        consumer.close()


def stored_offsets(rt: Any, name: str) -> dict[tuple[str, int], int]:
    """The next offset of each partition the capture has read, from the state store."""
    with rt.store.read() as c:
        rows = c.execute(select(CP.c.source_object, CP.c.position)
                         .where(CP.c.capture == name,
                                CP.c.source_object.like(f"{PREFIX}%"))).all()
    out = {}
    for r in rows:
        topic, part = r.source_object[len(PREFIX):].rsplit(":", 1)
        out[(topic, int(part))] = int(r.position)
    return out


def plan(stored: dict[tuple[str, int], int], broker: dict[tuple[str, int], tuple[int, int]]
         ) -> dict[tuple[str, int], tuple[int, int]]:
    """The ``[start, end)`` offsets a run reads, per partition with new records.

    Raises:
        KafkaOffsetsError: a partition's next offset is below its earliest (records
            deleted or compacted away before they were captured) or above its end.

    >>> plan({("t", 0): 5}, {("t", 0): (0, 9), ("t", 1): (2, 4)})
    {('t', 0): (5, 9), ('t', 1): (2, 4)}
    """
    out = {}
    for (topic, part), (first, end) in sorted(broker.items()):
        start = stored.get((topic, part), first)
        if start < first:
            raise KafkaOffsetsError(
                f"topic {topic} partition {part}: offsets {start} to {first - 1} are gone "
                f"(deleted by retention or compacted) before this capture read them; the "
                f"earliest offset is now {first}. Nothing was skipped: re-snapshot the "
                "tables (or, accepting the loss, store the earliest offset) to go on")
        if start > end:
            raise KafkaOffsetsError(
                f"topic {topic} partition {part}: the capture read up to offset {start} but "
                f"the partition ends at {end} (the topic was deleted and recreated?)")
        if end > start:
            out[(topic, part)] = (start, end)
    return out


def _offsets_json(ranges: dict[tuple[str, int], tuple[int, int]], which: int) -> str:
    by_topic: dict[str, dict[str, int]] = {}
    for (topic, part), bounds in ranges.items():
        by_topic.setdefault(topic, {})[str(part)] = bounds[which]
    return json.dumps(by_topic)


def read_records(spark: SparkSession, source: KafkaSource,
                 ranges: dict[tuple[str, int], tuple[int, int]]) -> DataFrame:
    """The records of ``ranges`` as :func:`.reader.read_events` gives a file's lines:
    ``e``, ``file`` (``topic <t> partition <p> offset <o>``, named in errors), the
    corrupt text and the ``schema`` block. A ``null`` value is a tombstone."""
    from pyspark.sql import functions as F

    reader_opts = {f"kafka.{k}": v for k, v in source.options.items()}
    raw = (spark.read.format("kafka").options(**reader_opts)
           .option("kafka.bootstrap.servers", source.bootstrap_servers)
           .option("assign", json.dumps({t: sorted(p for (tt, p) in ranges if tt == t)
                                         for t in {t for t, _ in ranges}}))
           .option("startingOffsets", _offsets_json(ranges, 0))
           .option("endingOffsets", _offsets_json(ranges, 1))
           .option("failOnDataLoss", "true").load())
    text = F.col("value").cast("string")
    parsed = raw.select(
        F.from_json(text, reader.read_schema(True), {
            "mode": "PERMISSIVE", "columnNameOfCorruptRecord": reader.CORRUPT}).alias("j"),
        F.format_string("topic %s partition %d offset %d", "topic", "partition",
                        "offset").alias("cf_where"),
        text.isNull().alias("cf_tombstone"))
    flat = parsed.select("j.*", "cf_where", "cf_tombstone").withColumn(
        reader.CORRUPT, F.when(F.col("cf_tombstone"), F.lit("null"))
        .otherwise(F.col(reader.CORRUPT)))
    return reader.envelope_columns(flat, F.col("cf_where"), with_schemas=True)


def _record(conn: Any, name: str, ranges: dict[tuple[str, int], tuple[int, int]]) -> None:
    now = utcnow()
    for (topic, part), (_, end) in ranges.items():
        key = (CP.c.capture == name) & (CP.c.source_object == f"{PREFIX}{topic}:{part}")
        if conn.execute(select(CP.c.position).where(key)).first() is None:
            conn.execute(CP.insert().values(capture=name, source_object=f"{PREFIX}{topic}:{part}",
                                            position=str(end), updated_at=now))
        else:
            conn.execute(CP.update().where(key).values(position=str(end), updated_at=now))


def head_records(spark: SparkSession, source: KafkaSource,
                 ranges: dict[tuple[str, int], tuple[int, int]], timeout: float = 30.0
                 ) -> list[tuple[str, str]]:
    """``(where, value)`` of the first record of each range that is not a tombstone,
    fetched by one consumer on the driver (no Spark job): what a guess reads."""
    jvm: Any = spark.sparkContext._jvm
    consumer = _consumer(jvm, source, {"group.id": "changeflow-head", "max.poll.records": "16"})
    out: list[tuple[str, str]] = []
    try:
        tps = {(t, p): jvm.org.apache.kafka.common.TopicPartition(t, p) for t, p in ranges}
        parts = jvm.java.util.ArrayList()
        for tp in tps.values():
            parts.add(tp)
        consumer.assign(parts)
        for key, tp in tps.items():
            consumer.seek(tp, ranges[key][0])
        todo = set(ranges)
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            polled = consumer.poll(jvm.java.time.Duration.ofMillis(500))
            for key in sorted(todo):
                recs = polled.records(tps[key])
                if recs.isEmpty():
                    continue
                for i in range(recs.size()):
                    rec = recs.get(i)
                    if int(rec.offset()) >= ranges[key][1]:
                        todo.discard(key)
                        break
                    value = rec.value()
                    text = None if value is None else bytes(value).decode("utf-8", "replace")
                    if text is not None and text.strip() != "null":  # not a tombstone
                        out.append((f"topic {key[0]} partition {key[1]} offset "
                                    f"{int(rec.offset())}", text))
                        todo.discard(key)
                        break
                if key not in todo:
                    done = jvm.java.util.ArrayList()
                    done.add(tps[key])
                    consumer.pause(done)
        return out
    finally:
        consumer.close()


def _survey(groups: list[reader.SurveyGroup], result: KafkaCaptureResult) -> None:
    result.records = sum(g.count for g in groups)
    result.events = sum(g.count for g in groups if g.kind == "event")
    for g in groups:
        if g.kind in E.SKIPPED:
            result.skipped[g.kind] = result.skipped.get(g.kind, 0) + g.count


def _one_pass(spark: SparkSession, source: KafkaSource, ranges: Any, write: Any,
              rule_filter: RuleFilter | None, result: KafkaCaptureResult) -> Any:
    """The ranges read once, typed by each partition's first record (:mod:`.onepass`):
    the written (uncommitted) batch, or ``MISS`` (some record is not one the guess
    describes, or a value does not decode; the written batch is deleted and the survey
    and conversion passes take over, reporting any problem as they always have)."""
    events = source.as_events()
    guess = onepass.guess_from(onepass.head_groups(head_records(spark, source, ranges)),
                               events)
    if guess is None:
        return MISS
    result.passes += 1
    df, obs = onepass.observed(read_records(spark, source, ranges), guess, events)
    df = convert.to_lcrs(df, events, guess.tables, by_txn=guess.by_txn)
    if rule_filter is not None:
        df = rule_filter(df)
    try:
        batch = write(df)
    except reader.DebeziumFileError:
        return MISS
    seen = obs.get
    if seen.get("misses"):
        if batch is not None:
            fs.delete(spark, batch.path)
        log.info("capture %s: %s records not as their partitions' first records describe "
                 "them; surveying every record", result.capture, seen.get("misses"))
        return MISS
    result.events = int(seen.get("events") or 0)
    result.skipped = {k: int(seen.get(f"skipped_{k}") or 0) for k in E.SKIPPED
                      if seen.get(f"skipped_{k}")}
    result.records = result.events + sum(result.skipped.values())
    return batch


def _two_passes(spark: SparkSession, source: KafkaSource, ranges: Any, write: Any,
                rule_filter: RuleFilter | None, result: KafkaCaptureResult) -> Any:
    """Survey the records (every problem found before anything is written), then
    convert the captured tables' events into LCRs and write them."""
    events = source.as_events()
    groups = reader.survey(read_records(spark, source, ranges))
    reader.check_records(groups)
    tables = reader.column_types(groups, events)
    _survey(groups, result)
    result.passes += 2
    by_txn = any(g.txn_fix for g in groups if g.kind == "event")
    df = convert.to_lcrs(read_records(spark, source, ranges), events, tables, by_txn=by_txn)
    if rule_filter is not None:
        df = rule_filter(df)
    return write(df)


def capture_ranges(spark: SparkSession, pipeline: PipelineConfig | Pipeline,
                   spec: CaptureSpec,
                   ranges: dict[tuple[str, int], tuple[int, int]], result: KafkaCaptureResult,
                   rule_filter: RuleFilter | None = None, lease: Lease | None = None) -> int:
    """Capture the records of ``ranges`` as one batch, committed with the new offsets."""
    source = kafka_source(spec)
    pipe = resolve(pipeline)
    cfg = pipe.cfg
    handle = pipe.queue(spec.queue)
    rt, queue = handle.site, handle.name
    dedup = "kafkacapture:{}:{}".format(spec.name, hashlib.sha256(
        _offsets_json(ranges, 0).encode()).hexdigest()[:32])

    def write(df: DataFrame) -> Any:
        return write_batch(spark, rt, queue, df, spec.name, dedup, cfg.quality.enabled,
                           files=False)

    batch = _one_pass(spark, source, ranges, write, rule_filter, result)
    if batch is MISS:
        batch = _two_passes(spark, source, ranges, write, rule_filter, result)
    report = check_quality(spark, cfg, spec, queue, batch)  # type: ignore[arg-type]
    faults.point("capture.before_commit")
    return commit_capture(spark, rt, queue, batch, report, lease,
                          lambda conn: _record(conn, spec.name, ranges))


def run_kafka_capture(spark: SparkSession, pipeline: PipelineConfig | Pipeline, name: str,
                      rule_filter: RuleFilter | None = None, *,
                      lease_wait: float = 0.0) -> KafkaCaptureResult:
    """Capture every new record of a Kafka source's topics, as one batch.

    Raises:
        LeaseHeldError: another run of this capture is active (transient).
        KafkaOffsetsError: records not yet captured are gone (terminal).
        DebeziumFileError: a record is not a change event, breaks its table, or a value
            does not decode; the error names topic, partition and offset (terminal;
            nothing is enqueued, no offset moves).
    """
    started = time.monotonic()
    pipe = resolve(pipeline).open()
    cfg = pipe.cfg
    spec: CaptureSpec = cfg.component("capture", name)
    source = kafka_source(spec)
    rt = pipe.queue(spec.queue).site
    result = KafkaCaptureResult(name)
    with Lease(rt.store, f"capture:{name}", wait=lease_wait) as lease:
        ranges = plan(stored_offsets(rt, name), broker_offsets(spark, source))
        if ranges:
            result.messages = capture_ranges(spark, pipe, spec, ranges, result, rule_filter,
                                             lease)
            result.batches = 1 if result.messages else 0
        result.offsets = {f"{t}:{p}": o for (t, p), o in stored_offsets(rt, name).items()}
    result.seconds = time.monotonic() - started
    log.info("capture %s: %s records, %s events, %s messages enqueued in %.1f s", name,
             result.records, result.events, result.messages, result.seconds)
    return result
