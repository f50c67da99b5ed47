"""Propagation: moving messages from a source queue to a destination queue, exactly once.

The destination may be in another site (another staging root and state store). The
protocol makes the destination enqueue and the source acknowledgement unable to
diverge, and makes two overlapping runs unable to duplicate anything:

0. *Lease*: a run holds the propagation's lease (in the source site's store) while
   it works, so a second run, from Airflow, the CLI or Python, waits or exits with a
   clear message (:mod:`changeflow.state.leases`).
1. *Recover*: ask the destination for the highest source batch this propagation has
   committed there; if the source position is behind it, acknowledge up to it (the
   previous run crashed between the two commits).
2. Read the pending source batches (at most the pass limits: a backlog drains in
   steps), filter them by the propagation's rule sets.
3. Write one destination batch and commit it with its source range
   ``first..last`` and the dedup key ``propagation:<name>:<last>``. The destination
   refuses a range that overlaps one this propagation committed before: a replay of
   the same range is a no-op, a run that raced another fails transiently
   (:class:`~changeflow.errors.RangeConflictError`) and re-reads. The commit also
   checks the lease's token, so a run that stalled past its lease commits nothing.
4. Acknowledge the source up to the last batch read.

A crash anywhere loses nothing (the source is acknowledged last) and duplicates
nothing (the destination recognises the range it already holds). A destination that
was dropped fails with :class:`~changeflow.errors.QueueDroppedError` (terminal):
the schedule marks the messages UNDELIVERABLE instead of re-creating the queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from changeflow import faults, fs, quality
from changeflow.config import PipelineConfig, PropagationSpec
from changeflow.errors import DestinationUnavailableError
from changeflow.pipeline import Pipeline, resolve
from changeflow.propagation import transports
from changeflow.queues import io as qio
from changeflow.sites import SiteRuntime, consumer_name
from changeflow.state.leases import Lease

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from sqlalchemy.engine import Connection

log = logging.getLogger(__name__)

RuleFilter = Callable[["DataFrame"], "DataFrame"]


@dataclass
class PropagationResult:
    """What one propagation run did (the figures schedule statistics are built from).

    ``messages_propagated`` and ``bytes_propagated`` count what this run committed at
    the destination: a pass whose range was already there (a replay) counts zero.
    """

    propagation: str
    batches_read: int = 0
    messages_read: int = 0
    messages_propagated: int = 0
    bytes_propagated: int = 0
    destination_seq: int | None = None
    recovered: bool = False
    more_pending: bool = False
    seconds: float = 0.0

    @property
    def messages_discarded(self) -> int:
        """Messages the rule sets discarded."""
        return self.messages_read - self.messages_propagated


def propagate_once(
    spark: SparkSession,
    cfg: PipelineConfig | Pipeline,
    name: str,
    *,
    rule_filter: RuleFilter | None = None,
    max_batches: int | None = None,
    lease_wait: float = 0.0,
    crash_after_destination_commit: bool = False,
) -> PropagationResult:
    """Propagate pending source batches once, up to the propagation's pass limits.

    Args:
        cfg: the configuration, or the run's resolved pipeline.
        max_batches: cap the pass at this many source batches (besides the limits).
        lease_wait: seconds to wait for a run that holds the lease.
        crash_after_destination_commit: a test hook that raises between the two
            commits, to prove recovery.

    Raises:
        LeaseHeldError: another run of this propagation is active (transient).
        RangeConflictError: a run without the lease committed part of this range
            first (transient; the next pass re-reads).
        QueueDroppedError: the destination queue was dropped (terminal).
    """
    pipe = resolve(cfg).open()
    spec: PropagationSpec = pipe.cfg.component("propagation", name)
    src = pipe.queue(spec.source_queue)
    with Lease(src.store, f"propagation:{name}", wait=lease_wait) as lease:
        transport = transports.transport_for(pipe.cfg, spec)  # e.g. HTTP(S), SPEC §9
        if transport is not None:
            return transport.propagate(spark, pipe, spec, lease, rule_filter, max_batches)
        result = _propagate(spark, pipe, spec, lease, rule_filter, max_batches,
                            crash_after_destination_commit)
        for carrier in transports.carriers():  # e.g. the user messages addressed to it
            result = carrier.carry(pipe, spec, lease, result)
        return result


def _propagate(spark: SparkSession, pipe: Pipeline, spec: PropagationSpec, lease: Lease,
               rule_filter: RuleFilter | None, max_batches: int | None,
               crash: bool) -> PropagationResult:
    started = time.monotonic()
    name = spec.name
    cfg = pipe.cfg
    src, dst = pipe.queue(spec.source_queue), pipe.queue(spec.destination_queue)
    src_rt, src_q, dst_rt, dst_q = src.site, src.name, dst.site, dst.name
    consumer = consumer_name("propagation", name)
    producer = f"propagation:{name}"
    result = PropagationResult(name)

    done = dst_rt.catalog.last_from_producer(dst_q, producer)
    if done is not None and done > src_rt.catalog.position(src_q, consumer):
        log.info("propagation %s: recovering, acknowledging source up to %s", name, done)
        src_rt.catalog.ack(src_q, consumer, done)
        result.recovered = True

    limits = spec.limits
    batches = src_rt.catalog.pending(src_q, consumer, max_batches=max_batches,
                                     max_messages=limits.max_messages,
                                     max_bytes=limits.max_bytes)
    if not batches:
        result.seconds = time.monotonic() - started
        return result
    first, last = batches[0].seq, batches[-1].seq
    _check_destination(spark, dst_rt, dst_q, spec.destination_queue)
    result.batches_read = len(batches)
    result.messages_read = sum(b.n_messages for b in batches)
    df = qio.read_batches(spark, batches)
    df, entered = quality.observe_input(df, name)
    if rule_filter is not None:
        df = rule_filter(df)
    with qio.guard(batches, destination=spec.destination_queue):
        new = qio.write_batch(
            spark, dst_rt.catalog, dst_q, df, producer=producer,
            dedup_key=f"{producer}:{last}", source_last_seq=last, source_first_seq=first,
            warm_quality=cfg.quality.enabled,
        )
    if new is not None:
        report = quality.check_batch(
            spark, pipe, stage=producer, batch=new, queue=spec.destination_queue,
            counters=quality.hop_counters(result.messages_read, entered, new.n_messages))
        faults.point("propagation.before_destination_commit")
        try:
            with dst_rt.store.begin() as conn:
                seq = dst_rt.catalog.commit_batch(
                    dst_q, new, conn, state=quality.state_of(report),
                    guard=_lease_guard(lease, dst_rt.store.url == src_rt.store.url))
                failed = quality.set_aside(dst_rt, dst_q, report, seq, conn)
        except BaseException:
            fs.delete(spark, new.path)  # never visible: nothing references it
            raise
        faults.point("propagation.after_destination_commit")
        if seq is None:  # a previous attempt committed this range already
            fs.delete(spark, new.path)
        else:
            result.destination_seq = seq
            result.messages_propagated = new.n_messages
            result.bytes_propagated = new.n_bytes
    else:
        failed = None
    if crash:
        raise RuntimeError("simulated crash between destination commit and source ack")
    src_rt.catalog.ack(src_q, consumer, last)
    faults.point("propagation.after_source_ack")
    result.more_pending = bool(src_rt.catalog.pending(src_q, consumer, max_batches=1))
    purge(spark, pipe, spec.source_queue)
    result.seconds = time.monotonic() - started
    if failed is not None:
        raise failed
    return result


def _check_destination(spark: SparkSession, rt: SiteRuntime, queue: str, ref: str) -> None:
    """Fail fast, before reading anything, when the destination cannot take a batch."""
    path = rt.catalog.queue_path(queue)
    if (why := fs.ensure_dir(spark, path)) is not None:
        raise DestinationUnavailableError(
            f"destination queue {ref} (site {rt.name}) cannot be written at {path}: {why}")


def _lease_guard(lease: Lease, same_store: bool) -> Callable[[Connection], None]:
    """Check the lease inside the destination commit (one transaction when one store)."""

    def guard(conn: Connection) -> None:
        lease.check(conn if same_store else None)

    return guard


def purge(spark: SparkSession, cfg: PipelineConfig | Pipeline, queue_ref: str) -> int:
    """Delete batches every consumer of a configured queue has acknowledged."""
    from changeflow.queues.retention import purge as purge_queue

    q = resolve(cfg).queue(queue_ref)
    return purge_queue(spark, q.catalog, q.name)
