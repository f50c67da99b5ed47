"""The conflict lookup on the driver with Arrow, for target files on a local file system.

A pass's lookup (:func:`changeflow.apply.conflicts.lookup`) wants the raw images of the
changed keys in the touched buckets' files: the key, compared and bookkeeping columns of
every file, filtered by key. Changes spread over a table touch every row group, so
nothing prunes the scan; Spark spends its time on the scan's tasks and on the broadcast
semi-join. When the files are on the driver's own disk and Spark runs in the driver's
JVM (a ``local`` master), Arrow reads the same columns row group by row group, keeps
the rows whose key is one of the changed keys (a hash set), and hands Spark the few
matching rows (:func:`lookup`).

The result is the Spark path's, row for row and type for type, or nothing: :func:`lookup`
returns None, and the caller takes the Spark path, whenever it cannot show that (see
:mod:`.arrow_files`), and also when there may be more changed keys than
:data:`MAX_KEYS` (they are collected to the driver), a key column is floating point, or
Arrow refuses the work (a composite key type its hash join does not support). Keys that
are NULL match nothing, as in the join.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from changeflow.apply import arrow_files as af
from changeflow.apply.target import META, FileEntry, TargetTable

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

# At most this many changed keys are collected to the driver; above it, the Spark path.
MAX_KEYS = 500_000


def schema_of(table: TargetTable, columns: list[str]) -> StructType:
    """The Spark path's schema: the key columns, the given data columns, then :data:`META`."""
    from pyspark.sql import types as T

    fields = {f.name: f for f in table.spark_schema().fields}
    keep = list(dict.fromkeys([*table.key_columns, *columns]))
    return T.StructType([fields[c] for c in [*keep, *META]])


def _read_file(path: str, want: pa.Schema, keys: pa.Table, key_columns: list[str]
               ) -> pa.Table:
    """One file's rows of the keys, with every wanted column (NULL where it has none)."""
    import pyarrow as pa

    pf, present = af.open_checked(path, want, key_columns)
    parts = []
    for i in range(pf.num_row_groups):
        part = pf.read_row_group(i, columns=present, use_threads=False)
        parts.append(part.filter(af.member_mask(part, keys, key_columns)))
    got = pa.concat_tables(parts) if parts else want.empty_table().select(present)
    return af.as_wanted(got, want)


def _keys(keys: DataFrame, want: pa.Schema, key_columns: list[str]) -> pa.Table:
    import pyarrow as pa

    got = keys.select(*key_columns).toArrow()
    if got.num_rows > MAX_KEYS:
        raise af.Unproven(f"{got.num_rows} changed keys (more than {MAX_KEYS})")
    return pa.table({k: got.column(k).cast(want.field(k).type) for k in key_columns})


