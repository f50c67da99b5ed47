"""Keeping target tables cheap to read: Iceberg's own maintenance procedures.

An apply writes merge-on-read: new rows, and delete files naming the rows they replace.
Reads pay for the delete files and for many small data files, so after a run the apply
maintains each table it wrote (:func:`maintain`), with Iceberg's procedures, when the
table's current snapshot says it has grown past the policy (the cost is amortised over
the applies that caused it, not paid by each):

* ``rewrite_data_files`` when deleted rows exceed ``delete_ratio`` of the table's
  records, or data files number more than ``files_per_bucket`` per bucket: data files
  with deletes are rewritten without the deleted rows (and the delete files that then
  apply to nothing are removed), small files are merged;
* ``expire_snapshots`` of snapshots older than ``expire_after_hours`` (keeping the last
  ``retain_last``): time travel reaches back that far, and the files only they
  reference are deleted.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import TYPE_CHECKING, Any

from changeflow.targets.catalog import IcebergTargets
from changeflow.targets.policy import MaintenancePolicy
from changeflow.targets.tables import q

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def due(summary: dict[str, str], buckets: int, policy: MaintenancePolicy) -> str | None:
    """Why a table's data files should be rewritten now (None: not yet).

    >>> p = MaintenancePolicy()
    >>> due({"total-records": "1000", "total-position-deletes": "50",
    ...      "total-data-files": "16"}, 16, p) is None
    True
    >>> due({"total-records": "1000", "total-position-deletes": "150",
    ...      "total-data-files": "16"}, 16, p)
    'deleted rows 150 of 1000 records (> 0.1)'
    """
    records = int(summary.get("total-records", 0))
    deletes = int(summary.get("total-position-deletes", 0)) + int(
        summary.get("total-equality-deletes", 0))
    files = int(summary.get("total-data-files", 0))
    if records and deletes > policy.delete_ratio * records:
        return f"deleted rows {deletes} of {records} records (> {policy.delete_ratio})"
    if files > policy.files_per_bucket * max(buckets, 1):
        return f"{files} data files (> {policy.files_per_bucket} per bucket of {buckets})"
    return None


def maintain(spark: SparkSession, targets: IcebergTargets, table: str,
             policy: MaintenancePolicy) -> dict[str, Any]:
    """Maintain one table if its current snapshot says so; returns what was done."""
    done: dict[str, Any] = {}
    header = targets.get(spark, table) if policy.enabled else None
    if header is None:
        return done
    jt = targets.java_table(spark, table)
    snap = jt.currentSnapshot() if jt is not None else None
    if snap is None:
        return done
    why = due(dict(snap.summary()), header.buckets, policy)
    proc = f"{q(targets.name)}.system"
    if why is not None:
        started = time.monotonic()
        row = spark.sql(
            f"CALL {proc}.rewrite_data_files(table => '{targets.ident(table)}', options => map("
            "'delete-file-threshold', '1', 'remove-dangling-deletes', 'true'))").first()
        done["rewrite_data_files"] = {"why": why, "seconds": time.monotonic() - started,
                                      **(row.asDict() if row is not None else {})}
        log.info("table %s: rewrote its data files (%s) in %.1f s", table, why,
                 done["rewrite_data_files"]["seconds"])
    oldest = _oldest(jt)
    limit = dt.datetime.now(dt.UTC) - dt.timedelta(hours=policy.expire_after_hours)
    if oldest is not None and oldest < limit:
        stamp = limit.strftime("%Y-%m-%d %H:%M:%S.%f")
        row = spark.sql(f"CALL {proc}.expire_snapshots(table => '{targets.ident(table)}', "
                        f"older_than => TIMESTAMP '{stamp}', "
                        f"retain_last => {policy.retain_last})").first()
        done["expire_snapshots"] = row.asDict() if row is not None else {}
    return done


def _oldest(jt: Any) -> dt.datetime | None:
    """When the table's oldest snapshot was committed."""
    times = [s.timestampMillis() for s in jt.snapshots()]
    if not times:
        return None
    return dt.datetime.fromtimestamp(min(times) / 1000, dt.UTC)
