"""What a target table's metadata tells without a scan: the data files' column bounds
and the share of a data file's rows deleted since the last rewrite.

The apply asks whether every row is older than its changes (:func:`older_than`: then its
lookup reads no provenance), and the row delta and maintenance ask how far the deletes
have concentrated in one data file (:func:`hottest`, :func:`planned_hottest`). Both are
answered from Iceberg's manifests and snapshot summaries (the Java API), never from the
data files.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from changeflow.jvm import java_each
from changeflow.targets.tables import ancestors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the summary property of the largest share of a data file's rows deleted since the
#: table's data files were last rewritten, as the row deltas know it, among the files of
#: at least the table's average rows per data file (the small files the applies add are
#: merged for being small): maintenance reads it to rewrite a file where the changes
#: concentrate before the whole table is due (:func:`changeflow.targets.maintenance.due`)
HOTTEST = "changeflow.max-file-deleted-ratio"
#: how far back :func:`hottest` looks for the property (past snapshots of other writers)
_LOOKBACK = 20


def hottest(spark: SparkSession, jt: Any, snapshot: int | None) -> float | None:
    """The largest share of a data file's rows deleted since the table's data files were
    last rewritten, as the row deltas up to ``snapshot`` recorded it (:data:`HOTTEST`;
    0.0 from a rewrite of data files on, or where no row delta recorded it); None where
    another writer (Spark's ``MERGE INTO`` of partial images, a ``DELETE``) deleted rows
    since: only the scan plan tells (:func:`planned_hottest`).
    """
    return hottest_of((str(s.operation()), s.summary())
                      for s in ancestors(spark, jt, snapshot))


def hottest_of(chain: Iterable[tuple[str, Mapping[str, str]]], *,
               others: bool = True) -> float | None:
    """:func:`hottest` over a table's snapshots, newest first, as (operation, summary):
    any reader's view of the metadata (Iceberg's Java API, PyIceberg). With ``others``
    false, other writers' deletes are passed over (what the row deltas recorded).

    >>> hottest_of([("append", {}), ("overwrite", {HOTTEST: "0.25"})])
    0.25
    >>> hottest_of([("replace", {"deleted-data-files": "3"}),
    ...             ("overwrite", {HOTTEST: "0.25"})])
    0.0
    >>> chain = [("delete", {"added-position-deletes": "7"}),
    ...          ("overwrite", {HOTTEST: "0.25"})]
    >>> hottest_of(chain) is None, hottest_of(chain, others=False)
    (True, 0.25)
    """
    return next(_recorded(chain, others=others), 0.0)


def _recorded(chain: Iterable[tuple[str, Mapping[str, str]]], *, others: bool = True
              ) -> Iterator[float | None]:
    """The shares the row deltas recorded (:data:`HOTTEST`), newest first, back to the
    last rewrite of data files; with ``others``, a last None at another writer's deletes
    (only the scan plan tells from there)."""
    for operation, summary in itertools.islice(chain, _LOOKBACK):
        if summary.get(HOTTEST) is not None:
            yield float(summary[HOTTEST])
        elif operation == "replace":
            if summary.get("deleted-data-files"):
                return
        elif others and (int(summary.get("added-position-deletes") or 0)
                         or int(summary.get("added-dvs") or 0)):
            yield None
            return


def hottest_growth(spark: SparkSession, jt: Any, snapshot: int | None) -> float | None:
    """How much the last row delta up to ``snapshot`` raised :data:`HOTTEST` over the one
    before it: the pace at which the deletes approach a rewrite (:func:`recorded_growth`
    of the table's snapshots)."""
    return recorded_growth((str(s.operation()), s.summary())
                           for s in ancestors(spark, jt, snapshot))


def recorded_growth(chain: Iterable[tuple[str, Mapping[str, str]]]) -> float | None:
    """How much the newest :data:`HOTTEST` in a table's snapshots (newest first, as
    (operation, summary)) exceeds the one recorded before it; None where the chain does
    not tell: fewer than two row deltas since the data files were last rewritten, or
    another writer's deletes between them.

    >>> round(recorded_growth([("overwrite", {HOTTEST: "0.08"}), ("append", {}),
    ...                        ("overwrite", {HOTTEST: "0.07"})]), 6)
    0.01
    >>> recorded_growth([("overwrite", {HOTTEST: "0.02"}),
    ...                  ("replace", {"deleted-data-files": "4"}),
    ...                  ("overwrite", {HOTTEST: "0.09"})]) is None
    True
    >>> recorded_growth([("overwrite", {HOTTEST: "0.08"}),
    ...                  ("delete", {"added-position-deletes": "3"}),
    ...                  ("overwrite", {HOTTEST: "0.07"})]) is None
    True

    A merge of delete files (a ``replace`` that rewrites no data file) is passed over:

    >>> round(recorded_growth([("overwrite", {HOTTEST: "0.08"}),
    ...                        ("replace", {"added-position-deletes": "9"}),
    ...                        ("overwrite", {HOTTEST: "0.06"})]), 6)
    0.02
    """
    last = list(itertools.islice(_recorded(chain), 2))
    if len(last) < 2 or last[0] is None or last[1] is None:
        return None
    return last[0] - last[1]


def planned_hottest(spark: SparkSession, jt: Any, snapshot: int, average: float) -> float:
    """The largest share of a data file's rows deleted at ``snapshot``, from the table's
    scan plan, among the files of at least ``average`` rows: the deletes of any writer
    (Spark's ``MERGE INTO`` and ``DELETE``, a format-version 3 table's deletion vectors)
    that name one data file (position deletes scoped to a whole partition are not
    counted). A look at every data file's metadata, for a snapshot no row delta wrote
    (:data:`HOTTEST` records it for those)."""
    return max((share for _, share in _file_shares(spark, jt, snapshot, average)),
               default=0.0)


def bucket_shares(spark: SparkSession, jt: Any, snapshot: int, average: float
                  ) -> dict[int, float]:
    """Per bucket of the table's partition spec (``bucket(N, key)``), the largest share
    of a data file's rows deleted at ``snapshot``, among the files of at least
    ``average`` rows (:func:`planned_hottest`'s plan, kept per bucket; a bucket whose
    files are all smaller is 0.0). Files of an earlier partition spec are left out."""
    return largest_per_bucket(_file_shares(spark, jt, snapshot, average, buckets=True))


def largest_per_bucket(shares: Iterable[tuple[int | None, float]]) -> dict[int, float]:
    """The largest of each bucket's files' shares, from (bucket, share) pairs (a bucket
    of None, another partition spec's file, is left out): what any reader's scan plan
    (Iceberg's Java API, PyIceberg) gives :func:`changeflow.targets.spread.due_buckets`.

    >>> largest_per_bucket([(0, 0.1), (1, 0.0), (0, 0.25), (None, 0.9)])
    {0: 0.25, 1: 0.0}
    """
    out: dict[int, float] = {}
    for bucket, share in shares:
        if bucket is not None:
            out[bucket] = max(out.get(bucket, 0.0), share)
    return out


def _file_shares(spark: SparkSession, jt: Any, snapshot: int, average: float, *,
                 buckets: bool = False) -> Iterator[tuple[int | None, float]]:
    """Each data file's share of rows deleted at ``snapshot`` (files of fewer than
    ``average`` rows: 0.0), with its bucket when asked (None for another spec's files)."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    assert jvm is not None
    named = jvm.org.apache.iceberg.util.ContentFileUtil.referencedDataFileLocation
    spec = jt.spec()
    spec_id = int(spec.specId())
    tasks = jt.newScan().useSnapshot(snapshot).planFiles()
    try:
        for task in java_each(tasks):
            f = task.file()
            bucket = None
            if buckets and int(f.specId()) == spec_id:
                # "id_bucket=3": one call, whatever the key column's name
                tail = str(spec.partitionToPath(f.partition())).rsplit("=", 1)[-1]
                bucket = int(tail) if tail.isdigit() else None
            records = int(f.recordCount())
            if not records or records < average:
                yield bucket, 0.0
                continue
            loc = str(f.location())
            # the one data file a delete file names: its field, or equal path bounds
            n = sum(int(d.recordCount()) for d in java_each(task.deletes())
                    if str(d.content()) == "POSITION_DELETES" and named(d) == loc)
            yield bucket, min(n / records, 1.0)
    finally:
        tasks.close()


def older_than(spark: SparkSession, jt: Any, snapshot: int, scn: int) -> bool:
    """Whether every row of the table at ``snapshot`` was written at a commit position
    (``_cf_scn``) below ``scn`` (or has none), as the data files' column bounds tell
    (Iceberg's metrics, from the manifests: no scan).

    False as soon as a data file's upper bound reaches ``scn``, or a data file with
    non-NULL values records no bound (metrics off for the column): only a scan knows.
    """
    field = jt.schema().findField("_cf_scn")
    if field is None:
        return False
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    assert jvm is not None
    value = jvm.org.apache.iceberg.types.Conversions.fromByteBuffer
    fid, ftype = field.fieldId(), field.type()
    # only this column's stats: the manifests' other bounds are not kept in memory
    tasks = jt.newScan().useSnapshot(snapshot).includeColumnStats(
        jvm.java.util.Collections.singletonList("_cf_scn")).planFiles()
    try:
        for task in java_each(tasks):
            f = task.file()
            bounds = f.upperBounds()
            bound = bounds.get(fid) if bounds is not None else None
            if bound is None:
                nulls = f.nullValueCounts()
                n = nulls.get(fid) if nulls is not None else None
                if n is None or int(n) < int(f.recordCount()):
                    return False
            elif int(value(ftype, bound)) >= scn:
                return False
    finally:
        tasks.close()
    return True
