"""Capture from PostgreSQL logical decoding: the analogue of Oracle's redo-log capture.

A capture owns one logical replication slot using the wal2json output plugin (format
version 2; ``docs/postgres.md`` explains the choice). One run repeats:

1. *peek* up to ``batch_changes`` changes from the slot (whole transactions only);
2. turn them into row LCRs (DDL LCRs for TRUNCATE) with pyarrow, dropping the
   transactions an apply made (they carry a replication origin, i.e. a tag) unless
   ``include_tagged_lcr`` is set, and filtering by the capture's rule sets;
3. write a queue batch and commit it under the dedup key
   ``pgcapture:<name>:<end lsn>`` *together with* the capture's position (the end LSN
   of the last transaction) in one state-store transaction;
4. only then advance the slot (``pg_replication_slot_advance``); reading a copy of
   the slot (the read-ahead or a stream), at most every ``ADVANCE_EVERY`` seconds and
   at the end of the run, since the copy, not the slot, is what is read.

A crash before 3 re-reads the same changes; a crash between 3 and 4 leaves the slot
behind the recorded position, and the next run first advances the slot to it and
drops any transaction at or below it. Nothing is lost and nothing enqueued twice.

Entry point: :func:`run_pg_capture`.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from changeflow import arrowpool, faults
from changeflow.capture import pg_arrow, pg_decode, pg_lcr
from changeflow.capture.pg_prefetch import SlotPrefetch, open_prefetch
from changeflow.capture.pg_source import SlotReader
from changeflow.capture.pg_stream import SlotStream, StreamError, open_stream
from changeflow.config import CaptureSpec, PipelineConfig, PostgresSource
from changeflow.errors import ConfigError
from changeflow.pgconn import connect, int_to_lsn, resolve_url
from changeflow.pipeline import Pipeline, resolve
from changeflow.queues import arrow_io
from changeflow.queues.catalog import NewBatch
from changeflow.sites import SiteRuntime
from changeflow.state import schema, utcnow
from changeflow.state.leases import Lease

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
RuleFilter = Callable[["DataFrame"], "DataFrame"]
# Reading a copy of its slot (stream or read-ahead), a capture advances the slot itself
# at most this often, and at the end of the run (SlotReader.advance_soon).
ADVANCE_EVERY = 10.0
CP = schema.capture_progress


@dataclass
class PgCaptureResult:
    """What one capture run did."""

    capture: str
    batches: int = 0
    messages: int = 0
    transactions: int = 0
    tagged_skipped: int = 0
    streamed: int = 0  # batches read from a replication stream (the rest were peeked)
    prefetched: int = 0  # batches read ahead from a temporary copy of the slot
    last_lsn: str | None = None
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Messages enqueued per second of the run."""
        return self.messages / self.seconds if self.seconds else 0.0


def pg_source(spec: CaptureSpec) -> PostgresSource:
    """The capture's PostgreSQL source.

    Raises:
        ConfigError: the capture has another kind of source.
    """
    if not isinstance(spec.source, PostgresSource):
        raise ConfigError(f"capture {spec.name!r} does not have a postgres source")
    return spec.source


def _progress_key(spec: CaptureSpec) -> tuple[str, str]:
    return spec.name, f"slot:{pg_source(spec).slot}"


def recorded_position(rt: SiteRuntime, spec: CaptureSpec) -> int | None:
    """The end LSN (as an integer) of the last transaction this capture enqueued."""
    name, obj = _progress_key(spec)
    with rt.store.read() as c:
        value = c.execute(
            select(CP.c.commit_scn).where(CP.c.capture == name, CP.c.source_object == obj)
        ).scalar_one_or_none()
    return int(value) if value is not None else None


