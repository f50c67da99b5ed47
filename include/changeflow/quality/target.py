"""Checking an apply's written, uncommitted changes to its Parquet target tables.

:func:`check_target` runs inside :func:`changeflow.apply.engine.apply_once` after the
delta files are written and before the manifests are committed. Its cost follows the
changes, not the table: it reads only the new delta files and the rows of the
changed keys that the apply already looked up (for conflict detection), never whole
buckets. For every table it builds three small fact sets and validates a suite on
each:

* ``target_rows``: one row per changed key, as readers will see it after the commit
  (the looked-up images and the new deltas, resolved the way reads resolve them):
  key columns non-null, the key unique, and present or absent as the applied LCRs
  say (``target_rows_as_applied``);
* ``target_columns``: one row per declared column: the type written is the type
  declared in the table's manifest;
* ``target_counts``: one row per table: the recorded row count before, plus keys the
  deltas add, minus keys they remove, equals the count the applied LCRs imply.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from changeflow import lcr
from changeflow.apply.target import META, FileEntry, TargetCatalog, TargetTable, resolve
from changeflow.config import PipelineConfig
from changeflow.quality import quarantine, results
from changeflow.quality.policy import QualityError, QualityReport, blocking_policy, log_warnings
from changeflow.quality.validator import validate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class TargetWrite:
    """One table's uncommitted apply output, as the check needs it.

    Args:
        table: the header after evolution.
        files: the new delta files.
        before: every image (key and ``_cf_*`` columns at least) of the changed keys
            before this apply; None for a new table.
        expected: per changed key, ``before`` and ``present`` (after this apply, as the
            applied LCRs say); None to skip the row and count reconciliation.
        rows_before: the table's row count before this apply.
        n_rows: rows (images and tombstones) the deltas hold.
        rows_after: set by the check: the row count after the commit.
    """

    table: TargetTable
    files: list[FileEntry]
    before: DataFrame | None = None
    expected: DataFrame | None = None
    rows_before: int = 0
    n_rows: int = 0
    rows_after: int | None = None


def _after(spark: SparkSession, w: TargetWrite) -> DataFrame:
    """Per changed key, the newest image after the commit (tombstones kept)."""
    keys = w.table.key_columns
    cols = [*keys, *META]
    new = spark.read.schema(w.table.spark_schema()).parquet(*[f.path for f in w.files]) \
        .select(*cols)
    raw = new if w.before is None else w.before.select(*cols).unionByName(new)
    return resolve(raw, keys, keep_deleted=True)


def _row_facts(spark: SparkSession, w: TargetWrite) -> tuple[DataFrame, DataFrame]:
    """(rows facts, one counts row) of one table."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = w.table.key_columns
    after = _after(spark, w).select(*keys, (~F.col("_cf_deleted")).alias("_after"))
    assert w.expected is not None
    facts = w.expected.join(after, keys, "full_outer")
    not_null = F.lit(True)
    for k in keys:
        not_null = not_null & F.col(k).isNotNull()
    after_present = F.coalesce("_after", "before")
    rows = facts.select(
        F.lit(w.table.name).alias("table_name"),
        F.to_json(F.struct(*[F.col(k) for k in keys])).alias("key"),
        not_null.alias("key_not_null"),
        (F.count(F.lit(1)).over(Window.partitionBy(*keys)) == 1).alias("key_unique"),
        (after_present == F.coalesce("present", "before")).alias("as_applied"),
        "before", F.col("present").alias("expected"), after_present.alias("after"),
    ).persist()
    n = rows.agg(
        F.sum((F.col("after") & ~F.col("before")).cast("long")).alias("ins"),
        F.sum((~F.col("after") & F.col("before")).cast("long")).alias("dels"),
        F.sum((F.col("expected") & ~F.col("before")).cast("long")).alias("eins"),
        F.sum((~F.col("expected") & F.col("before")).cast("long")).alias("edels"),
    ).first()
    ins, dels = int(n.ins or 0), int(n.dels or 0)  # type: ignore[union-attr]
    eins, edels = int(n.eins or 0), int(n.edels or 0)  # type: ignore[union-attr]
    w.rows_after = w.rows_before + ins - dels
    counts = spark.createDataFrame(
        [(w.table.name, w.rows_before, ins, dels, w.rows_after,
          w.rows_before + eins - edels)],
        "table_name string, rows_before long, inserts long, deletes long, rows_after long, "
        "expected_after long")
    return rows.drop("before", "expected", "after"), counts


