"""The apply process for PostgreSQL targets (see ``docs/postgres.md``, ``docs/apply.md``).

An apply with a ``target: {type: postgres, ...}`` holds its lease and applies its
queue's pending batches (rounds of at most its pass limits) to a PostgreSQL database:

* **in source commit order**, one target transaction per group of whole source
  transactions of one source database (at most ``group_changes`` changes);
* **exactly once per transaction**: which source transactions are done is kept in
  the *target* (``changeflow.applied_txns``, plus the ``changeflow.apply_progress``
  watermark older entries collapse into) and written in the same target transaction
  as the changes; only *that* transaction is ever skipped;
* **tagged**: the session uses the replication origin
  ``changeflow_<tag>_<apply>~<source database>``, so a capture on the target database
  sees the tag and, by default, ignores those changes, while a capture told to take
  tagged changes (apply forwarding) keeps the original source database name;
* **with Oracle's apply semantics**: handlers (DML and DDL handlers, precommit handler,
  message handler) run on the driver; conflicts are detected in the statements and,
  when the table has conflict handlers, resolved by replaying the transaction
  statement by statement (:mod:`.pg_resolve`); DDL LCRs are executed (:mod:`.ddl`);
* **safely**: a group that fails is rolled back and re-applied one source transaction
  at a time; a transaction that still fails goes to the error queue whole (every LCR,
  :mod:`.errorq`) and is marked done in the target; the apply carries on unless
  ``stop_on_error``. A lost connection is transient and re-raised.

A group is first applied *set-based* (:mod:`.pg_bulk`): its changes netted per key and
run as a few ``UPDATE ... FROM unnest(...)``-style statements per table, checking the
old values as the statements would have; anything that approach cannot prove equal
(handlers, DDL, a conflict, triggers) goes statement by statement instead: in pipeline
mode (psycopg 3), prepared once per shape. Simple rule sets are decided over Arrow
(:mod:`changeflow.rules.arrow_filter`), others in Spark.

Entry point: :func:`apply_pg_once`.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from changeflow import arrowpool
from changeflow.apply import enqueue as enq
from changeflow.apply import errorq
from changeflow.apply.conflicts import effective_handlers
from changeflow.apply.handlers import Handlers
from changeflow.apply.pg_apply import (
    PgApplier,
    SourceTxn,
    TargetUnavailableError,
    origin_name,
    source_transactions,
)
from changeflow.config import ApplySpec, PipelineConfig
from changeflow.errors import ConfigError
from changeflow.pgconn import connect, resolve_url
from changeflow.pipeline import Pipeline, resolve
from changeflow.queues import arrow_io
from changeflow.sites import SiteRuntime, consumer_name, queue_site
from changeflow.state.leases import Lease

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from changeflow.queues.catalog import Batch

log = logging.getLogger(__name__)
RuleFilter = Callable[["DataFrame"], "DataFrame"]
__all__ = ["PgApplyResult", "SourceTxn", "TargetUnavailableError", "apply_pg_once",
           "origin_name", "source_transactions"]


@dataclass
class PgApplyResult:
    """What one apply run did."""

    apply: str
    batches: int = 0
    messages: int = 0
    changes: int = 0
    transactions: int = 0
    set_based: int = 0  # of ``transactions``, those applied in set-based groups
    skipped: int = 0
    errors: int = 0
    error_ids: list[int] = field(default_factory=list)
    conflicts_resolved: int = 0
    ddl: int = 0
    user_messages: int = 0
    enqueued: int = 0
    seconds: float = 0.0
    lags: list[float] = field(default_factory=list)
    stopped: str | None = None

    @property
    def rate(self) -> float:
        """Changes applied per second of the run."""
        return self.changes / self.seconds if self.seconds else 0.0


def _read(spark: SparkSession | None, cfg: PipelineConfig, batches: list[Batch],
          rule_filter: RuleFilter | None, dests: list[enq.Destination], apply: str,
          result: PgApplyResult) -> pa.Table:
    if not dests:
        table = arrow_io.read_arrow_batches(batches)
        if rule_filter is None:
            return table
        # simple rule sets (system-created global, schema and table rules) are
        # decided over Arrow, as the capture does: no JVM round trip
        from changeflow.rules.arrow_filter import filter_for_client

        kept = filter_for_client(rule_filter, table)
        if kept is not None:
            return kept
    if spark is None:
        raise ConfigError("an apply with rule sets or enqueue destinations needs a "
                          "SparkSession (rules run in Spark)")
    from changeflow.queues import io as qio

    df = qio.read_batches(spark, batches)
    if rule_filter is not None:
        df = rule_filter(df)
    to_apply, parts = enq.split(cfg, df, dests)
    if parts:
        result.enqueued += enq.enqueue(spark, apply, parts, batches)
    return to_apply.toArrow()


def apply_pg_once(
    spark: SparkSession | None,
    pipeline: PipelineConfig | Pipeline,
    name: str,
    *,
    rule_filter: RuleFilter | None = None,
    max_batches: int | None = None,
    batches_per_round: int = 20,
    connect_attempts: int = 5,
    lease_wait: float = 0.0,
) -> PgApplyResult:
    """Apply the pending batches of a PostgreSQL apply's queue.

    Args:
        spark: needed only for ``rule_filter`` and enqueue destinations.
        pipeline: the run's resolved pipeline (or a configuration to resolve);
            ``name`` must be an apply with a ``postgres`` target.
        rule_filter: the apply's rule sets, e.g. ``RuleSetPair.filter``.
        max_batches: stop after about this many batches.
        batches_per_round: batches read, applied and acknowledged together (within the
            apply's pass limits).
        connect_attempts: connection attempts before a transient error.
        lease_wait: seconds to wait when another run of the apply holds its lease.

    Raises:
        SourceUnreachableError, TargetUnavailableError, LeaseHeldError: transient; a
            re-run resumes.
        HandlerError, ConfigError: a handler does not import, a conflict handler names
            an unknown column (nothing applied).
    """
    started = time.monotonic()
    arrowpool.use_jemalloc()
    pipe = resolve(pipeline).open()
    cfg = pipe.cfg
    spec: ApplySpec = cfg.component("apply", name)
    if spec.target is None:
        raise ConfigError(f"apply {name!r} has no postgres target", file=cfg.source_path)
    handle = pipe.queue(spec.queue)
    rt, queue = handle.site, handle.name
    handlers = Handlers.from_config(spec.handlers, None)
    dests = enq.destinations(pipe, spec)
    result = PgApplyResult(name)
    with Lease(rt.store, f"apply:{name}", wait=lease_wait) as lease, \
            connect(resolve_url(spec.target), application_name=f"changeflow-apply-{name}",
                    attempts=connect_attempts) as conn:
        applier = PgApplier(conn, spec, rt, handlers,
                            effective_handlers(rt.store, name, spec.conflicts.handlers),
                            lease, result)
        applier.check_handlers()
        _rounds(spark, cfg, spec, rt, queue, applier, rule_filter, dests, max_batches,
                batches_per_round, result)
        applier.prune()
    from changeflow.apply.status import record_run
    from changeflow.queues.retention import purge

    if result.batches:
        purge(spark, rt.catalog, queue)
    result.seconds = time.monotonic() - started
    record_run(rt.store, result)
    log.info("apply %s: %s changes in %s transactions (%.0f/s), %s skipped, %s errors", name,
             result.changes, result.transactions, result.rate, result.skipped, result.errors)
    if result.stopped:
        from changeflow.apply.engine import ApplyStoppedError

        raise ApplyStoppedError(result.stopped)
    return result


def _rounds(spark: SparkSession | None, cfg: PipelineConfig, spec: ApplySpec,
            rt: SiteRuntime, queue: str, applier: PgApplier, rule_filter: RuleFilter | None,
            dests: list[enq.Destination], max_batches: int | None, per_round: int,
            result: PgApplyResult) -> None:
    consumer = consumer_name("apply", spec.name)
    while max_batches is None or result.batches < max_batches:
        batches = rt.catalog.pending(queue, consumer, max_batches=per_round,
                                     max_messages=spec.limits.max_messages,
                                     max_bytes=spec.limits.max_bytes)
        if not batches:
            break
        gc.disable()  # many short-lived objects per round; see capture/postgres.py
        try:
            table = _read(spark, cfg, batches, rule_filter, dests, spec.name, result)
            txns, users = source_transactions(table)
            done = applier.done([t.id for t in txns])
            todo = [t for t in txns if t.id not in done]
            result.skipped += len(txns) - len(todo)
            applier.apply(todo)
            applier.messages(users)
        finally:
            gc.enable()
        if result.stopped:
            return
        rt.catalog.ack(queue, consumer, batches[-1].seq)
        result.batches += len(batches)
        result.messages += sum(b.n_messages for b in batches)


def error_entries(cfg: PipelineConfig, name: str) -> list[errorq.ErrorEntry]:
    """An apply's error queue (a convenience for scripts)."""
    rt, _ = queue_site(cfg, cfg.component("apply", name).queue)
    return errorq.entries(rt.store, name)