def _record_position(conn: Any, spec: CaptureSpec, lsn: int) -> None:
    name, obj = _progress_key(spec)
    key = (CP.c.capture == name) & (CP.c.source_object == obj)
    vals = {"position": int_to_lsn(lsn), "commit_scn": lsn, "updated_at": utcnow()}
    row = conn.execute(select(CP.c.commit_scn).where(key)).first()
    if row is None:
        conn.execute(CP.insert().values(capture=name, source_object=obj, **vals))
    elif int(row[0]) < lsn:
        conn.execute(CP.update().where(key).values(**vals))


def _filter(
    spark: SparkSession | None, table: pa.Table, rule_filter: RuleFilter | None
) -> pa.Table:
    """The captured rows that pass the capture's rule sets.

    Simple rule sets (system-created global, schema and table rules) are decided over
    Arrow without a JVM round trip; others run in Spark.
    """
    if rule_filter is None or table.num_rows == 0:
        return table
    from changeflow.rules.arrow_filter import filter_for_client

    kept = filter_for_client(rule_filter, table)
    if kept is not None:
        return kept
    if spark is None:
        raise ConfigError("a capture with rule sets needs a SparkSession (rules run in Spark)")
    from changeflow import lcr

    df = spark.createDataFrame(table, schema=lcr.spark_schema())
    return rule_filter(df).toArrow()


BatchCheck = Callable[[NewBatch, "pa.Table"], object]


def _quality_check(
    spark: SparkSession | None, pipe: Pipeline, spec: CaptureSpec
) -> BatchCheck | None:
    """The quality check of captured batches (none without a session).

    Checked on the batch's Arrow table in memory; a batch that fails is checked
    again, and reported, by the Spark path (:func:`quality.check_arrow_batch`).
    """
    if spark is None or not pipe.cfg.quality.enabled:
        return None
    from changeflow import quality

    def check(batch: NewBatch, table: pa.Table) -> object:
        return quality.check_arrow_batch(spark, pipe, stage=f"capture:{spec.name}",
                                         batch=batch, queue=spec.queue, table=table)

    return check


def _enqueue(
    rt: SiteRuntime, queue: str, spec: CaptureSpec, table: pa.Table, last_lsn: int,
    check: BatchCheck | None = None, lease: Lease | None = None,
) -> int:
    """Write, check and commit one batch with the capture position. Returns messages enqueued."""
    dedup = f"pgcapture:{spec.name}:{int_to_lsn(last_lsn)}"
    if table.num_rows:
        table = arrow_io.conform_arrow(table, origin=f"capture {spec.name}")
    batch = arrow_io.write_arrow_batch(rt.catalog, queue, table, producer=f"capture:{spec.name}",
                                       dedup_key=dedup)
    report = None
    if check is not None and batch is not None:
        report = check(batch, table)  # quality checks on the written, not yet visible batch
    from changeflow import quality

    with rt.store.begin() as conn:
        if lease is not None:
            lease.check(conn)
        seq = None
        if batch is not None:
            seq = rt.catalog.commit_batch(queue, batch, conn,
                                          state=quality.state_of(report))  # type: ignore[arg-type]
        failed = quality.set_aside(rt, queue, report, seq, conn)  # type: ignore[arg-type]
        _record_position(conn, spec, last_lsn)
    faults.point("capture.after_commit")
    if failed is not None:
        raise failed
    if batch is not None and seq is None:
        log.info("capture %s: batch %s was enqueued before; dropping the copy", spec.name, dedup)
        arrow_io.delete_batch_files(batch.path)
        return 0
    return batch.n_messages if batch is not None else 0


def capture_step(
    reader: SlotReader,
    rt: SiteRuntime,
    queue: str,
    spec: CaptureSpec,
    result: PgCaptureResult,
    *,
    spark: SparkSession | None = None,
    rule_filter: RuleFilter | None = None,
    check: BatchCheck | None = None,
    lease: Lease | None = None,
    rows: pg_decode.Peek | None = None,
) -> int:
    """Peek (or take the stream's next chunk), enqueue and acknowledge one batch.

    Returns how many rows the slot gave.
    """
    src = pg_source(spec)
    copied = rows is not None
    if rows is None:
        reader.flush_advance()  # a peek reads from where the slot stands
        rows = reader.peek(src.batch_changes)
    if not rows.rows:
        return 0
    # Decoding builds millions of small objects that all live until the batch is
    # written; the cyclic GC would rescan them over and over for nothing.
    gc.disable()
    try:
        return _capture_rows(reader, rt, queue, spec, result, rows, spark, rule_filter, check,
                             lease, copied)
    finally:
        gc.enable()


