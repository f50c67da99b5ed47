"""The apply process for Iceberg targets (SPEC §7; see ``docs/apply.md``).

An apply run holds the apply's lease and makes passes over its queue's pending
batches (at most its pass limits each). A pass:

1. reads the batches and keeps what the apply's rule sets accept; messages an enqueue
   destination takes *instead of* applying are set apart (:mod:`.enqueue`);
2. surveys the source transactions (:mod:`.survey`) and skips those the apply has
   done before, exactly per transaction (:mod:`.positions`);
3. fails, whole, every transaction holding an LCR with a command type the contract
   does not know;
4. ends at the first transaction holding DDL (the next pass starts after it), runs the
   DDL handler or executes the DDL (:mod:`.ddl_iceberg`);
5. runs the DML handlers on the executors (:mod:`.handlers`);
6. per target table: turns LCRs into effects, looks up the current rows of their
   keys, detects and resolves conflicts (:mod:`.conflicts`), repeating while failed
   transactions change what later ones find; calls the precommit handler per
   transaction;
7. stages each table's final images on an Iceberg branch, checks them (quality),
   writes each failed transaction's LCRs to the error queue, enqueues into the
   destinations, publishes every table (:mod:`changeflow.targets.commit`), and commits
   done transactions, error entries and the queue position in one state-store
   transaction (the lease checked inside it).

Then consumed batches are purged and the written tables maintained (Iceberg's own
compaction and snapshot expiry, :mod:`changeflow.targets.maintenance`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from changeflow.apply import enqueue as enq
from changeflow.apply.handlers import Handlers
from changeflow.apply.passes import Pass
from changeflow.config import ApplySpec, PipelineConfig
from changeflow.errors import ConfigError, TerminalError
from changeflow.pipeline import Pipeline, resolve
from changeflow.sites import SiteRuntime, consumer_name
from changeflow.state.leases import Lease
from changeflow.targets.catalog import IcebergTargets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
RuleFilter = Callable[["DataFrame"], "DataFrame"]


class ApplyStoppedError(TerminalError):
    """An apply with ``stop_on_error`` stopped at a failed transaction (in its error queue)."""


@dataclass
class ApplyResult:
    """What one apply run did."""

    apply: str
    batches: int = 0
    messages: int = 0
    transactions: int = 0
    changes: int = 0  # row LCRs applied
    tables: dict[str, int] = field(default_factory=dict)  # row LCRs applied, per table
    rows_changed: int = 0  # target rows inserted, updated or deleted (one per changed key)
    skipped: int = 0
    errors: int = 0
    error_ids: list[int] = field(default_factory=list)
    conflicts_resolved: int = 0
    superseded: int = 0
    ddl: int = 0
    user_messages: int = 0
    enqueued: int = 0
    passes: int = 0
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)


def targets_of(cfg: PipelineConfig | Pipeline, spec: ApplySpec) -> IcebergTargets:
    """The Iceberg target tables of the site an apply runs at (its queue's site)."""
    rt = resolve(cfg).queue(spec.queue).site
    return IcebergTargets(rt.name, rt.store, rt.spec.target_root,
                          format_version=spec.iceberg.format_version)


def apply_once(
    spark: SparkSession, pipeline: PipelineConfig | Pipeline, name: str, *,
    rule_filter: RuleFilter | None = None, max_batches: int | None = None,
    lease_wait: float = 0.0,
) -> ApplyResult:
    """Apply the pending batches of the apply's queue (up to its pass limits).

    Args:
        pipeline: the run's resolved pipeline (:mod:`changeflow.pipeline`), or a
            configuration to resolve.
        rule_filter: the apply's rule sets, e.g. ``RuleSetPair.filter``.
        max_batches: cap the run at this many batches (besides the pass limits).
        lease_wait: seconds to wait when another run of the apply holds its lease.

    Raises:
        HandlerError: a handler path does not import (nothing applied).
        ConfigError: a conflict handler names an unknown column, an enqueue destination
            is not declared, or the apply has a PostgreSQL target (nothing applied).
        LeaseHeldError: another run of the apply is active (transient).
        QualityError: a blocking target check failed (the staged writes are kept as
            quarantine branches, nothing published).
        TargetConflictError: another writer committed to a target table during the pass
            (transient: the next run does the pass again).
        ApplyStoppedError: ``stop_on_error`` and a transaction failed (it is in the
            error queue; what came before it is committed).
    """
    started = time.monotonic()
    pipe = resolve(pipeline).open()
    cfg = pipe.cfg
    spec: ApplySpec = cfg.component("apply", name)
    if spec.target is not None:
        raise ConfigError(f"apply {name!r} has a postgres target: run it with "
                          "changeflow.apply.postgres.apply_pg_once", file=cfg.source_path)
    handle = pipe.queue(spec.queue)
    rt, queue = handle.site, handle.name
    handlers = Handlers.from_config(spec.handlers, spark)
    dests = enq.destinations(pipe, spec)
    result = ApplyResult(name)
    targets = targets_of(pipe, spec)
    targets.register(spark)
    touched: set[str] = set()
    with Lease(rt.store, f"apply:{name}", wait=lease_wait) as lease:
        consumer = consumer_name("apply", name)
        while max_batches is None or result.batches < max_batches:
            batches = rt.catalog.pending(queue, consumer, max_batches=max_batches,
                                         max_messages=spec.limits.max_messages,
                                         max_bytes=spec.limits.max_bytes)
            if not batches:
                break
            step = Pass(spark, cfg, spec, rt, targets, lease, handlers, dests, rule_filter,
                        batches, result)
            complete = step.run()
            for k, v in step.timings.items():
                result.timings[k] = result.timings.get(k, 0.0) + v
            touched.update(step.written_tables)
            result.passes += 1
            if step.stopped is not None:
                _finish(spark, rt, queue, spec, targets, touched, result, started)
                raise ApplyStoppedError(step.stopped)
            if complete:
                result.batches += len(batches)
                result.messages += sum(b.n_messages for b in batches)
                break
    _finish(spark, rt, queue, spec, targets, touched, result, started)
    return result


def _finish(spark: SparkSession, rt: SiteRuntime, queue: str, spec: ApplySpec,
            targets: IcebergTargets, touched: set[str], result: ApplyResult,
            started: float) -> None:
    from changeflow.apply.status import record_run
    from changeflow.queues.retention import purge
    from changeflow.spark import concurrently
    from changeflow.targets.maintenance import maintain

    t0 = time.monotonic()
    if result.batches:
        purge(spark, rt.catalog, queue)
    t1 = time.monotonic()
    concurrently(spark, lambda table: maintain(spark, targets, table,
                                               spec.iceberg.maintenance),
                 sorted(touched), spec.parallelism)
    result.timings.update(purge=t1 - t0, maintenance=time.monotonic() - t1)
    result.seconds = time.monotonic() - started
    record_run(rt.store, result)
    log.info("apply %s: %s transactions (%s changes) in %s batches, %s skipped, %s errors, "
             "%.1f s", spec.name, result.transactions, result.changes, result.batches,
             result.skipped, result.errors, result.seconds)
