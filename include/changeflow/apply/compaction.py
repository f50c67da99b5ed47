"""Compaction of a target table's buckets: deltas folded into new base files.

A bucket is compacted when its deltas grow past the table's threshold (see
:func:`buckets_to_compact`). Only the keys the deltas name are resolved with their base
rows; other base rows are copied as they are (:func:`compacted`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from changeflow import fs
from changeflow.apply import compaction_arrow
from changeflow.apply.target import (
    BUCKET,
    FileEntry,
    TargetCatalog,
    TargetTable,
    bucket_of,
    read_files,
    resolve,
    write_files,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def buckets_to_compact(
    files: list[FileEntry], *, ratio: float = 0.5, max_deltas: int = 8
) -> list[int]:
    """Buckets whose deltas outgrew their base (bytes) or are too many versions.

    >>> f = [FileEntry("a", 0, 1, "base", 100), FileEntry("b", 0, 2, "delta", 80),
    ...      FileEntry("c", 1, 1, "base", 100), FileEntry("d", 1, 2, "delta", 10)]
    >>> buckets_to_compact(f)
    [0]
    """
    by: dict[int, list[FileEntry]] = {}
    for f in files:
        by.setdefault(f.bucket, []).append(f)
    out = []
    for b, fl in sorted(by.items()):
        base = sum(f.n_bytes for f in fl if f.kind == "base")
        deltas = [f for f in fl if f.kind != "base"]
        grown = base > 0 and sum(f.n_bytes for f in deltas) > ratio * base
        if len({f.version for f in deltas}) > max_deltas or grown:
            out.append(b)
    return out


def compacted(spark: SparkSession, table: TargetTable, files: list[FileEntry]
              ) -> tuple[DataFrame, bool]:
    """The current rows of some files, as a compaction writes them, and whether they are
    laid out by bucket already (see :func:`write_files`).

    A base file holds exactly one image per key and no tombstone (compactions write
    resolved rows only), so only the keys the deltas name need resolving: the base rows
    of the other keys are kept as they are (a scan and a hash probe: no sort, and no
    shuffle, since each base file holds one bucket), and the few keys the deltas touch
    are resolved with their base rows and shuffled by bucket.
    """
    from pyspark.sql import functions as F

    keys = table.key_columns
    bases = [f for f in files if f.kind == "base"]
    deltas = [f for f in files if f.kind != "base"]
    partial = any(f.kind == "pdelta" for f in deltas)
    if not bases or not deltas:
        return resolve(read_files(spark, table, files), keys, partial=partial), False
    raw = read_files(spark, table, deltas)
    changed = raw.select(*keys).distinct()
    if sum(f.n_bytes for f in deltas) <= _BROADCAST_DELTAS:
        changed = F.broadcast(changed)
    base = read_files(spark, table, bases)
    kept = bucket_of(base.join(changed, keys, "left_anti"), keys, table.buckets)
    merged = resolve(base.join(changed, keys, "left_semi").unionByName(raw), keys,
                     partial=partial)
    merged = bucket_of(merged, keys, table.buckets).repartition(F.col(BUCKET))
    return kept.unionByName(merged), True


# Deltas up to this size (bytes) have few enough keys to broadcast them in a compaction.
_BROADCAST_DELTAS = 64 << 20


def compact(
    spark: SparkSession, catalog: TargetCatalog, name: str, *, ratio: float = 0.5,
    max_deltas: int = 8, arrow: bool = True,
) -> list[int]:
    """Merge the files of the buckets that need it into base files (a few per bucket).

    Only those buckets' files are read and rewritten: on the driver with Arrow when the
    files are local and that gives exactly Spark's rows (:mod:`.compaction_arrow`, one
    file per bucket), else with Spark. The swap is one state-store transaction; replaced
    files are deleted after it. Returns the compacted buckets.

    Args:
        arrow: whether the Arrow path may be taken.
    """
    import uuid

    table = catalog.get(name)
    if table is None:
        return []
    files = catalog.files(name)
    todo = buckets_to_compact(files, ratio=ratio, max_deltas=max_deltas)
    if not todo:
        return []
    old = [f for f in files if f.bucket in todo]
    tag = uuid.uuid4().hex[:12]
    new = compaction_arrow.write_compacted(spark, table, old, tag) if arrow else None
    if new is None:
        rows, laid_out = compacted(spark, table, old)
        new, _ = write_files(spark, table, rows, "base", tag, laid_out=laid_out)
    with catalog.store.begin() as conn:
        catalog.commit(conn, table, new, remove=[f.path for f in old])
    for f in old:
        fs.delete(spark, f.path)
    return todo