def read_matching(paths: list[str], want: pa.Schema, keys: pa.Table,
                  key_columns: list[str]) -> pa.Table:
    """The rows of the given local Parquet files whose key is one of ``keys``.

    Raises:
        Unproven: a file holds a column differently than Spark writes it.
    """
    import pyarrow as pa

    workers = max(1, min(len(paths), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        tables = list(pool.map(lambda p: _read_file(p, want, keys, key_columns), paths))
    return pa.concat_tables(tables) if tables else want.empty_table()


def matching(spark: SparkSession, table: TargetTable, files: list[FileEntry], keys: DataFrame,
             columns: list[str], *, max_keys: int | None = None) -> pa.Table | None:
    """The Spark path's lookup rows as Arrow (typed as :func:`schema_of` says), or None.

    Args:
        files: the touched buckets' files.
        keys: the distinct changed keys.
        columns: data columns to read besides the keys (bookkeeping columns always come).
        max_keys: an upper bound of the number of changed keys, when known: above
            :data:`MAX_KEYS`, they are not collected at all.
    """
    import pyarrow as pa

    if max_keys is not None and max_keys > MAX_KEYS:
        return None
    paths = af.local_paths(spark, files)
    want = af.arrow_schema(schema_of(table, columns))
    if paths is None or want is None or not af.exact_keys(want, table.key_columns):
        return None
    try:
        wanted = _keys(keys, want, table.key_columns)
        rows = read_matching(paths, want, wanted, table.key_columns)
    except (af.Unproven, pa.ArrowInvalid, pa.ArrowNotImplementedError,
            pa.ArrowTypeError) as exc:
        log.info("lookup of %s: the Spark path (%s)", table.name, exc)
        return None
    if rows.num_rows == 0:  # a column of no chunks trips PySpark's conversion: one empty
        rows = pa.Table.from_arrays([pa.array([], f.type) for f in want], schema=want)
    return rows


def frame(spark: SparkSession, rows: pa.Table, schema: StructType) -> DataFrame:
    """Arrow rows as a Spark frame of the given schema."""
    return spark.createDataFrame(rows, schema=schema)


def lookup(spark: SparkSession, table: TargetTable, files: list[FileEntry], keys: DataFrame,
           columns: list[str], *, max_keys: int | None = None,
           rows_out: list[pa.Table] | None = None) -> DataFrame | None:
    """The Spark path's lookup result computed with Arrow on the driver, or None (see
    :func:`matching`).

    Args:
        rows_out: when given, the Arrow rows are appended to it too (for work on the
            driver that follows).
    """
    rows = matching(spark, table, files, keys, columns, max_keys=max_keys)
    if rows is None:
        return None
    if rows_out is not None:
        rows_out.append(rows)
    return frame(spark, rows, schema_of(table, columns))


def newest(rows: pa.Table, key_columns: list[str]) -> pa.Table:
    """Per key, the newest of a key's raw images (tombstones included), as
    :func:`changeflow.apply.target.resolve` picks it for full images: the greatest
    ``(_cf_seq or 0, _cf_scn, _cf_pos)``, an image before a tombstone (NULLs as Spark
    orders them: last when descending, first when ascending). A NULL key is one key.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = rows.num_rows
    if n == 0:
        return rows
    # Spark's order: NULLs last when descending, first when ascending (the deleted flag
    # as -1/0/1 with NULL as -1, so that NULLs need no placement of their own).
    deleted = pc.fill_null(pc.cast(rows.column("_cf_deleted"), pa.int8()), -1)
    sortable = pa.table({
        **{f"k{i}": rows.column(k) for i, k in enumerate(key_columns)},
        "seq": pc.fill_null(rows.column("_cf_seq"), 0), "scn": rows.column("_cf_scn"),
        "pos": rows.column("_cf_pos"), "del": deleted})
    order = pc.sort_indices(sortable, sort_keys=[
        *[(f"k{i}", "ascending", "at_end") for i in range(len(key_columns))],
        ("seq", "descending", "at_end"), ("scn", "descending", "at_end"),
        ("pos", "descending", "at_end"), ("del", "ascending", "at_end")])
    ranked = rows.take(order)
    first = pa.array([True] + [False] * (n - 1))
    if n > 1:
        new_key = pa.array([False] * (n - 1))
        for k in key_columns:
            col = ranked.column(k)
            cur, prev = col.slice(1), col.slice(0, n - 1)
            both_null = pc.and_(pc.is_null(cur), pc.is_null(prev))
            same = pc.or_(both_null, pc.fill_null(pc.equal(cur, prev), False))
            new_key = pc.or_(new_key, pc.invert(same))
        first = pa.concat_arrays([pa.array([True]), new_key.combine_chunks()
                                  if isinstance(new_key, pa.ChunkedArray) else new_key])
    return ranked.filter(first)


def current(rows: pa.Table, key_columns: list[str], columns: list[str]) -> pa.Table:
    """:func:`changeflow.apply.conflicts.current_of` of full images over Arrow: per key of
    ``rows`` (raw images), whether it exists, its provenance and the given columns
    (``_c_<column>``), from its newest image (:func:`newest`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    new = newest(rows, key_columns)
    data = [c for c in columns if c not in key_columns]
    return pa.table({**{k: new.column(k) for k in key_columns},
                     "_c_exists": pc.invert(new.column("_cf_deleted")),
                     "_c_src": new.column("_cf_src"), "_c_scn": new.column("_cf_scn"),
                     "_c_pos": new.column("_cf_pos"),
                     **{f"_c_{c}": new.column(c) for c in data}})
