"""Parquet target tables whose apply cost grows with the changes, not the table.

A target table is a set of Parquet files listed in a manifest in the state store.
Rows are spread over ``buckets`` by a hash of the primary key. Each apply writes a
*delta*: a few files per touched bucket (written without a shuffle) holding the new
row images and delete tombstones, stamped with bookkeeping columns:

* ``_cf_seq``: the table version that wrote the image (apply order; NULL in files
  written before it existed, read as 0);
* ``_cf_scn``, ``_cf_pos``, ``_cf_src``: the LCR's commit position, its position in the
  transaction and its source database;
* ``_cf_deleted``: a tombstone;
* ``_cf_tag``: the tag of the apply that wrote it (so a re-capture can tell apply
  changes from local ones, and forward the original source database);
* ``_cf_absent``: for a *partial image* (an UPDATE whose new values lack unchanged
  columns, such as PostgreSQL's unchanged TOASTed values), the columns it does not
  carry; NULL for a full image.

Reading the current state keeps, per key, the newest image (highest ``_cf_seq``, then
commit position) and drops tombstones; a partial image takes each absent column from
the newest earlier image that has it, so an unchanged column is never overwritten
with NULL. Deltas that hold partial images are listed as ``pdelta`` in the manifest
and only they make a read take the (slower) column-wise path.

A bucket is *compacted* (its files merged into base files) when its deltas grow
past a fraction of its base or number too many, so reads stay cheap and the rewrite
cost is amortised over the changes that caused it. Only the files of that bucket are
rewritten, and only the keys its deltas name are resolved: base rows of other keys
are copied as they are, without a sort or a shuffle (:func:`compacted`).

Manifest changes commit in the same state-store transaction as the apply's
progress, so a crash leaves either the old table or the new one, never half.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from changeflow import fs, lcr
from changeflow.errors import TargetError
from changeflow.state import StateStore, schema, utcnow
from changeflow.state.schema_apply import dropped_tables, target_stats

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

T = schema.target_tables
F_ = schema.target_files
D = dropped_tables
S = target_stats
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

    def with_columns(self, added: list[tuple[str, str]]) -> TargetTable:
        """The header with columns appended (schema evolution)."""
        return replace(self, columns=self.columns + added)


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

    def dropped(self, name: str) -> dict | None:  # type: ignore[type-arg]
        """The DROP TABLE that removed a table (source, commit position, time), if any."""
        with self.store.read() as c:
            row = c.execute(select(D).where(D.c.table_name == name)).first()
        return dict(row._mapping) if row else None

    def row_count(self, name: str) -> int | None:
        """The table's row count as the last apply left it (None: not recorded yet)."""
        with self.store.read() as c:
            row = c.execute(select(S.c.row_count, S.c.version).where(
                S.c.table_name == name)).first()
        return int(row[0]) if row else None

    def new_table(self, name: str, key_columns: list[str], columns: list[tuple[str, str]],
                  buckets: int) -> TargetTable:
        """The header of a table that does not exist yet (not committed).

        Raises:
            TargetError: a key column is not among the columns.
        """
        missing = [k for k in key_columns if k not in {c for c, _ in columns}]
        if missing:
            raise TargetError(f"target table {name}: key column {missing[0]!r} is missing")
        return TargetTable(name, fs.join(self.target_root, name), key_columns, columns,
                           buckets, 0)

    def evolve(
        self, name: str, key_columns: list[str], columns: list[tuple[str, str]], buckets: int
    ) -> TargetTable:
        """The table header after adding any new columns (not yet committed).

        Raises:
            TargetError: the table was dropped, its key differs, or a column's type
                differs from the table's.
        """
        current = self.get(name)
        if current is None:
            gone = self.dropped(name)
            if gone is not None:
                raise TargetError(
                    f"target table {name} was dropped (DROP TABLE from "
                    f"{gone['source_database']} at commit position {gone['commit_scn']}); "
                    "its changes cannot be applied until a CREATE TABLE re-creates it")
            return self.new_table(name, key_columns, columns, buckets)
        if key_columns and current.key_columns != key_columns:
            raise TargetError(
                f"target table {name}: key columns {key_columns} differ from the table's "
                f"{current.key_columns}"
            )
        known = dict(current.columns)
        for col, ltype in columns:
            if col in known and known[col] != ltype:
                raise TargetError(
                    f"target table {name}: column {col!r} is {known[col]}, the change has {ltype}"
                )
        return current.with_columns([(c, t) for c, t in columns if c not in known])

    def commit(
        self, conn: Connection, table: TargetTable, add: list[FileEntry],
        remove: list[str] | None = None, *, rows: int | None = None,
    ) -> None:
        """Register new files (and drop replaced ones) as the table's next version.

        Args:
            rows: the table's row count after this version, when known.
        """
        version = table.version + 1
        values = {
            "root": table.root, "key_columns": json.dumps(table.key_columns),
            "columns_json": json.dumps(table.columns), "buckets": table.buckets,
            "version": version,
        }
        if conn.execute(select(T.c.name).where(T.c.name == table.name)).first():
            conn.execute(update(T).where(T.c.name == table.name).values(**values))
        else:
            conn.execute(T.insert().values(name=table.name, **values))
            conn.execute(delete(D).where(D.c.table_name == table.name))
        for path in remove or []:
            conn.execute(delete(F_).where(F_.c.table_name == table.name, F_.c.path == path))
        for e in add:
            conn.execute(F_.insert().values(table_name=table.name, path=e.path, bucket=e.bucket,
                                             version=version, kind=e.kind, n_bytes=e.n_bytes))
        if rows is not None:
            self.set_row_count(conn, table.name, rows, version)

    def set_row_count(self, conn: Connection, name: str, rows: int, version: int) -> None:
        """Record a table's row count at a version."""
        vals = {"row_count": rows, "version": version, "updated_at": utcnow()}
        if conn.execute(update(S).where(S.c.table_name == name).values(**vals)).rowcount == 0:
            conn.execute(S.insert().values(table_name=name, **vals))

    def forget_row_count(self, conn: Connection, name: str) -> None:
        """Forget a table's row count (an apply without quality checks does not keep it)."""
        conn.execute(delete(S).where(S.c.table_name == name))

    def drop(self, conn: Connection, name: str, *, source: str | None = None,
             commit_scn: int | None = None) -> list[str]:
        """Remove a table from the manifest (DROP TABLE). Returns its files to delete
        once the transaction commits; later changes to it fail until it is re-created."""
        paths = [r[0] for r in conn.execute(select(F_.c.path).where(F_.c.table_name == name))]
        conn.execute(delete(F_).where(F_.c.table_name == name))
        conn.execute(delete(T).where(T.c.name == name))
        conn.execute(delete(S).where(S.c.table_name == name))
        conn.execute(delete(D).where(D.c.table_name == name))
        conn.execute(D.insert().values(table_name=name, source_database=source,
                                       commit_scn=commit_scn, dropped_at=utcnow()))
        return paths


