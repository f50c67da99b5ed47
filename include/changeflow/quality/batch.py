"""Checking an LCR batch that is written but not yet committed to its queue.

:func:`check_batch` runs between :func:`changeflow.queues.io.write_batch` and
:meth:`~changeflow.queues.catalog.QueueCatalog.commit_batch`. It reads the batch
with a pruned schema in one pass that rolls every per-message check up per source
transaction, counts distinct message ids in a second aggregate, and validates the
``lcr_batch`` suite on the small rollup in one GX call (with the hop's counters when
the stage passes them): on the driver with GX's pandas engine, as the Arrow check does,
unless the batch holds more than :data:`DRIVER_ROLLUP_ROWS` transactions. It persists
the result and returns the report.

A batch that failed a blocking check is still committed, but *set aside*: the stage
commits it with :func:`state_of` (``quarantined``) and calls :func:`set_aside` in the
same transaction, which records it in the queue's quarantine (see
:mod:`changeflow.queues.quarantine`) and returns the
:class:`~changeflow.quality.policy.QualityError` to raise once committed. The stage
moves on, later batches flow, and an operator releases the batch once fixed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow import faults, fs
from changeflow.config import PipelineConfig
from changeflow.pipeline import Pipeline, resolve
from changeflow.quality import arrow_facts, facts, quarantine, results
from changeflow.quality.policy import QualityError, QualityReport, blocking_policy, log_warnings
from changeflow.quality.validator import validate
from changeflow.queues.catalog import QUARANTINED, READY, NewBatch
from changeflow.queues.quarantine import record_committed
from changeflow.sites import SiteRuntime

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa
    from pyspark.sql import DataFrame, Observation, SparkSession
    from sqlalchemy.engine import Connection

    from changeflow.state.leases import Lease

SAMPLE_COLUMNS = ("msg_id", "kind", "command_type", "object_owner", "object_name",
                  "source_database_name", "transaction_id", "commit_scn", "position")


@dataclass(frozen=True)
class HopCounters:
    """A hop's own counters.

    Attributes:
        read: messages the stage read (the source batches' catalog counts).
        propagated: messages it wrote to the destination batch.
        discarded: messages its rule sets discarded.
    """

    read: int
    propagated: int
    discarded: int


def observe_input(df: DataFrame, name: str) -> tuple[DataFrame, Observation]:
    """Count the rows entering a stage's rule filter, during the stage's own write.

    Returns:
        The DataFrame to filter, and the observation to pass to :func:`hop_counters`
        once the batch is written.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    obs = Observation(f"quality_in_{name}_{time.monotonic_ns()}")
    return df.observe(obs, F.count(F.lit(1)).alias("n")), obs


def hop_counters(read: int, observed: Observation, propagated: int) -> HopCounters:
    """The counters of a hop whose write has finished (discarded = entered − written)."""
    entered = int((observed.get or {}).get("n") or 0)
    return HopCounters(read=read, propagated=propagated, discarded=entered - propagated)


def check_batch(
    spark: SparkSession, cfg: PipelineConfig | Pipeline, *, stage: str,
    batch: NewBatch | None, queue: str, counters: HopCounters | None = None,
) -> QualityReport | None:
    """Validate a written, uncommitted batch of ``queue``; quarantine it if it fails.

    A no-op (returns ``None``) when quality is disabled or there is no batch.

    Args:
        spark: the session.
        cfg: the pipeline (its ``quality:`` section decides what blocks), or the run's
            resolved pipeline.
        stage: who wrote the batch, e.g. ``propagation:p12``.
        batch: what :func:`~changeflow.queues.io.write_batch` returned.
        queue: the queue reference, as in the configuration (``owner.name@site``).
        counters: the stage's own counters, to reconcile the hop.

    Returns:
        The report; its ``status`` is ``failed`` when a blocking check failed (commit
        the batch with :func:`state_of` and call :func:`set_aside`).
    """
    pipe = resolve(cfg)
    if batch is None or not pipe.cfg.quality.enabled:
        return None
    started = time.monotonic()
    rt, qname = pipe.queue(queue).site, pipe.queue(queue).name
    policy = blocking_policy(pipe.cfg)
    report = QualityReport(stage, qname, batch.batch_id, batch.n_messages)
    df = spark.read.schema(facts.read_schema()).parquet(batch.path)
    prior = results.prior_watermarks(rt.store, qname, batch.producer)
    ids = facts.id_counts(df)
    hop = (counters.read, counters.propagated + counters.discarded) if counters else None
    # One pass over the batch: per-message checks rolled up per transaction (small).
    txn = facts.transaction_facts(facts.message_facts(df), prior).persist()
    try:
        rollup = facts.batch_facts(txn, ids, hop)
        local = _on_driver(rollup)
        report.runs.append(validate(rollup if local is None else local, "lcr_batch",
                                    blocking=policy))
        marks = _watermarks(txn, prior) if local is None else \
            arrow_facts.watermarks(local, prior, "txn_key")
    finally:
        txn.unpersist()
    _explain(report, ids, counters)
    _samples(report, df, prior, pipe.cfg.quality.sample_rows)
    return _finish(spark, rt, report, batch, marks, started)


def check_arrow_batch(
    spark: SparkSession, cfg: PipelineConfig | Pipeline, *, stage: str,
    batch: NewBatch | None, queue: str, table: pa.Table,
) -> QualityReport | None:
    """:func:`check_batch` for a batch the stage still holds in memory as Arrow.

    The ``lcr_batch`` suite is validated (GX, pandas engine) on a rollup computed from
    ``table`` (:mod:`changeflow.quality.arrow_facts`) without reading the batch back. A
    batch that fails any check there is checked again by :func:`check_batch`, so a
    failure is reported, sampled and set aside exactly as on the Spark path.

    Args:
        table: the batch's messages, exactly as written.
    """
    pipe = resolve(cfg)
    if batch is None or not pipe.cfg.quality.enabled:
        return None
    started = time.monotonic()
    rt, qname = pipe.queue(queue).site, pipe.queue(queue).name
    prior = results.prior_watermarks(rt.store, qname, batch.producer)
    found = arrow_facts.batch_facts(table, prior)
    run = validate(found.rollup, "lcr_batch", blocking=blocking_policy(pipe.cfg))
    if not run.success:
        return check_batch(spark, pipe, stage=stage, batch=batch, queue=queue)
    report = QualityReport(stage, qname, batch.batch_id, batch.n_messages)
    report.runs.append(run)
    _explain(report, found.ids, None)
    return _finish(spark, rt, report, batch, found.watermarks, started)


def _explain(report: QualityReport, ids: tuple[int, int], counters: HopCounters | None) -> None:
    """Give counts and samples in batch terms (messages), not rollup rows."""
    for check in report.checks:
        if check.expectation == "expect_column_sum_to_be_between":
            check.element_count = report.n_rows
        elif check.check == "unique_msg_id":
            check.element_count = ids[0]
            check.unexpected_count = None if check.success else ids[0] - ids[1]
        elif check.check == "hop_reconciled" and counters is not None:
            check.element_count = counters.read
            check.unexpected_count = None if check.success else abs(
                counters.read - counters.propagated - counters.discarded)
            check.samples = [] if check.success else [{
                "messages_read": counters.read, "messages_propagated": counters.propagated,
                "messages_discarded": counters.discarded,
                "messages_accounted": counters.propagated + counters.discarded}]


def _finish(spark: SparkSession, rt: SiteRuntime, report: QualityReport, batch: NewBatch,
            marks: dict[str, int], started: float) -> QualityReport:
    qname = report.subject
    report.seconds = time.monotonic() - started
    if report.status == "failed":
        report.quarantine_path = batch.path
        quarantine.write_result(spark, batch.path, report.to_dict())
    report.result_id = results.record(
        rt.store, stage=report.stage, subject=qname, producer=batch.producer,
        batch_id=batch.batch_id, status=report.status, n_rows=report.n_rows,
        seconds=report.seconds, checks=[c.to_dict() for c in report.checks],
        gx=[r.gx_result for r in report.runs], watermarks=marks,
        quarantine_path=report.quarantine_path,
    )
    log_warnings(report)
    return report


def state_of(report: QualityReport | None) -> str:
    """The state to commit a checked batch in: ``quarantined`` when it failed."""
    return QUARANTINED if report is not None and report.status == "failed" else READY


def set_aside(rt: SiteRuntime, queue: str, report: QualityReport | None,
              seq: int | None, conn: Connection | None = None) -> QualityError | None:
    """Record a failed batch, committed as ``seq``, in the queue's quarantine.

    Returns:
        The error the stage raises after its commit, or ``None`` when the batch
        passed (or was a replay that committed nothing).
    """
    if report is None or report.status != "failed" or seq is None:
        return None
    record_committed(rt.catalog, queue, seq, f"data-quality check failed at {report.stage}",
                     origin="quality", conn=conn)
    report.quarantine_seq = seq
    return QualityError(report)


#: the most rollup rows (source transactions in a batch) GX validates on the driver
DRIVER_ROLLUP_ROWS = 200_000


def _on_driver(rollup: DataFrame) -> Any:
    """The rollup as a pandas frame (the dtypes the Arrow check's rollup has), when it
    has at most :data:`DRIVER_ROLLUP_ROWS` rows; else None (GX validates it in Spark).

    GX's Spark engine runs a Spark job per metric, a dozen over a frame of a few rows;
    its pandas engine validates the collected rows at once. One job collects them."""
    import pandas as pd
    import pyarrow as pa

    rows = rollup.limit(DRIVER_ROLLUP_ROWS + 1).toArrow()
    if rows.num_rows > DRIVER_ROLLUP_ROWS:
        return None
    return rows.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def _watermarks(txn: DataFrame, prior: dict[str, int]) -> dict[str, int]:
    """Per source, the highest commit position seen so far by this producer in this queue."""
    from pyspark.sql import functions as F

    marks = dict(prior)
    known = txn.where(F.col("txn_key").isNotNull())
    for r in known.groupBy("source_database_name").agg(F.max("max_scn").alias("m")).collect():
        if r.m is not None:
            marks[r.source_database_name] = max(int(r.m), marks.get(r.source_database_name, 0))
    return marks


def _samples(report: QualityReport, batch: DataFrame, prior: dict[str, int], k: int) -> None:
    """Attach sample offending rows to each failed check (only runs on failure)."""
    from pyspark.sql import functions as F

    for check in report.checks:
        column = str(check.kwargs.get("column")).removesuffix("_violations")
        if check.success:
            continue
        if check.check == "unique_msg_id":
            dups = batch.groupBy("msg_id").count().where("count > 1").limit(k)
            rows = batch.join(dups.select("msg_id"), "msg_id").select(*SAMPLE_COLUMNS)
            check.samples = _rows(rows.limit(k))
            if not check.samples:  # a 64-bit hash collision, not a duplicate id
                check.success = True
        elif column in facts.MESSAGE_CHECKS:
            flagged = facts.message_facts(batch, keep=SAMPLE_COLUMNS)
            check.samples = _rows(flagged.where(~F.col(column)).select(*SAMPLE_COLUMNS)
                                  .limit(k))
        elif column in facts.TRANSACTION_CHECKS:
            named = facts.message_facts(batch, keep=["transaction_id"])
            txn = facts.transaction_facts(named, prior, keep=["transaction_id"])
            cols = ["source_database_name", "transaction_id", "n", "min_scn", "max_scn",
                    "min_time", "max_time", "prev_scn", "prior_scn"]
            check.samples = _rows(txn.where(~F.col(column)).select(*cols).limit(k))


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def commit_capture(spark: SparkSession, rt: SiteRuntime, queue: str, batch: NewBatch | None,
                   report: QualityReport | None, lease: Lease | None,
                   record: Callable[[Connection], None]) -> int:
    """Commit a capture's checked batch and its progress in one state-store transaction.

    ``record(conn)`` stores what was read (files, offsets, a snapshot) in that
    transaction; it runs unless the batch's dedup key was committed before (a run
    that died after its commit), whose written files are then deleted. Returns the
    messages enqueued.

    Raises:
        QualityError: the batch failed a check; it is committed, set aside.
    """
    with rt.store.begin() as conn:
        if lease is not None:
            lease.check(conn)
        seq = None
        if batch is not None:
            seq = rt.catalog.commit_batch(queue, batch, conn, state=state_of(report))
        failed = set_aside(rt, queue, report, seq, conn)
        if batch is None or seq is not None:
            record(conn)
    faults.point("capture.after_commit")
    if batch is not None and seq is None:
        fs.delete(spark, batch.path)
        return 0
    if failed is not None:
        raise failed
    return batch.n_messages if batch is not None else 0
