"""Checking an apply's written, uncommitted changes to its Parquet target tables.

:func:`check_target` runs inside :func:`changeflow.apply.engine.apply_once` after the
delta files are written and before the manifests are committed. Only the buckets the
apply touched are read, so the cost follows the changes, not the table size. For
every table it builds three small fact sets and validates a suite on each:

* ``target_rows``: the state readers will see in the touched buckets after the
  commit: keys non-null and unique;
* ``target_columns``: one row per declared column: the type written is the type
  declared in the table's manifest;
* ``target_counts``: one row per table: rows before + inserts − deletes = rows after
  (inserts and deletes counted from the applied LCRs; an UPDATE that moves a key
  counts as both; a replayed LCR whose exact image the table already holds counts as
  neither, since applying the same LCR twice does no harm).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.apply.target import FileEntry, TargetCatalog, TargetTable, resolve
from changeflow.config import PipelineConfig
from changeflow.quality import quarantine, results
from changeflow.quality.policy import QualityError, QualityReport, blocking_policy, log_warnings
from changeflow.quality.validator import validate

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

Written = list[tuple[TargetTable, list[FileEntry]]]
Writes = Sequence[tuple[Any, ...]]  # (table, files, ...) as the apply engine returns them


def _state(spark: SparkSession, table: TargetTable, paths: list[str]) -> DataFrame:
    """The resolved rows of the given files (empty when there are none)."""
    if not paths:
        return spark.createDataFrame([], table.spark_schema())
    return resolve(spark.read.schema(table.spark_schema()).parquet(*paths), table.key_columns)


def _row_facts(table: TargetTable, after: DataFrame) -> DataFrame:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = [F.col(k) for k in table.key_columns]
    not_null = F.lit(True)
    for k in keys:
        not_null = not_null & k.isNotNull()
    same_key = Window.partitionBy(*keys)
    return after.select(
        F.lit(table.name).alias("table_name"),
        F.to_json(F.struct(*keys)).alias("key"),
        not_null.alias("key_not_null"),
        (F.count(F.lit(1)).over(same_key) == 1).alias("key_unique"),
    )


def _key(table: TargetTable, side: str) -> list[Column]:
    """The key columns of a table, read from an LCR's old or new value map."""
    from pyspark.sql import functions as F

    types = dict(table.columns)
    out = []
    for k in table.key_columns:
        lt = lcr.LOGICAL_TYPES[types[k]]
        out.append(F.col(side).getItem(k.upper()).getField(lt.field).cast(lt.spark_type)
                   .alias(k))
    return out


def _lcr_counts(table: TargetTable, changes: DataFrame, before: DataFrame | None
                ) -> tuple[int, int, int]:
    """(INSERTs, DELETEs, key-moving UPDATEs) among one table's applied LCRs.

    An INSERT or DELETE whose exact image (key, commit position, position, deleted) is
    already in the table's files is a replay, which changes nothing: it is not counted,
    so applying the same LCR twice still reconciles.
    """
    from pyspark.sql import functions as F

    owner, name = table.name.upper().split(".", 1)
    mine = changes.where((F.upper("object_owner") == owner) & (F.upper("object_name") == name))
    cmd = F.col("command_type")
    meta = [F.col("commit_scn").alias("_cf_scn"), F.col("position").alias("_cf_pos")]
    ins = mine.where(cmd == "INSERT").select(*_key(table, "new_values"), *meta,
                                             F.lit(False).alias("_cf_deleted"))
    dels = mine.where(cmd == "DELETE").select(*_key(table, "old_values"), *meta,
                                              F.lit(True).alias("_cf_deleted"))
    on = [*table.key_columns, "_cf_scn", "_cf_pos", "_cf_deleted"]
    if before is not None:
        seen = before.select(*on)
        ins, dels = (df.join(seen, on, "left_anti") for df in (ins, dels))
    # A struct, not an array: key columns may have different types.
    old_key = F.struct(*_key(table, "old_values"))
    new_key = F.struct(*_key(table, "new_values"))
    moved = mine.where((cmd == "UPDATE") & F.col("old_values").isNotNull()
                       & ~old_key.eqNullSafe(new_key)).count()
    return ins.count(), dels.count(), moved


