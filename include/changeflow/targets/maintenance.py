"""Keeping target tables cheap to read: Iceberg's own maintenance procedures.

An apply writes merge-on-read: new rows, and delete files naming the rows they replace.
Reads pay for deleted rows still in data files, for many small data files and for many
delete files, so after a run the apply maintains each table it wrote (:func:`maintain`)
with Iceberg's procedures, when the table's snapshot summary says it has grown past the
policy (a look at the summary: nothing to pay while nothing is due). The cost follows
the changes: only the files that need it are rewritten.

* ``rewrite_data_files`` (bin-pack) when data files number more than
  ``files_per_bucket`` per bucket (beyond the full-size files the table's bytes fill),
  deleted rows more than ``delete_ratio`` of the table's records, or an apply has
  deleted ``delete_ratio`` of some data file's rows (the apply's row delta records the
  largest share in the snapshot summary: :func:`changeflow.targets.plans.hottest`;
  after another writer's snapshot, a ``MERGE INTO`` of partial images or any write to a
  format-version 3 table, the scan plan tells it, when the table's deleted rows could
  make a file due at all: :func:`hottest_now`).
  It rewrites, without their deleted rows:

  - the *small* files: smaller than a bucket's share of the table divided by
    ``files_per_bucket`` (:func:`small_file_bytes`), two or more in a bucket: the files
    the applies added, merged into one per bucket;
  - the files whose own deleted share reaches ``delete_ratio`` (Iceberg's
    ``delete-ratio-threshold``): where the changes concentrate, those files only. When
    deleted rows made the rewrite due, the files past :data:`NEAR` of the ratio go with
    them (:func:`delete_threshold`): a table changed evenly has all its files near the
    ratio at once, and leaving those just under it would rewrite them one apply later,
    a second pass over the table;

  and removes the delete files that then apply to nothing. Large files with few
  deleted rows are left as they are. A merge due for small files alone waits when the
  last applies' pace makes the rewrite of deleted rows due within :data:`SOON` applies
  (:func:`deferral`): that rewrite merges them too, and whatever the merge wrote now it
  would write again (an operator's ``changeflow targets maintain`` does not wait).
* ``rewrite_data_files`` of a group of buckets, where the policy spreads the rewrite of
  deleted rows (``spread``, the default) and the changes spread over the table: a
  group of buckets at a time, each group in its turn, evenly spaced over the applies
  (:mod:`.spread`, :func:`_spread`), so that no apply pays for the whole table; a
  merge of small files does not wait for it.
* ``rewrite_position_delete_files`` (format version 2) when there are more delete
  files than data files: some data file has several (an apply keeps one per data file,
  :mod:`.rowdelta`; tables written with partition-scoped deletes do not), and they are
  merged.
* ``expire_snapshots`` of snapshots older than ``expire_after_hours`` (keeping the last
  ``retain_last``): time travel reaches back that far, and the files only they
  reference are deleted.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from changeflow.jvm import java_dict
from changeflow.targets.catalog import IcebergTargets
from changeflow.targets.plans import HOTTEST, bucket_shares, hottest_growth, planned_hottest
from changeflow.targets.policy import MaintenancePolicy
from changeflow.targets.spread import (
    GROUP,
    counted_rows,
    due_buckets,
    rewrite_data_files,
    spreads,
    turn,
)
from changeflow.targets.tables import q

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
#: Iceberg's default ``write.target-file-size-bytes`` (512 MiB)
TARGET_FILE_SIZE = 512 * 1024 * 1024
#: a merge of small files waits for a rewrite of deleted rows the applies' pace makes due
#: within this many applies (:func:`deferral`)
SOON = 2
#: once deleted rows make a rewrite due, the share of ``delete_ratio`` from which a data
#: file's deleted rows put it in the rewrite too
NEAR = 0.8


def due(summary: dict[str, str], buckets: int, policy: MaintenancePolicy,
        target: int = TARGET_FILE_SIZE, hot: float = 0.0) -> str | None:
    """Why a table's data files should be rewritten, as its snapshot summary tells
    (None: not due).

    Data files count as too many past ``files_per_bucket`` per bucket more than the
    files of the target size the table's bytes fill (a large table's full-size files
    are not a reason to rewrite). ``hot`` is the largest share of a data file's rows
    deleted since the last rewrite (:func:`changeflow.targets.plans.hottest`).

    >>> p = MaintenancePolicy()
    >>> due({"total-records": "1000", "total-position-deletes": "50",
    ...      "total-data-files": "16"}, 16, p) is None
    True
    >>> due({"total-records": "1000", "total-position-deletes": "350",
    ...      "total-data-files": "16"}, 16, p)
    'deleted rows 350 of 1000 records (> 0.3)'
    >>> due({"total-records": "1000", "total-data-files": "200"}, 16, p)
    '200 data files (> 8 per bucket of 16)'
    >>> due({"total-records": "1000", "total-data-files": "200",
    ...      "total-files-size": str(100 * 2**29)}, 16, p) is None
    True
    >>> due({"total-records": "1000", "total-position-deletes": "20",
    ...      "total-data-files": "16"}, 16, p, hot=0.35)
    'a data file with 35% of its rows deleted (>= 0.3)'
    """
    why = _for_deletes(summary, policy, hot)
    if why is not None:
        return why
    _, _, files = _counts(summary)
    if files > _file_limit(summary, buckets, policy, target):
        full = int(summary.get("total-files-size", 0)) // max(target, 1)
        more = f" and {full} files of the target size" if full else ""
        return (f"{files} data files (> {policy.files_per_bucket} per bucket of "
                f"{buckets}{more})")
    return None


def _file_limit(summary: dict[str, str], buckets: int, policy: MaintenancePolicy,
                target: int) -> int:
    full = int(summary.get("total-files-size", 0)) // max(target, 1)
    return policy.files_per_bucket * max(buckets, 1) + full


def deferral(summary: dict[str, str], buckets: int, policy: MaintenancePolicy,
             target: int = TARGET_FILE_SIZE, hot: float = 0.0,
             growth: float | None = None) -> str | None:
    """Why a merge of small files (:func:`due` for files alone) waits, or None: when the
    pace of the last applies (``growth``, the rise of the largest share of a data file's
    rows deleted, :func:`changeflow.targets.plans.hottest_growth`) makes the rewrite of
    deleted rows due within :data:`SOON` applies. That rewrite merges the small files
    too, and whatever the merge wrote now it would write again. A merge waits only while
    the table has at most twice the data files the policy allows.

    >>> p = MaintenancePolicy(files_per_bucket=8)
    >>> s = {"total-records": "1000", "total-data-files": "144"}
    >>> deferral(s, 16, p, hot=0.28, growth=0.01)
    'deleted rows make a rewrite due within 2 applies (28% of a data file, 1.0% more an apply)'
    >>> deferral(s, 16, p, hot=0.25, growth=0.01) is None  # five applies away
    True
    >>> deferral(s, 16, p, hot=0.28) is None  # no pace known
    True
    >>> deferral({**s, "total-data-files": "300"}, 16, p, hot=0.29, growth=0.01) is None
    True
    """
    if growth is None or growth <= 0:
        return None
    _, _, files = _counts(summary)
    if files > 2 * _file_limit(summary, buckets, policy, target):
        return None
    applies = (policy.delete_ratio - hot) / growth
    if applies > SOON + 1e-9:
        return None
    n = max(1, round(applies))
    return (f"deleted rows make a rewrite due within {n} appl{'y' if n == 1 else 'ies'} "
            f"({hot:.0%} of a data file, {growth:.1%} more an apply)")


def _for_deletes(summary: dict[str, str], policy: MaintenancePolicy, hot: float
                 ) -> str | None:
    records, deletes, _ = _counts(summary)
    if records and deletes > policy.delete_ratio * records:
        return f"deleted rows {deletes} of {records} records (> {policy.delete_ratio})"
    if hot >= policy.delete_ratio:
        return f"a data file with {hot:.0%} of its rows deleted (>= {policy.delete_ratio})"
    return None


def delete_threshold(summary: dict[str, str], policy: MaintenancePolicy, hot: float = 0.0
                     ) -> float:
    """The share of a data file's rows deleted from which a due rewrite takes the file
    (Iceberg's ``delete-ratio-threshold``): ``delete_ratio``, or :data:`NEAR` of it when
    deleted rows made the rewrite due (:func:`due`'s first two reasons).

    >>> p = MaintenancePolicy()
    >>> delete_threshold({"total-records": "1000", "total-data-files": "200"}, p)
    0.3
    >>> round(delete_threshold({"total-records": "1000"}, p, hot=0.32), 9)
    0.24
    >>> delete_threshold({}, MaintenancePolicy(delete_ratio=1e-9), hot=0.5) > 0
    True
    """
    if _for_deletes(summary, policy, hot) is not None:
        return policy.delete_ratio * NEAR
    return policy.delete_ratio


def rewrite_plan(summary: dict[str, str], buckets: int, policy: MaintenancePolicy,
                 target: int = TARGET_FILE_SIZE, hot: float = 0.0,
                 growth: Callable[[], float | None] = lambda: None
                 ) -> tuple[str | None, str | None]:
    """Why the data files are due for a rewrite (:func:`due`, None: not due) and, where
    they are due for small files alone, why the merge waits (:func:`deferral`, None: it
    does not); ``growth`` (the applies' pace) is asked for only then.

    >>> p = MaintenancePolicy(files_per_bucket=8)
    >>> s = {"total-records": "1000", "total-data-files": "144"}
    >>> rewrite_plan(s, 16, p, hot=0.05, growth=lambda: 0.01)
    ('144 data files (> 8 per bucket of 16)', None)
    >>> rewrite_plan(s, 16, p, hot=0.29, growth=lambda: 0.01)[1]
    'deleted rows make a rewrite due within 1 apply (29% of a data file, 1.0% more an apply)'
    """
    why = due(summary, buckets, policy, target, hot)
    if why is None or _for_deletes(summary, policy, hot) is not None:
        return why, None
    return why, deferral(summary, buckets, policy, target, hot, growth())


def small_file_bytes(summary: dict[str, str], buckets: int, policy: MaintenancePolicy,
                     target: int = TARGET_FILE_SIZE) -> int:
    """The size under which a data file is small: a bucket's share of the table's bytes
    divided by ``files_per_bucket`` (a bucket of more files than that has small ones),
    and below Iceberg's own minimum (three quarters of the target file size).

    >>> small_file_bytes({"total-files-size": "160000"}, 4, MaintenancePolicy())
    5000
    """
    size = int(summary.get("total-files-size", 0))
    share = size // (max(buckets, 1) * policy.files_per_bucket)
    return max(1, min(share, int(target * 0.75)))


def _counts(summary: dict[str, str]) -> tuple[int, int, int]:
    records = int(summary.get("total-records", 0))
    deletes = int(summary.get("total-position-deletes", 0)) + int(
        summary.get("total-equality-deletes", 0))
    return records, deletes, int(summary.get("total-data-files", 0))


def maintain(spark: SparkSession, targets: IcebergTargets, table: str,
             policy: MaintenancePolicy, *, defer: bool = True) -> dict[str, Any]:
    """Maintain one table if it is due (see the module docstring); returns what was done
    (per procedure: why, seconds, and the procedure's own counts; ``deferred``: a merge
    of small files that waits for a rewrite of deleted rows, :func:`deferral`, unless
    ``defer`` is false: an operator's explicit run)."""
    done: dict[str, Any] = {}
    header = targets.get(spark, table) if policy.enabled else None
    if header is None:
        return done
    jt = targets.java_table(spark, table)
    snap = jt.currentSnapshot() if jt is not None else None
    if jt is None or snap is None:
        return done
    summary = java_dict(snap.summary())
    target = int(java_dict(jt.properties()).get("write.target-file-size-bytes",
                                                TARGET_FILE_SIZE))
    proc, ident = f"{q(targets.name)}.system", targets.ident(table)
    v2 = int(jt.operations().current().formatVersion()) == 2
    hot = hottest_now(spark, jt, snap, policy)
    spreading = False
    if defer:  # an operator's explicit run rewrites whatever is due, at once
        spreading, hot = _spread(spark, jt, header, policy, summary, hot, target, done)
        if "rewrite_data_files_spread" in done:
            jt.refresh()
            summary = java_dict(jt.currentSnapshot().summary())
    why, wait = rewrite_plan(summary, header.buckets, policy, target, hot, (
        lambda: hottest_growth(spark, jt, int(jt.currentSnapshot().snapshotId()))
        if defer and not spreading else None))
    if wait is not None:
        done["deferred"] = {"why": why, "waits": wait}
        log.info("table %s: the merge of small files (%s) waits: %s", table, why, wait)
        why = None
    if why is not None:
        small = small_file_bytes(summary, header.buckets, policy, target)
        ratio = delete_threshold(summary, policy, hot)
        # below the threshold no large file is rewritten: the largest share stays
        carried = {HOTTEST: str(round(hot, 6))} if hot < ratio else None
        done["rewrite_data_files"] = {"why": why, "delete_ratio_threshold": ratio,
                                      **rewrite_data_files(spark, jt, {
            "min-file-size-bytes": str(small), "min-input-files": "2",
            "delete-ratio-threshold": repr(ratio), "remove-dangling-deletes": "true"},
            properties=carried)}
        log.info("table %s: rewrote data files (%s): %s", table, why,
                 done["rewrite_data_files"])
        jt.refresh()
        summary = java_dict(jt.currentSnapshot().summary())
    deletes = int(summary.get("total-delete-files", 0))
    files = int(summary.get("total-data-files", 0))
    if deletes > files and v2:
        why = f"{deletes} delete files for {files} data files"
        done["rewrite_position_delete_files"] = _call(spark, why, (
            f"CALL {proc}.rewrite_position_delete_files(table => '{ident}', "
            "options => map('min-input-files', '2'))"))
        log.info("table %s: rewrote position delete files (%s): %s", table, why,
                 done["rewrite_position_delete_files"])
    oldest = _oldest(jt)
    limit = dt.datetime.now(dt.UTC) - dt.timedelta(hours=policy.expire_after_hours)
    if oldest is not None and oldest < limit:
        stamp = limit.strftime("%Y-%m-%d %H:%M:%S.%f")
        row = spark.sql(f"CALL {proc}.expire_snapshots(table => '{ident}', "
                        f"older_than => TIMESTAMP '{stamp}', "
                        f"retain_last => {policy.retain_last})").first()
        done["expire_snapshots"] = row.asDict() if row is not None else {}
    return done


def _spread(spark: SparkSession, jt: Any, header: Any, policy: MaintenancePolicy,
            summary: dict[str, str], hot: float, target: int, done: dict[str, Any]
            ) -> tuple[bool, float]:
    """Rewrite the buckets whose turn it is (:mod:`.spread`), when the rewrite of deleted
    rows is spread: whether it is (the pace known, the table of more buckets than a
    group, the largest share past the earliest group's start) and the largest share
    left after it (``hot`` where nothing was rewritten). The rewrite records that share
    (:data:`HOTTEST`) for the next row delta and the pace."""
    group = max(1, int(spark.sparkContext.defaultParallelism))
    if not policy.spread or not spreads(header.buckets, group, hot, policy.delete_ratio):
        return False, hot
    snap = int(jt.currentSnapshot().snapshotId())
    pace = hottest_growth(spark, jt, snap)
    if pace is None or pace <= 0:
        return False, hot
    records, _, files = _counts(summary)
    shares = bucket_shares(spark, jt, snap, counted_rows(records, files))
    chosen = due_buckets(shares, policy.delete_ratio, pace, group)
    if not chosen:
        return True, hot
    rest = max((v for b, v in shares.items() if b not in chosen), default=0.0)
    ratio = max(min(shares[b] for b in chosen) * NEAR, 1e-6)
    why = turn(chosen, shares, header.buckets, pace)
    done["rewrite_data_files_spread"] = {"why": why, "delete_ratio_threshold": ratio,
                                         **rewrite_data_files(spark, jt, {
        "min-file-size-bytes": str(small_file_bytes(summary, header.buckets, policy, target)),
        "min-input-files": "1", "delete-ratio-threshold": repr(ratio),
        "remove-dangling-deletes": "true"}, key=header.key_columns[0],
        buckets=header.buckets, only=chosen,
        properties={HOTTEST: str(round(rest, 6)), GROUP: str(group)})}
    log.info("table %s: rewrote data files (%s): %s", header.name, why,
             done["rewrite_data_files_spread"])
    return True, rest


def hottest_now(spark: SparkSession, jt: Any, snap: Any, policy: MaintenancePolicy) -> float:
    """The largest share of a data file's rows deleted at a table's snapshot ``snap``
    (Iceberg's Java ``Snapshot``), among files of at least the average rows per file
    (:func:`hottest_at`, planned with Iceberg's Java API)."""
    return hottest_at(java_dict(snap.summary()), policy.delete_ratio,
                      lambda average: planned_hottest(spark, jt, snap.snapshotId(), average))


def hottest_at(summary: dict[str, str], delete_ratio: float,
               plan: Callable[[float], float]) -> float:
    """The largest share of a data file's rows deleted at a snapshot with this summary,
    among files of at least the average rows per file.

    A row delta's snapshot records it (:data:`~changeflow.targets.rowdelta.HOTTEST`).
    Another writer's is planned (``plan(average)``), unless the table's deleted rows are
    fewer than ``delete_ratio`` of the average rows per data file: then no such file can
    have reached the ratio (0.0, with no plan).

    >>> hottest_at({HOTTEST: "0.25"}, 0.1, lambda avg: 1.0)
    0.25
    >>> s = {"total-records": "1000", "total-data-files": "10", "total-position-deletes": "9"}
    >>> hottest_at(s, 0.1, lambda avg: 1.0), hottest_at(s, 0.05, lambda avg: avg / 1000)
    (0.0, 0.1)
    """
    if summary.get(HOTTEST) is not None:
        return float(summary[HOTTEST])
    records, deletes, files = _counts(summary)
    average = records / max(files, 1)
    if not deletes or deletes < delete_ratio * average:
        return 0.0
    return plan(average)


def _call(spark: SparkSession, why: str, sql: str, **noted: Any) -> dict[str, Any]:
    started = time.monotonic()
    row = spark.sql(sql).first()
    return {"why": why, "seconds": time.monotonic() - started, **noted,
            **(row.asDict() if row is not None else {})}


def _oldest(jt: Any) -> dt.datetime | None:
    """When the table's oldest snapshot was committed: the first of its snapshots, which
    Iceberg keeps in the order they were added. One call to the JVM, however long the
    history: a walk over every snapshot cost some three round trips each, 3-5 s an apply
    once a table kept 10,000 snapshots (a week of applies every minute)."""
    snapshots = jt.snapshots()
    if snapshots.isEmpty():
        return None
    return dt.datetime.fromtimestamp(snapshots.get(0).timestampMillis() / 1000, dt.UTC)
