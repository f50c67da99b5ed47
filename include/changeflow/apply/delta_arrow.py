"""A pass's delta files written on the driver with Arrow (see :func:`.target.write_files`).

The Spark path shuffles a delta's rows by bucket and writes one file per touched bucket
with a Spark job: two stages and a commit protocol, about a second even for a few
thousand rows. A delta is small (at most twice the pass's LCRs), so here its rows are
collected once as Arrow (one Spark job, which also computes their buckets with Spark's
own hash) and each bucket's rows are written by the driver, a thread per bucket, into
the same layout (``<kind>-v<version>-<tag>/_cf_bucket=<n>/part-...parquet``) with the
types Spark writes for the table's schema and the metadata by which Spark knows that
its dates and timestamps need no rebasing (:func:`.arrow_files.spark_metadata`).

:func:`write` returns None, having written nothing that stays, when it cannot take this
path: Spark does not run on this machine, the table is not on the local file system, a
column's type has no Arrow twin, or the delta may hold more than :data:`MAX_ROWS` rows.
The caller then takes the Spark path.
"""

from __future__ import annotations

import logging
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from changeflow import fs
from changeflow.apply import arrow_files as af
from changeflow.apply.target import BUCKET, FileEntry, TargetTable, bucket_expr

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

# The most rows a delta may hold to be collected on the driver (about 1.5 GB of a
# 12-column table's rows at worst; a pass's usual delta is a few hundred thousand).
MAX_ROWS = 2_000_000


def write(spark: SparkSession, table: TargetTable, rows: DataFrame, kind: str, tag: str, *,
          max_rows: int) -> tuple[list[FileEntry], int] | None:
    """Write a delta's rows (images and tombstones) as one file per touched bucket.

    Args:
        rows: the table's columns and ``_cf_*`` columns (missing ones are written NULL).
        max_rows: an upper bound of the number of rows, known before they are computed.

    Returns:
        The new files and the number of rows written, or None (nothing written): take
        the Spark path.
    """
    import pyarrow as pa

    if max_rows > MAX_ROWS or not af.spark_is_local(spark):
        return None
    schema = table.spark_schema()
    want = af.arrow_schema(schema)
    root = af.local_path(fs.join(table.root, f"{kind}-v{table.version + 1}-{tag}"))
    if want is None or root is None:
        return None
    try:
        data = _collect(rows, table, want)
        files = _write_buckets(data, table, want, root, kind, tag, spark.version)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        log.info("delta of %s: the Spark path (%s)", table.name, exc)
        return None
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return files, data.num_rows


def write_arrow(table: TargetTable, data: pa.Table, kind: str, tag: str,
                spark_version: str) -> list[FileEntry] | None:
    """Write rows already on the driver, typed as :func:`.arrow_files.arrow_schema` of
    the table's Spark schema and with their bucket in :data:`BUCKET` (an ``int32``).

    Returns:
        The new files, or None (nothing written) when the table is not on the local
        file system or a column's type has no Arrow twin.
    """
    want = af.arrow_schema(table.spark_schema())
    root = af.local_path(fs.join(table.root, f"{kind}-v{table.version + 1}-{tag}"))
    if want is None or root is None:
        return None
    try:
        return _write_buckets(data, table, want, root, kind, tag, spark_version)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def _collect(rows: DataFrame, table: TargetTable, want: pa.Schema) -> pa.Table:
    """The rows as Arrow, typed as Spark writes them, with their bucket (Spark's hash)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    have = set(rows.columns)
    fields = table.spark_schema().fields
    cols = [F.col(f.name) if f.name in have else F.lit(None).cast(f.dataType).alias(f.name)
            for f in fields]
    got = rows.select(*cols, bucket_expr(table.key_columns, table.buckets).alias(BUCKET)) \
        .toArrow()
    arrays = [got.column(f.name).cast(f.type) for f in want]
    return pa.Table.from_arrays([*arrays, got.column(BUCKET).cast(pa.int32())],
                                schema=want.append(pa.field(BUCKET, pa.int32())))


def _write_buckets(data: pa.Table, table: TargetTable, want: pa.Schema, root: str,
                   kind: str, tag: str, spark_version: str) -> list[FileEntry]:
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if data.num_rows == 0:
        return []
    meta = af.spark_metadata(spark_version)
    ordered = data.take(pc.sort_indices(data.column(BUCKET)))
    buckets = ordered.column(BUCKET).to_numpy()
    starts = [0, *(np.flatnonzero(np.diff(buckets)) + 1).tolist()]
    spans = list(zip(starts, [*starts[1:], len(buckets)], strict=True))

    def one(span: tuple[int, int]) -> FileEntry:
        lo, hi = span
        bucket = int(buckets[lo])
        part = ordered.slice(lo, hi - lo).select(want.names)
        folder = os.path.join(root, f"{BUCKET}={bucket}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"part-00000-{tag}.c000.snappy.parquet")
        pq.write_table(part.replace_schema_metadata(meta), path, compression="snappy")
        return FileEntry(f"file:{path}", bucket, table.version + 1, kind,
                         os.path.getsize(path))

    with ThreadPoolExecutor(max_workers=max(1, min(len(spans), os.cpu_count() or 1))) as pool:
        return list(pool.map(one, spans))
