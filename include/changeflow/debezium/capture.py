"""Capture from Debezium change-event files: the fourth capture source (SPEC §4).

One run, holding the capture's lease:

1. list the files matching the source's pattern; a file captured before is skipped
   (and refused if it changed since), a local file still being written (no final
   newline, modified in the last minute) waits for the next run;
2. survey the new files and check every record (:mod:`.reader`), so a bad file fails
   the run before anything is written;
3. turn the events into LCRs, keep commit positions rising (a transaction whose
   position is not above the last captured one, e.g. part of a transaction that
   arrived late in another topic's file, is renumbered after it, never dropped by an
   apply's high-water mark), filter them by the capture's rule sets, write one batch;
4. commit the batch, the files and the new position in one state-store transaction,
   under the dedup key ``dbzcapture:<name>:<digest of the files>``.

Entry point: :func:`run_debezium_capture`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from changeflow import fs, quality
from changeflow.config import CaptureSpec, PipelineConfig
from changeflow.debezium import convert, images, locate, onepass, reader
from changeflow.debezium import envelope as E
from changeflow.debezium.config import DebeziumSource
from changeflow.errors import ConfigError
from changeflow.pipeline import Pipeline, resolve
from changeflow.quality.batch import commit_capture
from changeflow.queues import arrow_io as qarrow
from changeflow.queues import io as qio
from changeflow.queues.model import NewBatch
from changeflow.sites import SiteRuntime
from changeflow.state import schema, utcnow
from changeflow.state.leases import Lease

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
CP = schema.capture_progress
POSITION = "debezium:position"
SETTLE_SECONDS = 60.0
#: Batches up to this size on disk are quality-checked in Arrow on the driver (about
#: ten times as many bytes in memory), larger ones by Spark jobs.
ARROW_CHECK_BYTES = 32 * 2**20


@dataclass
class DebeziumCaptureResult:
    """What one capture run did."""

    capture: str
    files: int = 0
    waiting_files: int = 0
    events: int = 0
    messages: int = 0
    batches: int = 0
    renumbered: bool = False
    passes: int = 0  # JSON passes over the files: 1 (typed by their first events) or more
    skipped: dict[str, int] = field(default_factory=dict)  # records that are no change
    last_position: int | None = None
    seconds: float = 0.0
    tables: list[str] = field(default_factory=list)


def debezium_source(spec: CaptureSpec) -> DebeziumSource:
    """The capture's Debezium source.

    Raises:
        ConfigError: the capture has another kind of source.
    """
    if not isinstance(spec.source, DebeziumSource):
        raise ConfigError(f"capture {spec.name!r} does not read Debezium files "
                          f"(its source is {spec.source.type})")
    return spec.source


def list_files(spark: SparkSession, source: DebeziumSource) -> list[tuple[str, int, float]]:
    """``(uri, size, mtime seconds)`` of every matching file under the root, in capture
    order: by directory (a topic), then name (Kafka Connect names files by offset)."""
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    root = jvm.org.apache.hadoop.fs.Path(source.root)
    hfs = root.getFileSystem(conf)
    if not hfs.exists(root):
        raise ConfigError(f"Debezium source root {source.root} does not exist")
    out = []
    it = hfs.listFiles(root, True)
    while it.hasNext():
        st = it.next()
        name = str(st.getPath().getName())
        if fnmatch.fnmatch(name, source.pattern) and not name.startswith((".", "_")):
            out.append((str(st.getPath().toString()), int(st.getLen()),
                        int(st.getModificationTime()) / 1000.0))
    return sorted(out, key=lambda f: (f[0].rsplit("/", 1)[0], f[0]))


def _writing(uri: str, mtime: float) -> bool:
    """A local file still being written: no final newline, touched within a minute."""
    path = uri.removeprefix("file:")
    if "://" in uri.removeprefix("file://") or not os.path.isfile(path):
        return False
    if time.time() - mtime > SETTLE_SECONDS:
        return False
    with open(path, "rb") as fh:
        fh.seek(max(0, os.path.getsize(path) - 1))
        return fh.read(1) not in (b"\n", b"")


def _recorded(rt: SiteRuntime, name: str) -> tuple[int | None, dict[str, int]]:
    with rt.store.read() as c:
        rows = c.execute(select(CP.c.source_object, CP.c.position, CP.c.commit_scn)
                         .where(CP.c.capture == name)).all()
    high = next((int(r.commit_scn) for r in rows if r.source_object == POSITION
                 and r.commit_scn is not None), None)
    files = {r.source_object[5:]: int(r.position) for r in rows
             if r.source_object.startswith("file:")}
    return high, files


def _record(conn: Any, name: str, files: list[tuple[str, int, float]], high: int | None) -> None:
    now = utcnow()
    for uri, size, _ in files:
        conn.execute(CP.insert().values(capture=name, source_object=f"file:{uri}",
                                        position=str(size), commit_scn=high, updated_at=now))
    if high is None:
        return
    key = (CP.c.capture == name) & (CP.c.source_object == POSITION)
    if conn.execute(select(CP.c.commit_scn).where(key)).first() is None:
        conn.execute(CP.insert().values(capture=name, source_object=POSITION, position=str(high),
                                        commit_scn=high, updated_at=now))
    else:
        conn.execute(CP.update().where(key).values(position=str(high), commit_scn=high,
                                                   updated_at=now))


def pending_files(spark: SparkSession, rt: SiteRuntime, spec: CaptureSpec
                  ) -> tuple[list[tuple[str, int, float]], int]:
    """The files a run captures, and how many wait because they are still being written.

    Raises:
        DebeziumFileError: a file captured before has changed since.
    """
    source = debezium_source(spec)
    _, done = _recorded(rt, spec.name)
    todo, waiting = [], 0
    for uri, size, mtime in list_files(spark, source):
        if uri in done:
            if done[uri] != size:
                raise reader.DebeziumFileError(
                    f"{uri}: changed after it was captured ({done[uri]} bytes then, {size} "
                    "now); change-event files must not change once written (a sink that "
                    "appends to one file, like FileStreamSink, must rotate files)")
            continue
        if _writing(uri, mtime):
            waiting += 1
            continue
        todo.append((uri, size, mtime))
    return todo, waiting


def renumber(spark: SparkSession, df: DataFrame, high: int) -> DataFrame:
    """Give every transaction a commit position above ``high``, keeping their order.

    Used only when some transaction's position is not above ``high`` (it arrived after
    later ones were captured): those come first, then the rest, each in position order.
    """
    from pyspark.sql import functions as F

    txns = df.select("commit_scn", "transaction_id").distinct().collect()
    order = sorted(txns, key=lambda r: (r.commit_scn > high, r.commit_scn, r.transaction_id))
    mapping = spark.createDataFrame(
        [(r.commit_scn, r.transaction_id, high + i) for i, r in enumerate(order, 1)],
        "old_scn bigint, old_txn string, new_scn bigint")
    joined = df.join(F.broadcast(mapping), (df.commit_scn == mapping.old_scn)
                     & (df.transaction_id == mapping.old_txn))
    return joined.select(*[F.col("new_scn").alias(c) if c == "commit_scn" else df[c]
                           for c in df.columns])


_VALUE_ERROR = re.compile(r"^(?P<file>.+?): (?P<label>[^:\s]+): value (?P<value>.*?)"
                          r"(?P<rest> is not a .*)$")


def value_error(spark: SparkSession | None, text: str) -> str | None:
    """The message of a value error raised inside the conversion job (None: not one):
    the file as a person names it, the line of the event, the column and the value."""
    if images.ERROR_PREFIX not in text:
        return None
    detail = text.split(images.ERROR_PREFIX, 1)[1].split("\n", 1)[0].strip().rstrip(".")
    m = _VALUE_ERROR.match(detail)
    if m is None:
        return detail
    line = locate.value_line(spark, m["file"], m["label"], m["value"])
    where = reader.short_name(m["file"]) + (f", line {line}" if line else "")
    return f"{where}: {m['label']}: value {m['value']}{m['rest']}"


def write_batch(spark: SparkSession, rt: SiteRuntime, queue: str, df: DataFrame, name: str,
                dedup: str, warm: bool, *, files: bool = True) -> NewBatch | None:
    """Write a capture's batch (not committed); a value that does not decode becomes a
    :class:`.reader.DebeziumFileError` naming it (with its file's line when ``files``:
    a Kafka record is named by topic, partition and offset instead)."""
    try:
        return qio.write_batch(spark, rt.catalog, queue, df, producer=f"capture:{name}",
                               dedup_key=dedup, warm_quality=warm)
    except Exception as exc:  # noqa: BLE001  (a value error raised inside the Spark job)
        message = value_error(spark if files else None, str(exc))
        if message is not None:
            raise reader.DebeziumFileError(message) from None
        raise


RuleFilter = Callable[["DataFrame"], "DataFrame"]
#: What a one pass returns when the two passes must take over.
MISS: Any = object()


def _one_pass(spark: SparkSession, rt: SiteRuntime, queue: str, spec: CaptureSpec,
              uris: list[str], high: int | None, result: DebeziumCaptureResult,
              rule_filter: RuleFilter | None, dedup: str, warm: bool) -> Any:
    """The files in one JSON pass, typed by their first events (:mod:`.onepass`).

    Returns the written (uncommitted) batch, or ``MISS`` when some event is not one
    the guess describes, a value does not decode or a position needs renumbering:
    what was written is deleted then, and the two passes take over.
    """
    source = debezium_source(spec)
    guess = onepass.guess(spark, uris, source)
    if guess is None:
        return MISS
    result.passes += 1
    events, obs = onepass.observed(reader.read_events(spark, uris, with_schemas=True),
                                   guess, source)
    df = convert.to_lcrs(events, source, guess.tables, by_txn=guess.by_txn)
    if rule_filter is not None:
        df = rule_filter(df)
    try:
        batch = write_batch(spark, rt, queue, df, spec.name, dedup, warm)
    except reader.DebeziumFileError:
        return MISS  # the two passes name the problem (or the value) exactly
    seen = obs.get
    lows = seen.get("min_scn")
    if seen.get("misses") or (high is not None and lows is not None and lows <= high):
        if batch is not None:
            fs.delete(spark, batch.path)
        log.info("capture %s: %s events not as the files' first events describe them; "
                 "surveying every event", spec.name, seen.get("misses"))
        return MISS
    result.tables = sorted(guess.tables)
    result.events += int(seen.get("events") or 0)
    result.skipped = {k: int(seen.get(f"skipped_{k}") or 0) for k in E.SKIPPED
                      if seen.get(f"skipped_{k}")}
    return batch


def _two_passes(spark: SparkSession, rt: SiteRuntime, queue: str, spec: CaptureSpec,
                uris: list[str], high: int | None, result: DebeziumCaptureResult,
                rule_filter: RuleFilter | None, dedup: str, warm: bool) -> Any:
    """Survey every event (pass 1), then convert them (pass 2); returns the batch."""
    source = debezium_source(spec)
    groups = reader.survey(reader.read_events(spark, uris, with_schemas=True))
    where = locate.group_locator(spark)
    reader.check_records(groups, where)
    tables = reader.column_types(groups, source, where)
    result.tables = sorted(tables)
    result.events += sum(g.count for g in groups if g.kind == "event")
    for g in groups:
        if g.kind in E.SKIPPED:
            result.skipped[g.kind] = result.skipped.get(g.kind, 0) + g.count
    by_txn = any(g.txn_fix for g in groups if g.kind == "event")
    df = convert.to_lcrs(reader.read_events(spark, uris, with_schemas=False), source, tables,
                         by_txn=by_txn)
    lows = [g.min_scn for g in groups if g.kind == "event" and g.min_scn is not None]
    if high is not None and lows and min(lows) <= high:
        log.warning("capture %s: transactions at or below the captured position %s arrived "
                    "late; they are renumbered after it", spec.name, high)
        df = renumber(spark, df, high)
        result.renumbered = True
    if rule_filter is not None:
        df = rule_filter(df)
    return write_batch(spark, rt, queue, df, spec.name, dedup, warm)


def check_quality(spark: SparkSession, cfg: PipelineConfig, spec: CaptureSpec, queue: str,
                  batch: NewBatch | None) -> quality.QualityReport | None:
    """The quality checks of the written batch (None: quality off, or no batch).

    A batch of up to :data:`ARROW_CHECK_BYTES` is read back with pyarrow on the driver
    and checked as the PostgreSQL capture checks its batches
    (:func:`quality.check_arrow_batch`: the same ``lcr_batch`` suite, and a batch that
    fails any check is checked again, reported and set aside by the Spark path);
    reading a small batch so costs far less than the Spark jobs of
    :func:`quality.check_batch`, which checks larger batches.
    """
    if batch is None or not cfg.quality.enabled:
        return None
    stage = f"capture:{spec.name}"
    if batch.n_bytes <= ARROW_CHECK_BYTES:
        table = qarrow.read_arrow_dir(batch.path,
                                      f"new batch {batch.batch_id} of queue {queue}")
        return quality.check_arrow_batch(spark, cfg, stage=stage, batch=batch,
                                         queue=spec.queue, table=table)
    return quality.check_batch(spark, cfg, stage=stage, batch=batch, queue=spec.queue)


def capture_files(spark: SparkSession, pipeline: PipelineConfig | Pipeline,
                  spec: CaptureSpec,
                  files: list[tuple[str, int, float]], result: DebeziumCaptureResult,
                  rule_filter: RuleFilter | None = None, lease: Lease | None = None) -> int:
    """Capture a list of files as one batch. Returns the messages enqueued."""
    pipe = resolve(pipeline)
    cfg = pipe.cfg
    handle = pipe.queue(spec.queue)
    rt, queue = handle.site, handle.name
    uris = [f[0] for f in files]
    dedup = "dbzcapture:{}:{}".format(spec.name, hashlib.sha256(
        "\n".join(uris).encode()).hexdigest()[:32])
    high, _ = _recorded(rt, spec.name)
    warm = cfg.quality.enabled
    batch = _one_pass(spark, rt, queue, spec, uris, high, result, rule_filter, dedup, warm)
    if batch is MISS:
        result.passes += 2
        batch = _two_passes(spark, rt, queue, spec, uris, high, result, rule_filter, dedup,
                            warm)
    report = check_quality(spark, cfg, spec, queue, batch)
    new_high = max(high or 0, batch.max_commit_scn or 0) if batch is not None else high

    def record(conn: Any) -> None:
        _record(conn, spec.name, files, new_high)
        result.last_position = new_high

    return commit_capture(spark, rt, queue, batch, report, lease, record)


def run_debezium_capture(spark: SparkSession, pipeline: PipelineConfig | Pipeline, name: str,
                         rule_filter: RuleFilter | None = None, *,
                         lease_wait: float = 0.0) -> DebeziumCaptureResult:
    """Capture every new change-event file of a Debezium source, as one batch.

    Raises:
        LeaseHeldError: another run of this capture is active (transient).
        DebeziumFileError: a file is not JSON, an event lacks ``op`` or does not match
            its table, a captured file changed (terminal; nothing is enqueued).
    """
    started = time.monotonic()
    pipe = resolve(pipeline).open()
    cfg = pipe.cfg
    spec: CaptureSpec = cfg.component("capture", name)
    rt = pipe.queue(spec.queue).site
    result = DebeziumCaptureResult(name)
    with Lease(rt.store, f"capture:{name}", wait=lease_wait) as lease:
        files, result.waiting_files = pending_files(spark, rt, spec)
        if files:
            result.files = len(files)
            result.messages = capture_files(spark, pipe, spec, files, result, rule_filter, lease)
            result.batches = 1 if result.messages else 0
    result.seconds = time.monotonic() - started
    log.info("capture %s: %s files, %s events, %s messages enqueued in %.1f s (%s JSON "
             "passes, %s waiting)", name, result.files, result.events, result.messages,
             result.seconds, result.passes, result.waiting_files)
    return result
