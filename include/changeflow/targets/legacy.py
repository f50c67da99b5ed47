"""The private target format of changeflow before Apache Iceberg, read for the upgrade.

Until Iceberg, a target table was a manifest of Parquet files in the state store
(``cf_target_tables``, ``cf_target_files``), spread over buckets by a hash of the key,
with merge-on-read deltas stamped with bookkeeping columns (``_cf_seq``, ``_cf_scn``,
``_cf_pos``, ``_cf_deleted``, ``_cf_src``, ``_cf_tag``, ``_cf_absent``): only changeflow
could fold them into current rows. This module keeps exactly that read
(:func:`read_table`), for :mod:`.upgrade`, which converts such a table into an Iceberg
table; nothing writes the format any more.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select

from changeflow import lcr
from changeflow.errors import TargetError
from changeflow.state import StateStore, schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

T = schema.target_tables
F_ = schema.target_files
META = ("_cf_seq", "_cf_scn", "_cf_pos", "_cf_deleted", "_cf_src", "_cf_tag", "_cf_absent")
BUCKET = "_cf_bucket"
KINDS = ("base", "delta", "pdelta")
_BUCKET_DIR = re.compile(r"/_cf_bucket=(\d+)/")


@dataclass(frozen=True)
class TargetTable:
    """A target table's manifest header."""

    name: str
    root: str
    key_columns: list[str]
    columns: list[tuple[str, str]]  # (column, logical type), target column names
    buckets: int
    version: int

    def spark_schema(self, *, with_meta: bool = True) -> StructType:
        """The table's Spark schema, optionally with changeflow's bookkeeping columns."""
        from pyspark.sql import types as T_

        fields = [
            T_.StructField(c, lcr.spark_type(lcr.LOGICAL_TYPES[t].spark_type))
            for c, t in self.columns
        ]
        if with_meta:
            fields += meta_fields()
        return T_.StructType(fields)

    @property
    def column_names(self) -> list[str]:
        """The data columns, in table order."""
        return [c for c, _ in self.columns]


def meta_fields() -> list:  # type: ignore[type-arg]
    """The bookkeeping columns as Spark fields, in :data:`META` order."""
    from pyspark.sql import types as T_

    return [
        T_.StructField("_cf_seq", T_.LongType()),
        T_.StructField("_cf_scn", T_.LongType()),
        T_.StructField("_cf_pos", T_.LongType()),
        T_.StructField("_cf_deleted", T_.BooleanType()),
        T_.StructField("_cf_src", T_.StringType()),
        T_.StructField("_cf_tag", T_.BinaryType()),
        T_.StructField("_cf_absent", T_.ArrayType(T_.StringType())),
    ]


@dataclass(frozen=True)
class FileEntry:
    """One file of a table's manifest (``kind``: base, delta, or pdelta: partial images)."""

    path: str
    bucket: int
    version: int
    kind: str
    n_bytes: int


class TargetCatalog:
    """The target tables of one site."""

    def __init__(self, store: StateStore, target_root: str):
        self.store = store
        self.target_root = target_root

    def get(self, name: str) -> TargetTable | None:
        """A table's header, or None when it was never applied to."""
        with self.store.read() as c:
            row = c.execute(select(T).where(T.c.name == name)).first()
        if row is None:
            return None
        m = row._mapping
        return TargetTable(
            name=m["name"], root=m["root"], key_columns=json.loads(m["key_columns"]),
            columns=[tuple(x) for x in json.loads(m["columns_json"])],  # type: ignore[misc]
            buckets=m["buckets"], version=m["version"],
        )

    def names(self) -> list[str]:
        """All target tables of this site."""
        with self.store.read() as c:
            return [r[0] for r in c.execute(select(T.c.name).order_by(T.c.name))]

    def files(self, name: str) -> list[FileEntry]:
        """The live files of a table."""
        with self.store.read() as c:
            rows = c.execute(select(F_).where(F_.c.table_name == name).order_by(F_.c.version))
            return [
                FileEntry(r.path, r.bucket, r.version, r.kind, r.n_bytes) for r in rows
            ]