def _capture_rows(
    reader: SlotReader, rt: SiteRuntime, queue: str, spec: CaptureSpec,
    result: PgCaptureResult, rows: pg_decode.Peek,
    spark: SparkSession | None, rule_filter: RuleFilter | None, check: BatchCheck | None = None,
    lease: Lease | None = None, copied: bool = False,
) -> int:
    src = pg_source(spec)
    done = recorded_position(rt, spec) or 0
    fast = pg_arrow.build(rows, rows.docs if rows.docs is not None else
                          pg_arrow.parse(rows.text), pg_arrow.Source(
                              src.database, reader.key_columns, reader.tag,
                              reader.origin_source, src.include_tagged_lcr), done)
    if fast is not None:
        table, last = fast.table, fast.last
        result.transactions += fast.transactions
        result.tagged_skipped += fast.tagged_skipped
    else:
        table, last = _decoded(reader, src, result, rows, done)
    if last > done:
        assert table is not None
        table = _filter(spark, table, rule_filter)
        result.messages += _enqueue(rt, queue, spec, table, last, check, lease)
        result.batches += 1
        result.last_lsn = int_to_lsn(last)
    if copied:  # read from a copy: the slot itself only holds WAL back
        reader.advance_soon(last, ADVANCE_EVERY)
    else:
        reader.advance(last)
    return rows.rows


def _decoded(reader: SlotReader, src: PostgresSource, result: PgCaptureResult,
             rows: pg_decode.Peek, done: int) -> tuple[pa.Table | None, int]:
    """``(LCRs, end LSN of the last transaction)`` through Python objects: the path
    for what :mod:`.pg_arrow` leaves (and the one that raises decoding errors)."""
    builder = pg_lcr.LcrBuilder(src.database, reader.key_columns)
    last = done
    for txn in pg_decode.transactions(rows):
        if txn.end_lsn <= done:
            continue
        last = txn.end_lsn
        tag = reader.tag(txn.origin)
        if tag is not None and not src.include_tagged_lcr:
            result.tagged_skipped += 1
            continue
        builder.add(txn, tag, reader.origin_source(txn.origin) if tag is not None else None)
        result.transactions += 1
    return (builder.to_arrow() if last > done else None), last


def _stream(reader: SlotReader, url: str, name: str, follow: bool) -> SlotStream | None:
    """A replication stream of the slot from where it stands (None: peek instead).

    Not following, it ends at the WAL position of now: what was committed before the
    run starts is captured; later changes are left to the next run.
    """
    end = None if follow else reader.current_lsn()
    return open_stream(url, reader.source.slot, reader.options(),
                       batch_rows=reader.source.batch_changes, end_lsn=end, capture=name)


def _next_rows(stream: SlotStream | SlotPrefetch | None, name: str, wait: float
               ) -> tuple[pg_decode.Peek | None, SlotStream | SlotPrefetch | None, bool]:
    """``(chunk, stream, ended)``: the stream's next chunk, or ``None`` to peek.

    A stream that fails is closed and the capture goes on peeking: the slot stands
    where the last committed batch left it, so nothing is skipped.
    """
    if stream is None:
        return None, None, False
    try:
        rows = stream.next(timeout=wait if stream.end_lsn is None else None)
    except StreamError as exc:
        log.warning("capture %s: %s; reading the slot with peeks from its position", name,
                    exc)
        stream.close()
        return None, None, False
    return rows, stream, rows is None


