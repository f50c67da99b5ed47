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
from changeflow.spark import concurrently
from changeflow.targets import commit as tcommit
from changeflow.targets import rowdelta
from changeflow.targets.catalog import IcebergTargets, TargetTable

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class TargetWrite:
    """One table's staged apply output, as the check needs it.

    Args:
        table: the header the pass wrote with (after evolution).
        staged: the staged write (branch and snapshot).
        expected: per changed key (Arrow), ``before`` and ``present`` (after this apply,
            as the applied LCRs say); None to skip the row and count checks.
        published: an earlier attempt of the pass published it (checked then).
        changed: the changed keys as a (cached) Spark frame, when the pass has one (else
            the check makes one of ``expected``'s keys).
        located: where the changed keys' rows were at the snapshot the write started
            from (Arrow: key columns and ``_l_file``, ``_l_pos``), when the pass looked
            them up: a row delta's files then tell the keys' rows without a scan.
    """

    table: TargetTable
    staged: tcommit.Staged
    expected: pa.Table | None = None
    published: bool = False
    changed: DataFrame | None = None
    located: pa.Table | None = None

    @property
    def checks_rows(self) -> bool:
        """Whether what the rows should be after the commit is known (row checks run)."""
        return self.expected is not None


def key_facts(spark: SparkSession, targets: IcebergTargets, w: TargetWrite) -> pa.Table:
    """One row per changed key (Arrow, on the driver): the key, and whether it passes
    each per-key check.

    How many rows each changed key has on the branch: where the pass wrote a row delta
    (:func:`changeflow.targets.rowdelta.key_counts`), from the rows it looked up and the
    files the branch's snapshot adds and removes, read back; otherwise one Spark job
    reads the branch (its key columns, semi-joined with the broadcast changed keys). The
    rest is a join of at most as many rows as the pass changed keys.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    keys = w.table.key_columns
    assert w.expected is not None
    expected = w.expected
    after = None
    jt = targets.java_table(spark, w.table.name) if w.located is not None else None
    if jt is not None and w.staged.snapshot is not None:
        after = rowdelta.key_counts(spark, jt, w.staged.snapshot, w.table.snapshot,
                                    w.located, expected.select(keys))
    if after is None:
        changed = w.changed if w.changed is not None else spark.createDataFrame(
            expected.select(keys))
        branch = tcommit.read_branch(spark, targets, w.staged).select(*keys)
        after = branch.join(F.broadcast(changed), keys, "left_semi") \
            .groupBy(*keys).agg(F.count(F.lit(1)).alias("_n")).toArrow()
    facts = expected.join(after.cast(pa.schema(
        [expected.schema.field(k) for k in keys] + [pa.field("_n", pa.int64())])),
        keys, join_type="full outer")
    n = facts["_n"]
    not_null = pa.array([True] * facts.num_rows, pa.bool_())
    for k in keys:
        not_null = pc.and_(not_null, pc.is_valid(facts[k]))
    after_present = pc.is_valid(n)
    before = pc.fill_null(facts["before"], False)
    want = pc.fill_null(pc.coalesce(facts["present"], facts["before"]), False)
    return pa.table({
        **{k: facts[k] for k in keys},
        "key_not_null": not_null,
        "key_unique": pc.fill_null(pc.less_equal(n, 1), True),
        "as_applied": pc.equal(after_present, want),
        "before": before, "expected": want, "after": after_present})


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
        dict[str, Any], pa.Table | None, list[dict[str, Any]]]:
    """The table's row of the ``target_changes`` facts, its key facts and column types."""
    import pyarrow.compute as pc

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
    bad = lambda c: facts.num_rows - pc.sum(facts[c].cast("int64")).as_py() \
        if facts.num_rows else 0  # noqa: E731
    count = lambda m: pc.sum(m.cast("int64")).as_py() or 0  # noqa: E731
    after, was, want = facts["after"], facts["before"], facts["expected"]
    row.update(keys=facts.num_rows, key_not_null_violations=bad("key_not_null"),
               key_unique_violations=bad("key_unique"), as_applied_violations=bad("as_applied"),
               inserts=count(pc.and_(after, pc.invert(was))),
               deletes=count(pc.and_(pc.invert(after), was)),
               expected_after=before + count(pc.and_(want, pc.invert(was)))
               - count(pc.and_(pc.invert(want), was)))
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
    writes: Sequence[TargetWrite], workers: int = 1,
) -> QualityReport | None:
    """Validate an apply's staged, unpublished target changes; quarantine them on failure.

    A no-op (returns ``None``) when quality is disabled or nothing was staged.

    Args:
        workers: how many tables are checked at once (driver threads).

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
    parts = concurrently(spark, lambda w: _rollup(spark, targets, w), writes, workers)
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


def _samples(check: str, parts: list[tuple[dict[str, Any], pa.Table | None,
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
            out += _offenders(row["table_name"], facts, _KEY_CHECKS[check], k)
    return out[:k]


def _offenders(table: str, facts: pa.Table, check: str, k: int) -> list[dict[str, Any]]:
    """Up to ``k`` changed keys failing one per-key check, as sample rows."""
    import json

    import pyarrow.compute as pc

    bad = facts.filter(pc.invert(facts[check])).slice(0, k).to_pylist()
    names = [c for c in facts.column_names if c not in _FACTS]
    return [{"table_name": table,
             "key": json.dumps({c: r[c] for c in names}, default=str, separators=(",", ":")),
             **{c: r[c] for c in _FACTS}} for r in bad]


_FACTS = ("key_not_null", "key_unique", "as_applied", "before", "expected", "after")


def _quarantine(spark: SparkSession, targets: IcebergTargets,
                writes: Sequence[TargetWrite]) -> str | None:
    """Keep every staged write as a quarantine branch; returns their identifiers."""
    kept = [f"{targets.ident(w.table.name)}.branch_{tcommit.quarantine(spark, targets, w.staged)}"
            .replace("`", "") for w in writes if w.staged.branch.startswith("cf_")]
    return ",".join(kept) or None
