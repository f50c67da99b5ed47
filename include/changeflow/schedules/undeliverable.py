"""Marking messages UNDELIVERABLE: errors that retrying cannot fix (seed 002).

When a propagation fails with an application error (the destination queue does not
exist or was dropped, the payload does not match the queue's type, the privilege is
missing) its pending source batches are copied, byte for byte, into the source
queue's *exception queue*
(``<owner>.aq$_<queue>_e``, after Oracle's ``AQ$_<queue_table>_E``), recorded in
``cf_undeliverable`` with the error, and acknowledged at the source, so the schedule
moves on instead of burning its 16 retries. The files are copied, not moved: other
consumers of the source queue still read them. The copy is committed with a dedup
key per source batch, so a crash and a second attempt copy nothing twice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from changeflow.config import PipelineConfig
from changeflow.errors import (
    LeaseHeldError,
    PayloadTypeError,
    QueueDataError,
    QueueNotFoundError,
    RangeConflictError,
    SchemaMismatchError,
    SecurityError,
    is_transient,
)
from changeflow.queues.catalog import NewBatch
from changeflow.sites import consumer_name, queue_site

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changeflow.schedules.store import ScheduleStore

log = logging.getLogger(__name__)

#: Errors about the destination that mark the messages UNDELIVERABLE instead of being retried.
UNDELIVERABLE_ERRORS: tuple[type[Exception], ...] = (
    QueueNotFoundError, PayloadTypeError, SecurityError)
#: Errors about one source batch: that batch is set aside, the rest flows.
BAD_BATCH_ERRORS: tuple[type[Exception], ...] = (QueueDataError, SchemaMismatchError)
#: Another run is at work (or just was): not a failure, the next pass retries.
BUSY_ERRORS: tuple[type[Exception], ...] = (LeaseHeldError, RangeConflictError)


def disposition(exc: BaseException) -> str:
    """What a window does about a failed pass.

    Returns:
        ``busy`` (another run holds the propagation: wait, no failure counted),
        ``quality`` (the batch was committed set aside: alert, go on),
        ``bad_batch`` (set the named source batch aside, go on),
        ``undeliverable`` (mark the pending messages UNDELIVERABLE),
        ``retry`` (a transient failure: count it and back off) or
        ``fail`` (a terminal error no message can fix, such as a bad configuration:
        count it, so the schedule backs off and finally disables itself).

    >>> disposition(QueueNotFoundError("gone"))
    'undeliverable'
    >>> disposition(TimeoutError())
    'retry'
    """
    from changeflow.quality.policy import QualityError

    if isinstance(exc, BUSY_ERRORS):
        return "busy"
    if isinstance(exc, QualityError):
        return "quality"
    if isinstance(exc, UNDELIVERABLE_ERRORS):
        return "undeliverable"
    if isinstance(exc, BAD_BATCH_ERRORS):
        return "bad_batch"
    return "retry" if is_transient(exc) else "fail"


def is_undeliverable(exc: BaseException) -> bool:
    """Whether an error means the messages can never be delivered as they are."""
    return disposition(exc) == "undeliverable"


def set_aside_bad_batch(cfg: PipelineConfig, name: str, error: BaseException) -> int | None:
    """Quarantine the source batch an error names. Returns its sequence number, if found."""
    from changeflow.queues.quarantine import quarantine

    spec = cfg.component("propagation", name)
    rt, src_q = queue_site(cfg, spec.source_queue)
    text = str(error)
    for b in rt.catalog.pending(src_q, consumer_name("propagation", name)):
        if (b.path and b.path in text) or f"batch {b.seq} of queue" in text:
            quarantine(rt.catalog, src_q, b.seq, f"propagation {name}: {error}"[:4000],
                       origin=f"propagation:{name}")
            log.error("propagation %s: source batch %s of %s set aside: %s", name, b.seq,
                      src_q, error)
            return b.seq
    return None


def exception_queue(queue: str) -> str:
    """The exception queue of a queue.

    >>> exception_queue("strmadmin.streams_queue")
    'strmadmin.aq$_streams_queue_e'
    """
    owner, name = queue.lower().split(".", 1)
    return f"{owner}.aq$_{name}_e"


def _copy_tree(spark: SparkSession, src: str, dst: str) -> None:
    jvm: Any = spark.sparkContext._jvm  # type: ignore[attr-defined]
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    sp, dp = jvm.org.apache.hadoop.fs.Path(src), jvm.org.apache.hadoop.fs.Path(dst)
    jvm.org.apache.hadoop.fs.FileUtil.copy(
        sp.getFileSystem(conf), sp, dp.getFileSystem(conf), dp, False, conf)


def mark_undeliverable(spark: SparkSession, cfg: PipelineConfig, name: str,
                       error: BaseException, schedules: ScheduleStore) -> int:
    """Move a propagation's pending batches to the exception queue. Returns messages.

    Args:
        name: the propagation.
        error: why the messages cannot be delivered (stored with them).
        schedules: where the UNDELIVERABLE records are written.
    """
    spec = cfg.component("propagation", name)
    rt, src_q = queue_site(cfg, spec.source_queue)
    consumer = consumer_name("propagation", name)
    batches = rt.catalog.pending(src_q, consumer)
    if not batches:
        return 0
    exq = exception_queue(src_q)
    rt.catalog.create_queue(exq, queue_table=f"{exq}_table", queue_type="exception")
    moved = 0
    for b in batches:
        key = f"undeliverable:{name}:{b.seq}"
        seq = rt.catalog.find_dedup(exq, key)
        if seq is None:
            batch_id, path = rt.catalog.new_batch_path(exq)
            _copy_tree(spark, b.path, path)
            seq = rt.catalog.commit_batch(exq, NewBatch(
                batch_id=batch_id, path=path, n_messages=b.n_messages, n_bytes=b.n_bytes,
                producer=f"propagation:{name}", dedup_key=key, source_last_seq=b.seq,
                min_commit_scn=b.min_commit_scn, max_commit_scn=b.max_commit_scn))
            schedules.add_undeliverable(
                propagation=name, source_queue=spec.source_queue, exception_queue=exq,
                source_seq=b.seq, exception_seq=seq, n_messages=b.n_messages,
                error_message=f"{type(error).__name__}: {error}"[:4000])
        moved += b.n_messages
    rt.catalog.ack(src_q, consumer, batches[-1].seq)
    log.error("propagation %s: %d messages of %d batches marked UNDELIVERABLE in %s: %s",
              name, moved, len(batches), exq, error)
    return moved