def run_pg_capture(
    spark: SparkSession | None,
    cfg: PipelineConfig | Pipeline,
    name: str,
    *,
    rule_filter: RuleFilter | None = None,
    follow: bool = False,
    max_seconds: float | None = None,
    max_batches: int | None = None,
    poll_interval: float = 0.5,
    connect_attempts: int = 5,
    busy_wait: float = 30.0,
    stream_changes: bool = False,
    read_ahead: bool = True,
) -> PgCaptureResult:
    """Capture from a PostgreSQL slot into the capture's queue.

    Args:
        spark: needed only when ``rule_filter`` is given (rules compile to Spark).
        cfg: the pipeline (or the run's resolved one); ``name`` must be a capture with a
            ``postgres`` source.
        rule_filter: the capture's rule sets, e.g. ``RuleSetPair.filter``.
        follow: keep polling when the slot is drained (until ``max_seconds``); otherwise
            return as soon as the slot has nothing more.
        max_seconds: stop after this long.
        max_batches: stop after this many batches.
        poll_interval: the wait between polls of a drained slot in ``follow`` mode.
        connect_attempts: connection attempts before :class:`SourceUnreachableError`.
        busy_wait: how long to wait for a slot another capture holds.
        stream_changes: read the slot through a replication stream of a temporary
            copy (:mod:`.pg_stream`), so the server decodes while batches are written
            (worth it when the source server has its own CPUs; on the 2-core benchmark
            machine, saturated, it measured slower than peeking: see
            ``docs/postgres.md``). Default, or when streaming is not possible: peek
            batch by batch. Either way the slot is advanced only after each batch is
            committed.

    Raises:
        SourceUnreachableError: the database is unreachable (transient).
        SlotBusyError: another capture holds the slot (transient).
        SlotMissingError, SlotAheadError, TableWithoutKeyError, UnsupportedTypeError:
            terminal errors with guidance in their message.
    """
    started = time.monotonic()
    arrowpool.use_jemalloc()
    pipe = resolve(cfg).open()
    spec: CaptureSpec = pipe.cfg.component("capture", name)
    source = pg_source(spec)
    rt, queue = pipe.queue(spec.queue).site, pipe.queue(spec.queue).name
    result = PgCaptureResult(name)
    url = resolve_url(source)
    with Lease(rt.store, f"capture:{name}", wait=busy_wait) as lease, connect(
            url, application_name=f"changeflow-capture-{name}",
            attempts=connect_attempts) as conn:
        reader = SlotReader(conn, source, name)
        reader.lock(busy_wait)
        reader.open(recorded_position(rt, spec))
        stream: SlotStream | SlotPrefetch | None = None
        if stream_changes:
            stream = _stream(reader, url, name, follow)
        elif read_ahead:
            stream = open_prefetch(url, source.slot, reader.options(),
                                   batch_rows=source.batch_changes, follow=follow,
                                   poll=poll_interval, capture=name)
        try:
            while max_batches is None or result.batches < max_batches:
                rows, stream, ended = _next_rows(stream, name, poll_interval)
                if ended:  # the stream has delivered everything before the run
                    break
                if rows is not None and rows.rows > 0:
                    if isinstance(stream, SlotPrefetch):
                        result.prefetched += 1
                    else:
                        result.streamed += 1
                n = capture_step(reader, rt, queue, spec, result, spark=spark,
                                 rule_filter=rule_filter,
                                 check=_quality_check(spark, pipe, spec), lease=lease,
                                 rows=rows)
                elapsed = time.monotonic() - started
                if max_seconds is not None and elapsed >= max_seconds:
                    break
                if n == 0:
                    if not follow:
                        break
                    if stream is None:
                        time.sleep(poll_interval)
        finally:
            if stream is not None:
                stream.close()
        reader.flush_advance()
    result.seconds = time.monotonic() - started
    log.info("capture %s: %s messages in %s batches (%.0f/s), last lsn %s", name,
             result.messages, result.batches, result.rate, result.last_lsn)
    return result