def bucket_expr(keys: list[str], buckets: int) -> Column:
    """The bucket of a row: a stable hash of its key modulo the bucket count."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(*[F.col(k) for k in keys]), F.lit(buckets))


def bucket_of(df: DataFrame, keys: list[str], buckets: int) -> DataFrame:
    """Add the bucket column (see :func:`bucket_expr`)."""
    return df.withColumn(BUCKET, bucket_expr(keys, buckets))


def write_files(
    spark: SparkSession, table: TargetTable, rows: DataFrame, kind: str, tag: str, *,
    laid_out: bool = False,
) -> tuple[list[FileEntry], int]:
    """Write rows (with ``_cf_*`` columns) as new files, per bucket touched.

    Rows are shuffled by bucket so each touched bucket gets exactly one file (a delta's
    rows are few, so its shuffle is cheap; many tiny files per bucket would cost every
    later read of the bucket a task and a footer each, until the next compaction).

    Args:
        laid_out: the rows carry their bucket column and each task already holds few
            buckets (a compaction's scan of per-bucket files): written as they are,
            without a shuffle (a file per bucket and task).

    Returns:
        The new files (sizes in bytes) and the number of rows written.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    path = fs.join(table.root, f"{kind}-v{table.version + 1}-{tag}")
    schema = table.spark_schema()
    have = set(rows.columns)
    cols = [F.col(f.name) if f.name in have else F.lit(None).cast(f.dataType).alias(f.name)
            for f in schema.fields]
    data = rows.select(*cols, BUCKET) if BUCKET in have else bucket_of(
        rows.select(*cols), table.key_columns, table.buckets
    )
    obs = Observation(f"write_{tag}_{table.name}")
    data = data.observe(obs, F.count(F.lit(1)).alias("n"))
    (data if laid_out else data.repartition(F.col(BUCKET))).write.partitionBy(BUCKET) \
        .parquet(path)
    out = []
    for file, size in fs.data_files(spark, path):
        m = _BUCKET_DIR.search(file)
        if m:
            out.append(FileEntry(file, int(m.group(1)), table.version + 1, kind, size))
    if not out:
        # Nothing written: no rows. Spark drops the observation of an empty input
        # under the shuffle (its metrics row comes back without a schema and
        # ``obs.get`` fails an assertion), so it is not asked.
        return out, 0
    return out, int(obs.get.get("n") or 0)


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