def _column_facts(spark: SparkSession, writes: Sequence[TargetWrite]) -> DataFrame:
    col_rows = []
    for w in writes:
        new = [f.path for f in w.files]
        physical = {f.name: f.dataType.simpleString()
                    for f in spark.read.parquet(*new).schema.fields} if new else {}
        for col, ltype in w.table.columns:
            declared = lcr.spark_type(lcr.LOGICAL_TYPES[ltype].spark_type).simpleString()
            got = physical.get(col, declared if not new else None)
            col_rows.append((w.table.name, col, declared, got, got == declared))
    return spark.createDataFrame(col_rows, "table_name string, column string, declared string, "
                                           "written string, type_as_declared boolean")


def _facts(spark: SparkSession, writes: Sequence[TargetWrite]
           ) -> tuple[DataFrame | None, DataFrame, DataFrame | None]:
    from functools import reduce

    parts = [_row_facts(spark, w) for w in writes if w.expected is not None]
    rows = reduce(lambda a, b: a.unionByName(b), [p[0] for p in parts]) if parts else None
    counts = reduce(lambda a, b: a.unionByName(b), [p[1] for p in parts]) if parts else None
    return rows, _column_facts(spark, writes), counts


def check_target(
    spark: SparkSession, cfg: PipelineConfig, *, stage: str, catalog: TargetCatalog,
    writes: Sequence[TargetWrite],
) -> QualityReport | None:
    """Validate an apply's written, uncommitted target changes; quarantine them on failure.

    A no-op (returns ``None``) when quality is disabled or nothing was written.

    Raises:
        QualityError: a blocking check failed; the delta files were quarantined and the
            manifests were not committed.
    """
    writes = [w for w in writes if w.files]
    if not writes or not cfg.quality.enabled:
        return None
    started = time.monotonic()
    policy = blocking_policy(cfg)
    subject = ",".join(w.table.name for w in writes)
    report = QualityReport(stage, subject, uuid.uuid4().hex, None)
    rows, cols, cnts = _facts(spark, writes)
    try:
        report.n_rows = rows.count() if rows is not None else 0
        for suite, df in (("target_rows", rows), ("target_columns", cols),
                          ("target_counts", cnts)):
            if df is None:
                continue
            run = validate(df, suite, blocking=policy)
            for c in run.results:
                if not c.success:
                    bad = (df.where(f"NOT {c.kwargs['column']}") if "column" in c.kwargs
                           else df.where(f"{c.kwargs['column_A']} <> {c.kwargs['column_B']}"))
                    c.samples = [r.asDict() for r in bad.limit(cfg.quality.sample_rows).collect()]
            report.runs.append(run)
    finally:
        if rows is not None:
            rows.unpersist()
    report.seconds = time.monotonic() - started
    if report.status == "failed":
        report.quarantine_path = _quarantine(spark, catalog, writes, report)
    report.result_id = results.record(
        catalog.store, stage=stage, subject=subject, producer=stage, batch_id=report.batch_id,
        status=report.status, n_rows=report.n_rows, seconds=report.seconds,
        checks=[c.to_dict() for c in report.checks], gx=[r.gx_result for r in report.runs],
        quarantine_path=report.quarantine_path,
    )
    if report.status == "failed":
        raise QualityError(report)
    log_warnings(report)
    return report


def _quarantine(spark: SparkSession, catalog: TargetCatalog, writes: Sequence[TargetWrite],
                report: QualityReport) -> str:
    """Move every table's delta directory to quarantine. Returns the quarantine root used."""
    dests = []
    for w in writes:
        delta_dir = w.files[0].path.split("/_cf_bucket=", 1)[0]
        dests.append(quarantine.target_location(catalog.target_root, w.table.name, delta_dir))
    report.quarantine_path = dests[0] if len(dests) == 1 else ",".join(dests)
    for w, dest in zip(writes, dests, strict=True):
        quarantine.quarantine(spark, w.files[0].path.split("/_cf_bucket=", 1)[0], dest,
                              report.to_dict())
    return report.quarantine_path
