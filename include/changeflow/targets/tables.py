"""Creating target tables and evolving their schemas, as Iceberg DDL through Spark.

Every statement here is idempotent, so a pass that is retried after a crash may run it
again: a table is created if it does not exist, a column added if it is missing,
renamed if the old name is still there, dropped if it is still there.

A new table is created with format version 2 by default (position deletes: what every
Iceberg reader reads; 3 gives deletion vectors), merge-on-read for updates, deletes and
merges (an apply writes its changes and delete files, never rewrites unchanged rows),
the key columns as identifier fields (``NOT NULL``), and the partition spec
``bucket(N, first key column)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.errors import TargetError
from changeflow.targets.catalog import KEY_PROPERTY, META, IcebergTargets, TargetTable, split

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: table properties of every target table (besides its format version and key)
PROPERTIES = {
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
    # Spark's MERGE INTO and DELETE write one delete file per data file (as the apply's
    # own row deltas do): a reader opens only the deletes of the files it reads, and
    # maintenance knows each file's deleted share (targets.maintenance).
    "write.delete.granularity": "file",
    "write.parquet.compression-codec": "zstd",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
}


def q(name: str) -> str:
    """A quoted identifier."""
    return "`" + name.replace("`", "``") + "`"


def _type(ltype: str) -> str:
    return lcr.LOGICAL_TYPES[ltype].spark_type


def create(spark: SparkSession, targets: IcebergTargets, table: TargetTable) -> None:
    """Create a table (if it does not exist) with the header's columns and key.

    Raises:
        TargetError: the header has no key column, or a key column is not a column.
    """
    if not table.key_columns:
        raise TargetError(f"target table {table.name}: a target table needs a key")
    names = {c for c, _ in table.columns}
    missing = [k for k in table.key_columns if k not in names]
    if missing:
        raise TargetError(f"target table {table.name}: key column {missing[0]!r} is missing")
    owner, _ = split(table.name)
    targets.register(spark)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {q(targets.name)}.{q(owner)}")
    cols = [f"{q(c)} {_type(t)}{' NOT NULL' if c in table.key_columns else ''}"
            for c, t in table.columns]
    cols += [f"{q(m)} {t}" for m, t in META.items()]
    props = {**PROPERTIES, "format-version": str(targets.format_version),
             KEY_PROPERTY: ",".join(table.key_columns)}
    tblprops = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
    ident = targets.ident(table.name)
    spark.sql(f"CREATE TABLE IF NOT EXISTS {ident} ({', '.join(cols)}) USING iceberg "
              f"PARTITIONED BY (bucket({table.buckets}, {q(table.key_columns[0])})) "
              f"TBLPROPERTIES ({tblprops})")
    spark.sql(f"ALTER TABLE {ident} SET IDENTIFIER FIELDS "
              f"{', '.join(q(k) for k in table.key_columns)}")


def add_columns(spark: SparkSession, targets: IcebergTargets, name: str,
                columns: list[tuple[str, str]]) -> None:
    """Add the columns the table lacks (older rows read them as NULL).

    Raises:
        TargetError: a column exists with another type (Iceberg cannot change it to this
            one: the transaction goes to the error queue with this reason).
    """
    current = targets.get(spark, name)
    if current is None:
        raise TargetError(f"target table {name} does not exist")
    have = dict(current.columns)
    for col, ltype in columns:
        if col in have and have[col] != ltype:
            raise TargetError(f"target table {name}: column {col!r} is {have[col]}, the change "
                              f"has {ltype}; Iceberg cannot change a column's type this way")
    new = [(c, t) for c, t in columns if c not in have]
    if new:
        spark.sql(f"ALTER TABLE {targets.ident(name)} ADD COLUMNS ("
                  + ", ".join(f"{q(c)} {_type(t)}" for c, t in new) + ")")


def drop_column(spark: SparkSession, targets: IcebergTargets, name: str, column: str) -> None:
    """Drop a column if the table still has it.

    Raises:
        TargetError: the column is a key column.
    """
    current = targets.get(spark, name)
    if current is None or column not in current.column_names:
        return
    if column in current.key_columns:
        raise TargetError(f"ALTER TABLE {name} DROP COLUMN {column}: it is a key column")
    spark.sql(f"ALTER TABLE {targets.ident(name)} DROP COLUMN {q(column)}")


def rename_column(spark: SparkSession, targets: IcebergTargets, name: str, old: str,
                  new: str) -> None:
    """Rename a column if the old name is still there (and the new one is not).

    Raises:
        TargetError: both names exist, or the column is a key column.
    """
    current = targets.get(spark, name)
    if current is None:
        return
    cols = current.column_names
    if old not in cols:
        return
    if new in cols:
        raise TargetError(f"ALTER TABLE {name} RENAME COLUMN {old} TO {new}: the table "
                          f"has a column {new!r} already")
    if old in current.key_columns:
        raise TargetError(f"ALTER TABLE {name} RENAME COLUMN {old}: it is a key column")
    spark.sql(f"ALTER TABLE {targets.ident(name)} RENAME COLUMN {q(old)} TO {q(new)}")


def drop_table(spark: SparkSession, targets: IcebergTargets, name: str) -> None:
    """Drop a table and its files, if it exists."""
    targets.register(spark)
    spark.sql(f"DROP TABLE IF EXISTS {targets.ident(name)} PURGE")


def create_branch(spark: SparkSession, targets: IcebergTargets, table: str, branch: str,
                  snapshot: int | None = None) -> None:
    """Create a branch of a table at ``snapshot`` (the current one when None)."""
    at = f" AS OF VERSION {snapshot}" if snapshot is not None else ""
    spark.sql(f"ALTER TABLE {targets.ident(table)} CREATE BRANCH {q(branch)}{at}")


def drop_branch(spark: SparkSession, targets: IcebergTargets, table: str, branch: str) -> None:
    """Drop a branch of a table (if it exists)."""
    spark.sql(f"ALTER TABLE {targets.ident(table)} DROP BRANCH IF EXISTS {q(branch)}")


def ancestors(spark: SparkSession, jt: Any, snapshot: int | None) -> Iterator[Any]:
    """A snapshot of an Iceberg table (``jt``, Java) and its ancestors, newest first, as
    Iceberg's ``SnapshotUtil`` walks them (lazily: stop early for free); none for None."""
    if snapshot is None:
        return
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    assert jvm is not None
    it = jvm.org.apache.iceberg.util.SnapshotUtil.ancestorsBetween(jt, snapshot, None) \
        .iterator()
    while it.hasNext():
        yield it.next()
