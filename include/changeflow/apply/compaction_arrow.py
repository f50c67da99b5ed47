"""Compaction on the driver with Arrow, for target files on a local file system.

The Spark path (:func:`changeflow.apply.compaction.compacted`) reads the compacted
buckets' base files twice (the keys the deltas name are resolved, the other rows
copied), sorts the named keys' images with a window, shuffles them by bucket and writes
the result: about three rewrites' worth of work for one. Here each bucket is one task
of a thread pool on the driver: its files are read once with Arrow, the base rows of
keys no delta names are kept as they are, the others are resolved with the deltas'
images by a sort (newest image per key, tombstones dropped), and the bucket is written
as one base file, marked as Spark marks its own (so Spark reads its dates as written).

The result is the Spark path's rows, or nothing: :func:`write_compacted` returns None
(and writes nothing that stays) whenever it cannot show that: besides what
:mod:`.arrow_files` checks, when a delta holds partial images (``pdelta``: column-wise
resolution), a key column is floating point, a resolved row has a NULL key or
bookkeeping value, two images of a key tie in apply order (Spark would keep either),
or a bucket's files exceed :data:`MAX_BUCKET_BYTES` (the driver holds one bucket per
thread in memory).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from changeflow import fs
from changeflow.apply import arrow_files as af
from changeflow.apply.target import FileEntry, TargetTable

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# A bucket whose files (on disk) are larger than this is compacted by Spark.
MAX_BUCKET_BYTES = 512 << 20
_ORDER = ("_cf_scn", "_cf_pos", "_cf_deleted")


def resolve(rows: pa.Table, keys: list[str]) -> pa.Table:
    """The newest image per key, tombstones dropped (:func:`.target.resolve` without
    partial images).

    Raises:
        Unproven: a key or bookkeeping value is NULL, or two images of a key tie.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if rows.num_rows == 0:
        return rows
    for c in [*keys, *_ORDER]:
        if rows.column(c).null_count:
            raise af.Unproven(f"a NULL {c} among the images to resolve")
    seq = pc.coalesce(rows.column("_cf_seq"), pa.scalar(0, pa.int64()))
    t = rows.append_column("_cf_o", seq).combine_chunks()
    t = t.sort_by([*[(k, "ascending") for k in keys], ("_cf_o", "descending"),
                   ("_cf_scn", "descending"), ("_cf_pos", "descending"),
                   ("_cf_deleted", "ascending")])

    def changes(cols: list[str]) -> pa.ChunkedArray:
        """Per row but the first, whether any of the columns differs from the row before."""
        out = pa.chunked_array([pa.array([False] * (t.num_rows - 1), pa.bool_())])
        for c in cols:
            col = t.column(c)
            out = pc.or_(out, pc.not_equal(col.slice(1), col.slice(0, t.num_rows - 1)))
        return out

    new_key = changes(keys)
    tied = pc.invert(pc.or_(new_key, changes(["_cf_o", *_ORDER])))
    if pc.any(tied, min_count=0).as_py():
        at = pc.index(tied, True).as_py() + 1
        key = {k: t.column(k)[at].as_py() for k in keys}
        raise af.Unproven(f"two images of key {key} tie in apply order")
    newest = t.filter(pa.chunked_array([pa.array([True]), *new_key.chunks]))
    return newest.filter(pc.invert(newest.column("_cf_deleted"))).drop_columns(["_cf_o"])


def compacted(bases: list[pa.Table], deltas: list[pa.Table], keys: list[str]) -> pa.Table:
    """A bucket's rows as a compaction writes them (see the Spark path's docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not bases or not deltas:
        return resolve(pa.concat_tables(bases + deltas), keys)
    base, delta = pa.concat_tables(bases), pa.concat_tables(deltas)
    named = delta.select(keys).group_by(keys, use_threads=False).aggregate([])
    hit = af.member_mask(base, named, keys)
    kept = base.filter(pc.invert(hit))
    return pa.concat_tables([kept, resolve(pa.concat_tables([base.filter(hit), delta]), keys)])


def _read(path: str, want: pa.Schema, keys: list[str]) -> pa.Table:
    pf, present = af.open_checked(path, want, keys)
    return af.as_wanted(pf.read(columns=present, use_threads=False), want)


def _bucket_task(table: TargetTable, want: pa.Schema, root: str, tag: str, spark_version: str
                 ) -> Callable[[tuple[int, list[tuple[FileEntry, str]]]], FileEntry]:
    import pyarrow.parquet as pq

    keys = table.key_columns
    meta = af.spark_metadata(spark_version)

    def one(item: tuple[int, list[tuple[FileEntry, str]]]) -> FileEntry:
        bucket, entries = item
        bases = [_read(p, want, keys) for f, p in entries if f.kind == "base"]
        deltas = [_read(p, want, keys) for f, p in entries if f.kind != "base"]
        rows = compacted(bases, deltas, keys)
        folder = os.path.join(root, f"_cf_bucket={bucket}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"part-00000-{tag}.c000.snappy.parquet")
        pq.write_table(rows.replace_schema_metadata(meta), path, compression="snappy")
        return FileEntry(f"file:{path}", bucket, table.version + 1, "base",
                         os.path.getsize(path))

    return one


def write_compacted(spark: SparkSession, table: TargetTable, files: list[FileEntry],
                    tag: str) -> list[FileEntry] | None:
    """Compact the given files (whole buckets) into one base file per bucket, or None.

    Returns:
        The new files (not committed), or None: nothing written, take the Spark path.
    """
    import pyarrow as pa

    if any(f.kind == "pdelta" for f in files):
        return None
    paths = af.local_paths(spark, files)
    want = af.arrow_schema(table.spark_schema())
    root = af.local_path(fs.join(table.root, f"base-v{table.version + 1}-{tag}"))
    if paths is None or want is None or root is None or not af.exact_keys(
            want, table.key_columns):
        return None
    buckets: dict[int, list[tuple[FileEntry, str]]] = {}
    for f, p in zip(files, paths, strict=True):
        buckets.setdefault(f.bucket, []).append((f, p))
    if any(sum(f.n_bytes for f, _ in e) > MAX_BUCKET_BYTES for e in buckets.values()):
        return None
    workers = max(1, min(len(buckets), os.cpu_count() or 1))
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(_bucket_task(table, want, root, tag, spark.version),
                                 sorted(buckets.items())))
    except (af.Unproven, pa.ArrowInvalid, pa.ArrowNotImplementedError,
            pa.ArrowTypeError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        log.info("compaction of %s: the Spark path (%s)", table.name, exc)
        return None