def _facts(spark: SparkSession, catalog: TargetCatalog, written: Written,
           changes: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame]:
    """The three fact sets: rows after (touched buckets), declared columns, row counts."""
    from functools import reduce

    row_parts, col_rows, count_rows = [], [], []
    for table, files in written:
        touched = {f.bucket for f in files}
        old = [f.path for f in catalog.files(table.name) if f.bucket in touched]
        new = [f.path for f in files]
        before = _state(spark, table, old).count()
        after = _state(spark, table, old + new)
        n_after = after.count()
        raw = spark.read.schema(table.spark_schema()).parquet(*old) if old else None
        ins, dels, moved = _lcr_counts(table, changes, raw)
        count_rows.append((table.name, before, ins + moved, dels + moved, n_after,
                           before + ins - dels))
        row_parts.append(_row_facts(table, after))
        physical = {f.name: f.dataType.simpleString()
                    for f in spark.read.parquet(*new).schema.fields} if new else {}
        for col, ltype in table.columns:
            declared = lcr.spark_type(lcr.LOGICAL_TYPES[ltype].spark_type).simpleString()
            got = physical.get(col, declared if not new else None)
            col_rows.append((table.name, col, declared, got, got == declared))
    rows = reduce(lambda a, b: a.unionByName(b), row_parts)
    cols = spark.createDataFrame(col_rows, "table_name string, column string, declared string, "
                                           "written string, type_as_declared boolean")
    cnts = spark.createDataFrame(count_rows, "table_name string, rows_before long, inserts long, "
                                             "deletes long, rows_after long, expected_after long")
    return rows, cols, cnts


def check_target(
    spark: SparkSession, cfg: PipelineConfig, *, stage: str, catalog: TargetCatalog,
    written: Writes, changes: DataFrame,
) -> QualityReport | None:
    """Validate an apply's written, uncommitted target changes; quarantine them on failure.

    A no-op (returns ``None``) when quality is disabled or nothing was written.

    Args:
        spark: the session.
        cfg: the pipeline (its ``quality:`` section decides what blocks).
        stage: e.g. ``apply:apply_dbs2``.
        catalog: the target catalog of the apply's site.
        written: per table, the header after evolution and the new delta files
            (further tuple items are ignored).
        changes: the row LCRs this apply run applies.

    Raises:
        QualityError: a blocking check failed; the delta files were quarantined and the
            manifests were not committed.
    """
    tables: Written = [(w[0], w[1]) for w in written if w[1]]
    if not tables or not cfg.quality.enabled:
        return None
    started = time.monotonic()
    policy = blocking_policy(cfg)
    subject = ",".join(t.name for t, _ in tables)
    report = QualityReport(stage, subject, uuid.uuid4().hex, None)
    rows, cols, cnts = _facts(spark, catalog, tables, changes)
    rows = rows.persist()
    try:
        report.n_rows = rows.count()
        for suite, df in (("target_rows", rows), ("target_columns", cols),
                          ("target_counts", cnts)):
            run = validate(df, suite, blocking=policy)
            for c in run.results:
                if not c.success:
                    bad = (df.where(f"NOT {c.kwargs['column']}") if "column" in c.kwargs
                           else df.where(f"{c.kwargs['column_A']} <> {c.kwargs['column_B']}"))
                    k = cfg.quality.sample_rows
                    c.samples = [r.asDict() for r in bad.limit(k).collect()]
            report.runs.append(run)
    finally:
        rows.unpersist()
    report.seconds = time.monotonic() - started
    if report.status == "failed":
        report.quarantine_path = _quarantine(spark, catalog, tables, report)
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


def _quarantine(spark: SparkSession, catalog: TargetCatalog, written: Written,
                report: QualityReport) -> str:
    """Move every table's delta directory to quarantine. Returns the quarantine root used."""
    dests = []
    for table, files in written:
        delta_dir = files[0].path.split("/_cf_bucket=", 1)[0]
        dest = quarantine.target_location(catalog.target_root, table.name, delta_dir)
        dests.append(dest)
    report.quarantine_path = dests[0] if len(dests) == 1 else ",".join(dests)
    for (_table, files), dest in zip(written, dests, strict=True):
        quarantine.quarantine(spark, files[0].path.split("/_cf_bucket=", 1)[0], dest,
                              report.to_dict())
    return report.quarantine_path
