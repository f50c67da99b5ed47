"""Converting targets of the earlier private format into Iceberg tables, in place.

``changeflow targets upgrade`` (:func:`upgrade`) reads each table of the old manifest
(:mod:`.legacy`: the current row per key, as the old apply resolved it, with its
bookkeeping) and writes it as an Iceberg table of the site's catalog with the same
columns, key and bucket count; the rows keep their source database, commit position
and apply tag. The apply's positions (which transactions are applied) live in the
state store and do not change: the next apply goes on where the old one stopped.

Each table is converted in two steps, each safe to repeat after a crash: the Iceberg
table is written in one commit whose snapshot says what it was converted from
(``changeflow.upgraded-from`` = the old manifest version); then the old manifest rows
are removed. A table whose Iceberg snapshot says it was converted is not written again.
The old Parquet files are left where they were (``legacy_root`` in the result), for the
operator to delete once satisfied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import delete

from changeflow.errors import TargetError
from changeflow.jvm import java_dict, java_each
from changeflow.state import schema
from changeflow.targets import legacy
from changeflow.targets import tables as ddl_sql
from changeflow.targets.catalog import META, IcebergTargets, TargetTable
from changeflow.targets.commit import snapshot_properties

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FROM = "changeflow.upgraded-from"


@dataclass
class Upgraded:
    """One converted table."""

    table: str
    rows: int
    snapshot: int | None
    legacy_root: str
    already: bool = False


def upgrade(spark: SparkSession, targets: IcebergTargets,
            names: list[str] | None = None) -> list[Upgraded]:
    """Convert the site's tables of the old format (all, or ``names``) into Iceberg.

    Raises:
        TargetError: a named table is not in the old manifest, or an Iceberg table of
            that name exists and was not converted from it (nothing is overwritten).
    """
    old = legacy.TargetCatalog(targets.store, targets.target_root)
    todo = old.names() if names is None else names
    out = []
    for name in todo:
        header = old.get(name)
        if header is None:
            raise TargetError(f"target table {name} is not a table of the old format at "
                              f"{targets.target_root}")
        out.append(_one(spark, targets, old, header))
    return out


def _one(spark: SparkSession, targets: IcebergTargets, old: legacy.TargetCatalog,
         header: legacy.TargetTable) -> Upgraded:
    marker = f"{header.name}@{header.version}"
    jt = targets.java_table(spark, header.name)
    already = jt is not None and any(
        java_dict(s.summary()).get(FROM) == marker for s in java_each(jt.snapshots()))
    if jt is not None and not already:
        raise TargetError(f"target table {header.name}: an Iceberg table of that name exists "
                          f"in catalog {targets.name} and was not converted from the old "
                          "format; rename or drop one of them first")
    if not already:
        table = TargetTable(header.name, header.key_columns, header.columns, header.buckets,
                            None, exists=False)
        ddl_sql.create(spark, targets, table)
        rows = legacy.read_table(spark, old, header.name, with_meta=True).select(
            *header.column_names, *META)
        with snapshot_properties(spark, {FROM: marker}):
            rows.writeTo(targets.ident(header.name)).option("check-nullability", "false") \
                .append()
    now = targets.get(spark, header.name)
    assert now is not None
    n = targets.row_count(spark, header.name)
    with targets.store.begin() as conn:
        targets.note_published(conn, header.name, n, now.snapshot)
        conn.execute(delete(schema.target_files).where(
            schema.target_files.c.table_name == header.name))
        conn.execute(delete(schema.target_tables).where(
            schema.target_tables.c.name == header.name))
    return Upgraded(header.name, n, now.snapshot, header.root, already)