def order_desc() -> list[Column]:
    """Newest image first: apply order, then commit position; an image before a tombstone."""
    from pyspark.sql import functions as F

    return [F.coalesce(F.col("_cf_seq"), F.lit(0)).desc(), F.col("_cf_scn").desc(),
            F.col("_cf_pos").desc(), F.col("_cf_deleted").asc()]


def resolve(df: DataFrame, keys: list[str], *, partial: bool = False,
            keep_deleted: bool = False) -> DataFrame:
    """The current image per key (see the module docstring); tombstones dropped.

    Args:
        partial: some rows are partial images (``_cf_absent``): fill their absent
            columns from older images, column by column.
        keep_deleted: keep keys whose newest image is a tombstone (as tombstones).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not partial:
        w = Window.partitionBy(*keys).orderBy(*order_desc())
        latest = df.withColumn("_cf_rn", F.row_number().over(w)).where("_cf_rn = 1")
        latest = latest.drop("_cf_rn")
        return latest if keep_deleted else latest.where(~F.col("_cf_deleted"))
    deleted = F.col("_cf_deleted")
    order = F.struct(F.coalesce(F.col("_cf_seq"), F.lit(0)), F.col("_cf_scn"),
                     F.col("_cf_pos"), ~deleted)
    aggs = []
    for c in df.columns:
        if c in keys or c in META:
            continue
        has = deleted | F.col("_cf_absent").isNull() | ~F.array_contains("_cf_absent", c)
        aggs.append(F.max_by(F.when(~deleted, F.col(c)), F.when(has, order)).alias(c))
    meta = [m for m in META if m in df.columns and m != "_cf_absent"]
    aggs.append(F.max_by(F.struct(*meta), order).alias("_cf_meta"))
    out = df.groupBy(*keys).agg(*aggs).select(
        *[c for c in df.columns if c not in META], "_cf_meta.*")
    if "_cf_absent" in df.columns:
        out = out.withColumn("_cf_absent", F.lit(None).cast("array<string>"))
    out = out.select(*df.columns)
    return out if keep_deleted else out.where(~F.col("_cf_deleted"))


def read_files(spark: SparkSession, table: TargetTable, files: list[FileEntry], *,
               columns: list[str] | None = None) -> DataFrame:
    """The raw rows (every image, unresolved) of some of a table's files.

    Args:
        columns: data columns to read (keys and bookkeeping columns always come).
    """
    schema = table.spark_schema()
    if not files:
        raw = spark.createDataFrame([], schema)
    else:
        raw = read_parquet(spark, schema, [f.path for f in files])
    if columns is None:
        return raw
    keep = list(dict.fromkeys([*table.key_columns, *columns]))
    return raw.select(*keep, *META)


_DISCOVERY = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_discovery_lock = threading.Lock()


def read_parquet(spark: SparkSession, schema: StructType, paths: list[str]) -> DataFrame:
    """Read the given Parquet files (manifest entries, so nothing needs discovering).

    Spark lists more than 32 paths with a Spark job (a task per path); for local files
    that job costs far more than listing them on the driver, so the threshold is raised
    for this read. Other file systems keep Spark's parallel listing.
    """
    local = all(p.startswith(("file:", "/")) for p in paths)
    if not local or len(paths) <= 32:
        return spark.read.schema(schema).parquet(*paths)
    with _discovery_lock:
        old = spark.conf.get(_DISCOVERY, None)
        spark.conf.set(_DISCOVERY, str(len(paths) + 1))
        try:
            return spark.read.schema(schema).parquet(*paths)
        finally:
            if old is None:
                spark.conf.unset(_DISCOVERY)
            else:
                spark.conf.set(_DISCOVERY, old)


def read_table(
    spark: SparkSession, catalog: TargetCatalog, name: str, *, buckets: list[int] | None = None,
    with_meta: bool = False,
) -> DataFrame:
    """The current state of a target table.

    Raises:
        TargetError: the table does not exist.
    """
    table = catalog.get(name)
    if table is None:
        raise TargetError(f"target table {name!r} does not exist")
    files = [f for f in catalog.files(name) if buckets is None or f.bucket in buckets]
    if not files:
        return spark.createDataFrame([], table.spark_schema(with_meta=with_meta))
    current = resolve(read_files(spark, table, files), table.key_columns,
                      partial=any(f.kind == "pdelta" for f in files))
    return current if with_meta else current.drop(*META)

