"""Spreading the rewrite of deleted rows over the applies, a few buckets at a time.

Where each apply changes rows all over a table (1% of its rows, say), every data file
reaches ``delete_ratio`` at the same apply, and the rewrite of deleted rows is a
rewrite of the whole table in one apply's maintenance: one apply in thirty pays for
the table's rewrite, and so does any ten applies in a row that hold it. Spread, the
same rewrite is done a *group* of buckets at a time (as many buckets as the cluster
rewrites at once: one file group each), each group when its turn comes, so that the
groups' rewrites are evenly spaced over the applies and each group is rewritten when
its files reach the ratio (:func:`due_buckets`). The first cycle of a table whose files
all started together rewrites its first groups early, at a smaller share (once); after
that each group is rewritten at the ratio, and the cost per apply is the same as the
whole table's rewrite every cycle, without its peak.

The pace is the applies' own (:func:`changeflow.targets.plans.hottest_growth`): the
rise of the largest share of a data file's rows deleted, per apply. Where the changes
concentrate on some buckets, those reach the ratio and are rewritten alone, as without
spreading; the others' time to the ratio is far off and they wait.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_EPS = 1e-9


#: the snapshot property of a spread rewrite's group size (the cluster's cores then): what
#: an operator's view (no Spark, :mod:`changeflow.views.targets`) takes for a group
GROUP = "changeflow.spread-group"


def counted_rows(records: int, files: int) -> float:
    """The fewest rows a data file needs for its deleted share to count in its bucket's:
    half the table's average rows per data file, so that a bucket's large files, of
    unequal sizes (the hash's), all count, and the small files the applies add do not.

    >>> counted_rows(10_000_000, 32)
    156250.0
    """
    return records / max(files, 1) / 2


def spreads(buckets: int, group: int, hot: float, ratio: float) -> bool:
    """Whether the rewrite of deleted rows is spread over the applies now: the table has
    more buckets than a group, and the largest share of a data file's rows deleted
    (``hot``) has passed the earliest group's start (the ratio over the groups).

    >>> spreads(16, 2, 0.04, 0.3), spreads(16, 2, 0.03, 0.3), spreads(2, 2, 0.5, 0.3)
    (True, False, False)
    """
    return buckets > group and hot >= ratio / math.ceil(buckets / group)


def due_buckets(shares: Mapping[int, float], ratio: float, pace: float | None,
                group: int) -> list[int]:
    """The buckets to rewrite now (sorted; empty: none), from each bucket's largest share
    of a data file's rows deleted (``shares``), ``delete_ratio`` and the applies' pace
    (the share's rise per apply), ``group`` buckets at a time.

    Each bucket reaches the ratio ``(ratio - share) / pace`` applies from now. Taken most
    urgent first, in groups, the j-th group (from 0) is due now when it reaches the
    ratio within ``j`` spacings, the spacing being the applies a bucket takes from 0 to
    the ratio divided by the number of groups: the groups are then rewritten evenly
    spaced, each at the ratio (:func:`applies_to_turn`). The most urgent group is
    rewritten, with every bucket at or past the ratio. Nothing is spread where the pace
    is unknown or the table has no more buckets than a group (the whole table is then
    one rewrite).

    >>> even = {b: 0.2 for b in range(16)}       # 16 buckets, all at 20% deleted
    >>> due_buckets(even, 0.3, 0.01, 2)          # 8 groups, spaced 3.75 applies
    [0, 1]
    >>> due_buckets({**even, 0: 0.0, 1: 0.0}, 0.3, 0.01, 2)  # 7 groups left, behind
    [2, 3]
    >>> steady = {b: 0.3 - b // 2 * 0.0375 for b in range(16)}  # evenly staggered
    >>> due_buckets(steady, 0.3, 0.01, 2)      # the first group reaches the ratio
    [0, 1]
    >>> due_buckets({b: s - 0.01 for b, s in steady.items()}, 0.3, 0.01, 2)  # an apply early
    []
    >>> due_buckets({0: 0.31, 1: 0.31, 2: 0.3, 3: 0.0, 4: 0.0}, 0.3, 0.01, 2)  # overdue
    [0, 1, 2]
    >>> due_buckets(even, 0.3, None, 2), due_buckets({0: 0.5, 1: 0.5}, 0.3, 0.01, 2)
    ([], [])
    """
    wait = applies_to_turn(shares, ratio, pace, group)
    if wait is None or wait > _EPS:
        return []
    assert pace is not None
    overdue = {b for b, share in shares.items() if (ratio - share) / pace <= _EPS}
    return sorted(set(next_group(shares, group)) | overdue)


def applies_to_turn(shares: Mapping[int, float], ratio: float, pace: float | None,
                    group: int) -> float | None:
    """How many applies from now the next group's turn comes (0.0: now, see
    :func:`due_buckets`), at the applies' ``pace``; None where nothing is spread.

    >>> steady = {b: 0.3 - b // 2 * 0.0375 for b in range(16)}
    >>> round(applies_to_turn({b: s - 0.025 for b, s in steady.items()}, 0.3, 0.01, 2), 6)
    2.5
    >>> applies_to_turn(steady, 0.3, 0.01, 2), applies_to_turn(steady, 0.3, 0.0, 2)
    (0.0, None)
    """
    if pace is None or pace <= 0 or group < 1 or len(shares) <= group:
        return None
    order = sorted(shares, key=lambda b: (-shares[b], b))
    groups = math.ceil(len(order) / group)
    spacing = ratio / pace / groups
    return max(0.0, min((ratio - shares[order[j * group]]) / pace - j * spacing
                        for j in range(groups)))


def next_group(shares: Mapping[int, float], group: int) -> list[int]:
    """The most urgent group: the ``group`` buckets of the largest shares (sorted).

    >>> next_group({0: 0.1, 1: 0.25, 2: 0.2, 3: 0.25}, 2)
    [1, 3]
    """
    return sorted(sorted(shares, key=lambda b: (-shares[b], b))[:group])


def turn(chosen: list[int], shares: Mapping[int, float], buckets: int, pace: float) -> str:
    """Why the buckets ``chosen`` are rewritten (maintenance's log and operators' view).

    >>> turn([1, 3], {0: 0.1, 1: 0.25, 2: 0.2, 3: 0.26}, 4, 0.01)
    'buckets 1, 3 of 4 due in turn (26% of a data file deleted, 1.0% more an apply)'
    """
    return (f"buckets {', '.join(map(str, chosen))} of {buckets} due in turn "
            f"({max(shares[b] for b in chosen):.0%} of a data file deleted, "
            f"{pace:.1%} more an apply)")


def rewrite_data_files(spark: SparkSession, jt: Any, options: Mapping[str, str], *,
                       key: str | None = None, buckets: int = 0,
                       only: list[int] | None = None,
                       properties: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Iceberg's ``rewrite_data_files`` action (bin-pack) on the Java table ``jt``, with
    ``options`` (the procedure's), only the buckets ``only`` of ``bucket(buckets, key)``
    when given, and snapshot ``properties`` on its commit (the procedure takes none).

    Returns the procedure's counts (``rewritten_data_files_count``, ...) and
    ``seconds``."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    assert jvm is not None
    started = time.monotonic()
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(
        spark._jsparkSession).rewriteDataFiles(jt)  # noqa: SLF001
    if only:
        ex = jvm.org.apache.iceberg.expressions.Expressions
        anyof = getattr(ex, "or")
        term = ex.alwaysFalse()
        for b in only:
            term = anyof(term, ex.equal(ex.bucket(key, int(buckets)), int(b)))
        action = action.filter(term)
    for name, value in options.items():
        action = action.option(name, value)
    for name, value in (properties or {}).items():
        action = action.snapshotProperty(name, value)
    # the rewrite's threads read their file groups through the session active where they
    # start (inherited from this thread): a driver thread of tables maintained side by
    # side has none of its own, and another session's catalogs are not this one's
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # noqa: SLF001
    result = action.execute()
    return {"seconds": time.monotonic() - started,
            "rewritten_data_files_count": int(result.rewrittenDataFilesCount()),
            "added_data_files_count": int(result.addedDataFilesCount()),
            "rewritten_bytes_count": int(result.rewrittenBytesCount()),
            "failed_data_files_count": int(result.failedDataFilesCount()),
            "removed_delete_files_count": int(result.removedDeleteFilesCount())}
