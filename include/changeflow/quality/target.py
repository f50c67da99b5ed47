"""Checking an apply's staged, unpublished changes to its Iceberg target tables.

:func:`check_target` runs inside :func:`changeflow.apply.engine.apply_once` after each
table's changes are staged on a branch (:func:`changeflow.targets.commit.stage`) and
before any is published: Iceberg's write-audit-publish. Its cost follows the changes,
not the table: it reads the branch's rows of the changed keys only (the key column and
the semi-join with the keys) and the snapshot summaries Iceberg keeps. Per table, one
aggregate rolls the changed keys up to one row, and the ``target_changes`` suite is
validated on those rows in one GX call (its pandas engine: the rows are on the driver):

* ``target_key_not_null``, ``target_key_unique``: key columns non-null, keys unique
  (among the changed keys, as the branch holds them);
* ``target_rows_as_applied``: each changed key present or absent as the applied LCRs
  say;
* ``target_column_types``: the table's columns have the types the LCRs declare;
* ``target_rows_reconcile``: the table's row count as Iceberg records it after the
  write equals the count before, plus keys the applied LCRs add, minus keys they remove.

A failed check publishes nothing: every staged write is kept as a branch
``quarantine_...`` of its table (readable as ``<table>.branch_quarantine_...``).
Offending keys are sampled only when a check fails.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.config import PipelineConfig
from changeflow.quality import results
from changeflow.quality.policy import QualityError, QualityReport, blocking_policy, log_warnings
from changeflow.quality.validator import validate
from changeflow.targets import commit as tcommit
from changeflow.targets.catalog import IcebergTargets, TargetTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class TargetWrite:
    """One table's staged apply output, as the check needs it.

    Args:
        table: the header the pass wrote with (after evolution).
        staged: the staged write (branch and snapshot).
        expected: per changed key, ``before`` and ``present`` (after this apply, as the
            applied LCRs say); None to skip the row and count checks.
        published: an earlier attempt of the pass published it (checked then).
    """

    table: TargetTable
    staged: tcommit.Staged
    expected: DataFrame | None = None
    published: bool = False

    @property
    def checks_rows(self) -> bool:
        """Whether what the rows should be after the commit is known (row checks run)."""
        return self.expected is not None


def key_facts(spark: SparkSession, targets: IcebergTargets, w: TargetWrite) -> DataFrame:
    """One row per changed key: the key, and whether it passes each per-key check."""
    from pyspark.sql import functions as F

    keys = w.table.key_columns
    assert w.expected is not None
    branch = tcommit.read_branch(spark, targets, w.staged).select(*keys)
    after = branch.join(F.broadcast(w.expected.select(*keys)), keys, "left_semi") \
        .groupBy(*keys).agg(F.count(F.lit(1)).alias("_n"))
    facts = w.expected.join(after, keys, "full_outer")
    not_null = F.lit(True)
    for k in keys:
        not_null = not_null & F.col(k).isNotNull()
    after_present = F.col("_n").isNotNull()
    return facts.select(
        F.lit(w.table.name).alias("table_name"),
        F.to_json(F.struct(*[F.col(k) for k in keys])).alias("key"),
        not_null.alias("key_not_null"),
        F.coalesce(F.col("_n") <= 1, F.lit(True)).alias("key_unique"),
        (after_present == F.coalesce("present", "before", F.lit(False))).alias("as_applied"),
        F.coalesce("before", F.lit(False)).alias("before"),
        F.coalesce("present", "before", F.lit(False)).alias("expected"),
        after_present.alias("after"))


def _column_types(spark: SparkSession, targets: IcebergTargets,
                  w: TargetWrite) -> list[dict[str, Any]]:
    """Per declared column of a table: declared and written (the table's) type."""
    now = targets.get(spark, w.table.name)
    have = dict(now.columns) if now is not None else {}
    out = []
    for col, ltype in w.table.columns:
        declared = lcr.spark_type(lcr.LOGICAL_TYPES[ltype].spark_type).simpleString()
        got = have.get(col)
        written = lcr.spark_type(lcr.LOGICAL_TYPES[got].spark_type).simpleString() \
            if got else None
        out.append({"table_name": w.table.name, "column": col, "declared": declared,
                    "written": written, "type_as_declared": written == declared})
    return out


def _rollup(spark: SparkSession, targets: IcebergTargets, w: TargetWrite) -> tuple[
        dict[str, Any], DataFrame | None, list[dict[str, Any]]]:
    """The table's row of the ``target_changes`` facts, its key facts and column types."""
    from pyspark.sql import functions as F

    types = _column_types(spark, targets, w)
    before = w.staged.rows_before
    row: dict[str, Any] = {
        "table_name": w.table.name, "keys": 0, "key_not_null_violations": 0,
        "key_unique_violations": 0, "as_applied_violations": 0,
        "column_type_violations": sum(not t["type_as_declared"] for t in types),
        "rows_before": before, "inserts": 0, "deletes": 0,
        "rows_after": w.staged.rows_after, "expected_after": w.staged.rows_after}
    if not w.checks_rows:
        return row, None, types
    facts = key_facts(spark, targets, w)
    bad = lambda c: F.sum((~F.col(c)).cast("long"))  # noqa: E731
    n = facts.agg(
        F.count(F.lit(1)).alias("keys"), bad("key_not_null").alias("nn"),
        bad("key_unique").alias("uq"), bad("as_applied").alias("aa"),
        F.sum((F.col("after") & ~F.col("before")).cast("long")).alias("ins"),
        F.sum((~F.col("after") & F.col("before")).cast("long")).alias("dels"),
        F.sum((F.col("expected") & ~F.col("before")).cast("long")).alias("eins"),
        F.sum((~F.col("expected") & F.col("before")).cast("long")).alias("edels"),
    ).first()
    assert n is not None
    c = {k: int(n[k] or 0) for k in n.asDict()}
    row.update(keys=c["keys"], key_not_null_violations=c["nn"], key_unique_violations=c["uq"],
               as_applied_violations=c["aa"], inserts=c["ins"], deletes=c["dels"],
               expected_after=before + c["eins"] - c["edels"])
    return row, facts, types


_SCHEMA = ("table_name string, keys long, key_not_null_violations long, "
           "key_unique_violations long, as_applied_violations long, "
           "column_type_violations long, rows_before long, inserts long, deletes long, "
           "rows_after long, expected_after long")
def _facts_frame(rows: list[dict[str, Any]]) -> Any:
    """The tables' rows of ``target_changes`` facts as a pandas frame, one row per table.

    The rollup is a handful of rows already on the driver: GX validates it with its
    pandas engine (as the capture's Arrow check does), not with Spark jobs over a
    frame made of them.
    """
    import pandas as pd

    names = [part.split()[0] for part in _SCHEMA.split(", ")]
    frame = pd.DataFrame([[r[n] for n in names] for r in rows], columns=names)
    return frame.astype({n: "string" if n == "table_name" else "int64" for n in names})


_KEY_CHECKS = {"target_key_not_null": "key_not_null", "target_key_unique": "key_unique",
               "target_rows_as_applied": "as_applied"}


def check_target(
    spark: SparkSession, cfg: PipelineConfig, *, stage: str, targets: IcebergTargets,
    writes: Sequence[TargetWrite],
) -> QualityReport | None:
    """Validate an apply's staged, unpublished target changes; quarantine them on failure.

    A no-op (returns ``None``) when quality is disabled or nothing was staged.

    Raises:
        QualityError: a blocking check failed; every staged write was kept as a
            quarantine branch and nothing was published.
    """
    # Every staged table is checked, also one whose write lost every row: what its LCRs
    # say it should hold tells. Writes an earlier attempt published were checked then.
    writes = [w for w in writes if not w.published]
    if not writes or not cfg.quality.enabled:
        return None
    started = time.monotonic()
    policy = blocking_policy(cfg)
    subject = ",".join(w.table.name for w in writes)
    report = QualityReport(stage, subject, uuid.uuid4().hex, None)
    parts = [_rollup(spark, targets, w) for w in writes]
    rows = [p[0] for p in parts]
    report.n_rows = sum(r["keys"] for r in rows)
    run = validate(_facts_frame(rows), "target_changes", blocking=policy)
    for c in run.results:
        if not c.success:
            c.samples = _samples(c.check, parts, cfg.quality.sample_rows)
    report.runs.append(run)
    report.seconds = time.monotonic() - started
    if report.status == "failed":
        report.quarantine_path = _quarantine(spark, targets, writes)
    report.result_id = results.record(
        targets.store, stage=stage, subject=subject, producer=stage, batch_id=report.batch_id,
        status=report.status, n_rows=report.n_rows, seconds=report.seconds,
        checks=[c.to_dict() for c in report.checks], gx=[r.gx_result for r in report.runs],
        quarantine_path=report.quarantine_path,
    )
    if report.status == "failed":
        raise QualityError(report)
    log_warnings(report)
    return report


def _samples(check: str, parts: list[tuple[dict[str, Any], DataFrame | None,
                                           list[dict[str, Any]]]],
             k: int) -> list[dict[str, Any]]:
    """Sample offenders of a failed check (keys, columns or the table's counts)."""
    out: list[dict[str, Any]] = []
    for row, facts, types in parts:
        if check == "target_column_types":
            out += [t for t in types if not t["type_as_declared"]]
        elif check == "target_rows_reconcile" and row["rows_after"] != row["expected_after"]:
            out.append({k2: row[k2] for k2 in ("table_name", "rows_before", "inserts",
                                               "deletes", "rows_after", "expected_after")})
        elif check in _KEY_CHECKS and facts is not None:
            bad = facts.where(f"NOT {_KEY_CHECKS[check]}").limit(k).collect()
            out += [r.asDict() for r in bad]
    return out[:k]


def _quarantine(spark: SparkSession, targets: IcebergTargets,
                writes: Sequence[TargetWrite]) -> str | None:
    """Keep every staged write as a quarantine branch; returns their identifiers."""
    kept = [f"{targets.ident(w.table.name)}.branch_{tcommit.quarantine(spark, targets, w.staged)}"
            .replace("`", "") for w in writes if w.staged.branch.startswith("cf_")]
    return ",".join(kept) or None
