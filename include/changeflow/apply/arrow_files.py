"""A target table's local Parquet files read with Arrow exactly as Spark reads them.

The Arrow paths of the Parquet apply (:mod:`.lookup_arrow`, :mod:`.compaction_arrow`)
read a table's files on the driver instead of in Spark tasks. They may only do so when
what they read is what Spark's read with the table's schema gives; these helpers check
that, and raise :class:`Unproven` otherwise (the caller then takes the Spark path):

* the file must be a local file and Spark must run on this machine (:func:`local_paths`);
* each column must have the Arrow type Spark writes for its Spark type (an INT96
  timestamp or an ``int`` where the table says ``bigint`` would be converted by Spark);
* a name that differs only in case is refused (Spark matches names case-insensitively);
* the file must say it was written by Spark 3 or later without legacy dates
  (:data:`SPARK_VERSION_KEY`; changeflow's Arrow writers say so too, see
  :func:`spark_metadata`): for other files Spark may rebase dates and timestamps before
  1582 or 1900 from the hybrid calendar, which Arrow does not.

A file without a column (written before the column was added) gives NULLs, as Spark's
read with the table schema does.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from changeflow import lcr
from changeflow.apply.target import FileEntry

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


# Key-value metadata by which Spark knows a Parquet file was written by Spark (and how).
SPARK_VERSION_KEY = "org.apache.spark.version"
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")


class Unproven(Exception):  # noqa: N818  (not an error: a reason to take the Spark path)
    """An Arrow path cannot show that its result is the Spark path's."""


def local_path(uri: str) -> str | None:
    """The local file-system path of a URI as Hadoop writes it, or None if not local.

    >>> local_path("file:/tmp/t/a.parquet"), local_path("file:///tmp/a.parquet")
    ('/tmp/t/a.parquet', '/tmp/a.parquet')
    >>> local_path("/tmp/a.parquet"), local_path("s3a://b/a.parquet")
    ('/tmp/a.parquet', None)
    """
    if uri.startswith("file://"):
        rest = uri[len("file://"):]
        return rest if rest.startswith("/") else None  # file://host/... is not ours
    if uri.startswith("file:/"):
        return uri[len("file:"):]
    return uri if uri.startswith("/") else None


def spark_is_local(spark: SparkSession) -> bool:
    """Whether Spark runs on this machine (a local master: its files are the driver's)."""
    return (spark.sparkContext.master or "").startswith("local")


def local_paths(spark: SparkSession, files: list[FileEntry], *, allow_none: bool = False
                ) -> list[str] | None:
    """The files' local paths when Spark runs here and every file is a local file.

    Args:
        allow_none: no file gives an empty list (else None).
    """
    if not spark_is_local(spark):
        return None
    paths = [local_path(f.path) for f in files]
    if (not paths and not allow_none) or any(p is None or not os.path.isfile(p)
                                             for p in paths):
        return None
    return [p for p in paths if p is not None]


def arrow_schema(schema: StructType) -> pa.Schema | None:
    """The Arrow types Spark writes (and reads back) for a Spark schema; None if unknown."""
    import pyarrow as pa

    fields = []
    for f in schema.fields:
        try:
            fields.append(pa.field(f.name, lcr.arrow_type(f.dataType.simpleString())))
        except ValueError:
            return None
    return pa.schema(fields)


def exact_keys(want: pa.Schema, key_columns: list[str]) -> bool:
    """Whether Arrow's equality of keys is Spark's (not for floating point: Spark's join
    and grouping equate ``-0.0`` and ``0.0`` and every NaN)."""
    import pyarrow as pa

    return not any(pa.types.is_floating(want.field(k).type) for k in key_columns)


def _same_type(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether a file's column type is the one Spark writes (list item names aside)."""
    import pyarrow.types as pt

    if pt.is_list(have) and pt.is_list(want):
        return bool(have.value_type.equals(want.value_type))
    return bool(have.equals(want))


def columns_to_read(file_schema: pa.Schema, want: pa.Schema) -> list[str] | None:
    """The wanted columns a file holds, or None when one is held differently."""
    names = file_schema.names
    if len(set(names)) != len(names):
        return None
    lower = {n.lower(): n for n in names}
    present = []
    for f in want:
        if f.name not in names:
            if f.name.lower() in lower:
                return None  # Spark would match the other case
            continue
        if not _same_type(file_schema.field(f.name).type, f.type):
            return None
        present.append(f.name)
    return present


def as_wanted(got: pa.Table, want: pa.Schema) -> pa.Table:
    """A table of some wanted columns with all of them, in order (NULL where missing)."""
    import pyarrow as pa

    have = set(got.column_names)
    cols = [got.column(f.name).cast(f.type) if f.name in have
            else pa.nulls(got.num_rows, f.type) for f in want]
    return pa.Table.from_arrays(cols, schema=want)


def member_mask(table: pa.Table, keys: pa.Table, key_columns: list[str]) -> pa.Array:
    """Per row of ``table``, whether its key is one of ``keys`` (NULL keys match nothing,
    as in Spark's joins)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(key_columns) == 1:
        k = key_columns[0]
        return pc.is_in(table.column(k), value_set=keys.column(k), skip_nulls=True)
    index = pa.array(range(table.num_rows), pa.int64())
    left = pa.table({**{k: table.column(k) for k in key_columns}, "_cf_i": index})
    hit = left.join(keys.select(key_columns), key_columns, join_type="left semi",
                    use_threads=False)
    mask = pc.is_in(index, value_set=hit.column("_cf_i"))
    for k in key_columns:  # a key with a NULL part matches nothing, whatever the join does
        mask = pc.and_(mask, pc.is_valid(table.column(k)))
    return mask


def spark_metadata(spark_version: str) -> dict[str, str]:
    """What an Arrow writer puts in a file so that Spark reads its dates and timestamps
    as they are (proleptic Gregorian, as Arrow writes them), as it reads its own."""
    return {SPARK_VERSION_KEY: spark_version}


def open_checked(path: str, want: pa.Schema, required: list[str]
                 ) -> tuple[pq.ParquetFile, list[str]]:
    """A file opened for reading and the wanted columns it holds, once they are checked.

    Raises:
        Unproven: a column is held differently than Spark writes it, or a required
            column is missing.
    """
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    meta = pf.metadata.metadata or {}
    major = meta.get(SPARK_VERSION_KEY.encode(), b"").decode().split(".")[0]
    if not major.isdigit() or int(major) < 3 or any(k in meta for k in _LEGACY_KEYS):
        raise Unproven(f"{path}: not written by Spark 3 or later with proleptic dates")
    present = columns_to_read(pf.schema_arrow, want)
    if present is None or not all(k in present for k in required):
        raise Unproven(f"{path}: a column is held differently than Spark writes it")
    return pf, present
