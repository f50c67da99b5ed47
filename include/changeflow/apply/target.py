"""Parquet target tables whose apply cost grows with the changes, not the table.

A target table is a set of Parquet files listed in a manifest in the state store.
Rows are spread over ``buckets`` by a hash of the primary key. Each apply writes a
*delta*: a few files per touched bucket (written without a shuffle) holding the new
row images and delete tombstones, stamped with their source commit position
(``_cf_scn``, ``_cf_pos``).
Reading the current state keeps, per key, the row with the highest position and
drops tombstones. So an apply of N changes writes about N rows, whatever the size
of the table, and applying the same LCR twice resolves to the same row.

A bucket is *compacted* (its files merged into one base file) when its deltas grow
past a fraction of its base, so reads stay cheap and the rewrite cost is amortised
over the changes that caused it. Only the files of that bucket are rewritten.

Manifest changes commit in the same state-store transaction as the apply's
progress, so a crash leaves either the old table or the new one, never half.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from changeflow import fs, lcr
from changeflow.errors import TargetError
from changeflow.state import StateStore, schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

T = schema.target_tables
F_ = schema.target_files
META = ("_cf_scn", "_cf_pos", "_cf_deleted")
BUCKET = "_cf_bucket"
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
            fields += [
                T_.StructField("_cf_scn", T_.LongType()),
                T_.StructField("_cf_pos", T_.LongType()),
                T_.StructField("_cf_deleted", T_.BooleanType()),
            ]
        return T_.StructType(fields)


@dataclass(frozen=True)
class FileEntry:
    """One file of a table's manifest."""

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

    def evolve(
        self, name: str, key_columns: list[str], columns: list[tuple[str, str]], buckets: int
    ) -> TargetTable:
        """The table header after adding any new columns (not yet committed)."""
        current = self.get(name)
        if current is None:
            missing = [k for k in key_columns if k not in {c for c, _ in columns}]
            if missing:
                raise TargetError(f"target table {name}: key column {missing[0]!r} is missing")
            return TargetTable(name, fs.join(self.target_root, name), key_columns, columns,
                               buckets, 0)
        if current.key_columns != key_columns:
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
        added = [(c, t) for c, t in columns if c not in known]
        return TargetTable(current.name, current.root, current.key_columns,
                           current.columns + added, current.buckets, current.version)

    def commit(
        self, conn: Connection, table: TargetTable, add: list[FileEntry],
        remove: list[str] | None = None,
    ) -> None:
        """Register new files (and drop replaced ones) as the table's next version."""
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
        for path in remove or []:
            conn.execute(delete(F_).where(F_.c.table_name == table.name, F_.c.path == path))
        for e in add:
            conn.execute(F_.insert().values(table_name=table.name, path=e.path, bucket=e.bucket,
                                             version=version, kind=e.kind, n_bytes=e.n_bytes))


def bucket_of(df: DataFrame, keys: list[str], buckets: int) -> DataFrame:
    """Add the bucket column: a stable hash of the key modulo the bucket count."""
    from pyspark.sql import functions as F

    return df.withColumn(BUCKET, F.pmod(F.xxhash64(*[F.col(k) for k in keys]), F.lit(buckets)))


def write_files(
    spark: SparkSession, table: TargetTable, rows: DataFrame, kind: str, tag: str
) -> tuple[list[FileEntry], int]:
    """Write rows (with ``_cf_*`` columns) as new files, per bucket touched.

    A base (compaction) is shuffled so each bucket gets one file; a delta is written
    without a shuffle (a few files per bucket), since its rows are few and it is read
    again only until the next compaction.

    Returns:
        The new files (sizes in bytes) and the number of rows written.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    path = fs.join(table.root, f"{kind}-v{table.version + 1}-{tag}")
    cols = [f.name for f in table.spark_schema().fields]
    data = rows.select(*cols, BUCKET) if BUCKET in rows.columns else bucket_of(
        rows.select(*cols), table.key_columns, table.buckets
    )
    obs = Observation(f"write_{tag}_{table.name}")
    data = data.observe(obs, F.count(F.lit(1)).alias("n"))
    if kind == "base":
        laid_out = data.repartition(F.col(BUCKET))
    else:  # at most 8 files per bucket, without a shuffle
        laid_out = data.coalesce(8).sortWithinPartitions(BUCKET)
    laid_out.write.partitionBy(BUCKET).parquet(path)
    out = []
    for file, size in fs.data_files(spark, path):
        m = _BUCKET_DIR.search(file)
        if m:
            out.append(FileEntry(file, int(m.group(1)), table.version + 1, kind, size))
    return out, int(obs.get.get("n") or 0)


def resolve(df: DataFrame, keys: list[str]) -> DataFrame:
    """Keep the latest image per key; drop keys whose latest image is a tombstone."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*keys).orderBy(F.col("_cf_scn").desc(), F.col("_cf_pos").desc(),
                                          F.col("_cf_deleted").asc())
    latest = df.withColumn("_cf_rn", F.row_number().over(w)).where("_cf_rn = 1")
    return latest.where(~F.col("_cf_deleted")).drop("_cf_rn")


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
    files = [f.path for f in catalog.files(name) if buckets is None or f.bucket in buckets]
    if not files:
        return spark.createDataFrame([], table.spark_schema(with_meta=with_meta))
    raw = spark.read.schema(table.spark_schema()).parquet(*files)
    current = resolve(raw, table.key_columns)
    return current if with_meta else current.drop(*META)


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
        deltas = [f for f in fl if f.kind == "delta"]
        grown = base > 0 and sum(f.n_bytes for f in deltas) > ratio * base
        if len({f.version for f in deltas}) > max_deltas or grown:
            out.append(b)
    return out


def compact(
    spark: SparkSession, catalog: TargetCatalog, name: str, *, ratio: float = 0.5,
    max_deltas: int = 8,
) -> list[int]:
    """Merge the files of the buckets that need it into one base file each.

    Only those buckets' files are read and rewritten. The swap is one state-store
    transaction; replaced files are deleted after it. Returns the compacted buckets.
    """
    import uuid

    table = catalog.get(name)
    if table is None:
        return []
    files = catalog.files(name)
    todo = buckets_to_compact(files, ratio=ratio, max_deltas=max_deltas)
    if not todo:
        return []
    old = [f.path for f in files if f.bucket in todo]
    current = resolve(spark.read.schema(table.spark_schema()).parquet(*old), table.key_columns)
    new, _ = write_files(spark, table, current, "base", uuid.uuid4().hex[:12])
    with catalog.store.begin() as conn:
        catalog.commit(conn, table, new, remove=old)
    for path in old:
        fs.delete(spark, path)
    return todo
