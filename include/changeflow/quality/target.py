"""Checking an apply's written, uncommitted changes to its Parquet target tables.

:func:`check_target` runs inside :func:`changeflow.apply.engine.apply_once` after the
delta files are written and before the manifests are committed. Its cost follows the
changes, not the table: it reads only the new delta files and the rows of the
changed keys that the apply already looked up (for conflict detection), never whole
buckets. Per table, one aggregate rolls the changed keys, as readers will see them
after the commit (the looked-up images and the new deltas, resolved the way reads
resolve them), up to one row, and the ``target_changes`` suite is validated on those
rows in one GX call (its pandas engine: the rows are on the driver):

* ``target_key_not_null``, ``target_key_unique``: key columns non-null, keys unique;
* ``target_rows_as_applied``: each changed key present or absent as the applied LCRs
  say;
* ``target_column_types``: the type written is the type the manifest declares;
* ``target_rows_reconcile``: the recorded row count before, plus keys the deltas add,
  minus keys they remove, equals the count the applied LCRs imply.

Offending keys are sampled only when a check fails.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.apply.target import META, FileEntry, TargetCatalog, TargetTable, resolve
from changeflow.config import PipelineConfig
from changeflow.quality import quarantine, results, target_arrow
from changeflow.quality.policy import QualityError, QualityReport, blocking_policy, log_warnings
from changeflow.quality.validator import validate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Whether the rollup of a local target's changes is computed with Arrow on the driver when
# it can be shown to be the Spark path's (:mod:`.target_arrow`); tests turn it off.
ARROW = True


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
        before_arrow, expected_arrow: ``before`` and ``expected`` as Arrow tables, from
            a pass done on the driver (:mod:`changeflow.apply.driver_pass`), instead of
            the frames.
    """

    table: TargetTable
    files: list[FileEntry]
    before: DataFrame | None = None
    expected: DataFrame | None = None
    rows_before: int = 0
    n_rows: int = 0
    rows_after: int | None = None
    before_arrow: Any = None
    expected_arrow: Any = None

    @property
    def checks_rows(self) -> bool:
        """Whether what the rows should be after the commit is known (row checks run)."""
        return self.expected is not None or self.expected_arrow is not None

    def as_frames(self, spark: SparkSession) -> None:
        """Make ``before`` and ``expected`` frames from their Arrow tables (for the Spark
        rollup)."""
        if self.expected is None and self.expected_arrow is not None:
            self.expected = spark.createDataFrame(self.expected_arrow)
        if self.before is None and self.before_arrow is not None:
            self.before = spark.createDataFrame(self.before_arrow)


def _after(spark: SparkSession, w: TargetWrite) -> DataFrame:
    """Per changed key, the newest image after the commit (tombstones kept)."""
    keys = w.table.key_columns
    cols = [*keys, *META]
    schema = w.table.spark_schema()
    new = (spark.read.schema(schema).parquet(*[f.path for f in w.files]) if w.files
           else spark.createDataFrame([], schema)).select(*cols)
    raw = new if w.before is None else w.before.select(*cols).unionByName(new)
    return resolve(raw, keys, keep_deleted=True)


def key_facts(spark: SparkSession, w: TargetWrite) -> DataFrame:
    """One row per changed key: the key, and whether it passes each per-key check."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = w.table.key_columns
    after = _after(spark, w).select(*keys, (~F.col("_cf_deleted")).alias("_after"))
    assert w.expected is not None
    facts = w.expected.join(after, keys, "full_outer")
    not_null = F.lit(True)
    for k in keys:
        not_null = not_null & F.col(k).isNotNull()
    after_present = F.coalesce("_after", "before", F.lit(False))
    return facts.select(
        F.lit(w.table.name).alias("table_name"),
        F.to_json(F.struct(*[F.col(k) for k in keys])).alias("key"),
        not_null.alias("key_not_null"),
        (F.count(F.lit(1)).over(Window.partitionBy(*keys)) == 1).alias("key_unique"),
        (after_present == F.coalesce("present", "before", F.lit(False))).alias("as_applied"),
        F.coalesce("before", F.lit(False)).alias("before"),
        F.coalesce("present", "before", F.lit(False)).alias("expected"),
        after_present.alias("after"))


def _column_types(spark: SparkSession, w: TargetWrite) -> list[dict[str, Any]]:
    """Per declared column of a table: declared and written type."""
    new = [f.path for f in w.files]
    physical = _written_types(spark, w)
    if physical is None:
        physical = {f.name: f.dataType.simpleString()
                    for f in spark.read.parquet(*new).schema.fields} if new else {}
    out = []
    for col, ltype in w.table.columns:
        declared = lcr.spark_type(lcr.LOGICAL_TYPES[ltype].spark_type).simpleString()
        got = physical.get(col, declared if not new else None)
        out.append({"table_name": w.table.name, "column": col, "declared": declared,
                    "written": got, "type_as_declared": got == declared})
    return out


def _written_types(spark: SparkSession, w: TargetWrite) -> dict[str, str] | None:
    """The written types read from the local files' footers, when every file holds every
    column it has exactly as Spark writes the declared type (then Spark reads back the
    declared type); None: ask Spark."""
    import pyarrow.parquet as pq

    from changeflow.apply import arrow_files as af

    paths = af.local_paths(spark, w.files)
    want = af.arrow_schema(w.table.spark_schema(with_meta=False))
    if not paths or want is None:
        return None
    declared = {c: lcr.spark_type(lcr.LOGICAL_TYPES[t].spark_type).simpleString()
                for c, t in w.table.columns}
    seen: set[str] | None = None
    for p in paths:
        schema = pq.read_schema(p)
        if len(set(schema.names)) != len(schema.names):
            return None
        for f in want:
            if f.name in schema.names and not schema.field(f.name).type.equals(f.type):
                return None
        names = {n for n in schema.names if n in declared}
        seen = names if seen is None else seen & names
        if seen != names:
            return None  # files disagree: Spark's answer depends on the file it reads
    return {c: declared[c] for c in seen or set()}


def _rollup(spark: SparkSession, w: TargetWrite) -> tuple[
        dict[str, Any], DataFrame | target_arrow.ArrowFacts | None, list[dict[str, Any]]]:
    """The table's row of the ``target_changes`` facts, its key facts and column types."""
    from pyspark.sql import functions as F

    types = _column_types(spark, w)
    row: dict[str, Any] = {
        "table_name": w.table.name, "keys": 0, "key_not_null_violations": 0,
        "key_unique_violations": 0, "as_applied_violations": 0,
        "column_type_violations": sum(not t["type_as_declared"] for t in types),
        "rows_before": w.rows_before, "inserts": 0, "deletes": 0,
        "rows_after": w.rows_before, "expected_after": w.rows_before}
    if not w.checks_rows:
        return row, None, types
    fast = target_arrow.rollup(spark, w) if ARROW else None
    if fast is not None:
        counts, table = fast
        return _counted(row, w, counts), target_arrow.ArrowFacts(table, w.table.key_columns), \
            types
    w.as_frames(spark)
    facts = key_facts(spark, w)
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
    return _counted(row, w, {k: int(n[k] or 0) for k in n.asDict()}), facts, types


