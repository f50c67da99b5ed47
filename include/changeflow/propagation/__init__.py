"""Propagation: moving messages from a source queue to a destination queue, exactly once.

The destination may be in another site (another staging root and state store). The
protocol makes the destination enqueue and the source acknowledgement unable to
diverge:

1. *Recover*: ask the destination for the highest source batch this propagation has
   committed there; if the source position is behind it, acknowledge up to it (the
   previous run crashed between the two commits).
2. Read the pending source batches, filter them by the propagation's rule sets.
3. Write one destination batch and commit it with the dedup key
   ``propagation:<name>:<last source seq>``; a retry of the same range is a no-op.
4. Acknowledge the source up to the last batch read.

A crash anywhere loses nothing (the source is acknowledged last) and duplicates
nothing (the destination recognises the range it already holds).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from changeflow import fs, quality
from changeflow.config import PipelineConfig, PropagationSpec
from changeflow.queues import io as qio
from changeflow.sites import consumer_name, open_pipeline, queue_site

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

RuleFilter = Callable[["DataFrame"], "DataFrame"]


@dataclass
class PropagationResult:
    """What one propagation run did (the figures schedule statistics are built from)."""

    propagation: str
    batches_read: int = 0
    messages_read: int = 0
    messages_propagated: int = 0
    bytes_propagated: int = 0
    destination_seq: int | None = None
    recovered: bool = False
    seconds: float = 0.0

    @property
    def messages_discarded(self) -> int:
        """Messages the rule sets discarded."""
        return self.messages_read - self.messages_propagated


def propagate_once(
    spark: SparkSession,
    cfg: PipelineConfig,
    name: str,
    *,
    rule_filter: RuleFilter | None = None,
    max_batches: int | None = None,
    crash_after_destination_commit: bool = False,
) -> PropagationResult:
    """Propagate every pending source batch (at most ``max_batches``) once.

    Args:
        crash_after_destination_commit: a test hook that raises between the two
            commits, to prove recovery.
    """
    started = time.monotonic()
    open_pipeline(cfg)
    spec: PropagationSpec = cfg.component("propagation", name)
    src_rt, src_q = queue_site(cfg, spec.source_queue)
    dst_rt, dst_q = queue_site(cfg, spec.destination_queue)
    consumer = consumer_name("propagation", name)
    producer = f"propagation:{name}"
    result = PropagationResult(name)

    done = dst_rt.catalog.last_from_producer(dst_q, producer)
    if done is not None and done > src_rt.catalog.position(src_q, consumer):
        log.info("propagation %s: recovering, acknowledging source up to %s", name, done)
        src_rt.catalog.ack(src_q, consumer, done)
        result.recovered = True

    batches = src_rt.catalog.pending(src_q, consumer, max_batches=max_batches)
    if not batches:
        result.seconds = time.monotonic() - started
        return result
    last = batches[-1].seq
    result.batches_read = len(batches)
    result.messages_read = sum(b.n_messages for b in batches)
    df = qio.read_batches(spark, batches)
    df, entered = quality.observe_input(df, name)
    if rule_filter is not None:
        df = rule_filter(df)
    with qio.guard(batches):
        new = qio.write_batch(
            spark, dst_rt.catalog, dst_q, df, producer=producer,
            dedup_key=f"{producer}:{last}", source_last_seq=last,
        )
    if new is not None:
        quality.check_batch(spark, cfg, stage=producer, batch=new, queue=spec.destination_queue,
                            counters=quality.hop_counters(result.messages_read, entered,
                                                          new.n_messages))
        seq = dst_rt.catalog.commit_batch(dst_q, new)
        if seq is None:  # a previous attempt committed this range already
            fs.delete(spark, new.path)
        result.destination_seq = seq
        result.messages_propagated = new.n_messages
        result.bytes_propagated = new.n_bytes
    if crash_after_destination_commit:
        raise RuntimeError("simulated crash between destination commit and source ack")
    src_rt.catalog.ack(src_q, consumer, last)
    purge(spark, cfg, spec.source_queue)
    result.seconds = time.monotonic() - started
    return result


def purge(spark: SparkSession, cfg: PipelineConfig, queue_ref: str) -> int:
    """Delete batches every consumer has acknowledged. Returns how many."""
    rt, queue = queue_site(cfg, queue_ref)
    done = rt.catalog.purgeable(queue)
    for b in done:
        if b.path:
            fs.delete(spark, b.path)
    rt.catalog.forget(done)
    return len(done)