def _counted(row: dict[str, Any], w: TargetWrite, n: dict[str, int]) -> dict[str, Any]:
    """The table's facts row from the aggregate's counts; sets ``w.rows_after``."""
    w.rows_after = w.rows_before + n["ins"] - n["dels"]
    row.update(keys=n["keys"], key_not_null_violations=n["nn"], key_unique_violations=n["uq"],
               as_applied_violations=n["aa"], inserts=n["ins"], deletes=n["dels"],
               rows_after=w.rows_after, expected_after=w.rows_before + n["eins"] - n["edels"])
    return row


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
    spark: SparkSession, cfg: PipelineConfig, *, stage: str, catalog: TargetCatalog,
    writes: Sequence[TargetWrite],
) -> QualityReport | None:
    """Validate an apply's written, uncommitted target changes; quarantine them on failure.

    A no-op (returns ``None``) when quality is disabled or nothing was written.

    Raises:
        QualityError: a blocking check failed; the delta files were quarantined and the
            manifests were not committed.
    """
    # A table is checked when the pass wrote to it or its LCRs say what it should hold:
    # a delta that lost every row (an empty write) must not pass unchecked.
    writes = [w for w in writes if w.files or w.checks_rows]
    if not writes or not cfg.quality.enabled:
        return None
    started = time.monotonic()
    policy = blocking_policy(cfg)
    subject = ",".join(w.table.name for w in writes)
    report = QualityReport(stage, subject, uuid.uuid4().hex, None)
    parts = [_rollup(spark, w) for w in writes]
    rows = [p[0] for p in parts]
    report.n_rows = sum(r["keys"] for r in rows)
    run = validate(_facts_frame(rows), "target_changes", blocking=policy)
    for c in run.results:
        if not c.success:
            c.samples = _samples(c.check, parts, cfg.quality.sample_rows)
    report.runs.append(run)
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


def _samples(check: str, parts: list[tuple[
        dict[str, Any], DataFrame | target_arrow.ArrowFacts | None, list[dict[str, Any]]]],
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
            if isinstance(facts, target_arrow.ArrowFacts):
                out += target_arrow.samples(facts.table, row["table_name"], facts.keys,
                                            _KEY_CHECKS[check], k)
            else:
                bad = facts.where(f"NOT {_KEY_CHECKS[check]}").limit(k).collect()
                out += [r.asDict() for r in bad]
    return out[:k]


def _quarantine(spark: SparkSession, catalog: TargetCatalog, writes: Sequence[TargetWrite],
                report: QualityReport) -> str | None:
    """Move every table's delta directory to quarantine. Returns the quarantine root used
    (None: no table was written to)."""
    writes = [w for w in writes if w.files]  # a table the pass wrote nothing to has none
    if not writes:
        return None
    dests = []
    for w in writes:
        delta_dir = w.files[0].path.split("/_cf_bucket=", 1)[0]
        dests.append(quarantine.target_location(catalog.target_root, w.table.name, delta_dir))
    report.quarantine_path = dests[0] if len(dests) == 1 else ",".join(dests)
    for w, dest in zip(writes, dests, strict=True):
        quarantine.quarantine(spark, w.files[0].path.split("/_cf_bucket=", 1)[0], dest,
                              report.to_dict())
    return report.quarantine_path
