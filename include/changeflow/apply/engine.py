"""The apply process for Parquet targets.

An apply dequeues the pending batches of its queue, keeps the messages its rule
sets accept, skips the transactions it has already applied (its high-water mark per
source database: transactions are applied whole, so a commit position at or below
the mark is done), turns row LCRs into row images and tombstones per target table,
and commits the new table files, the new marks and its queue position in one
state-store transaction.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import select

from changeflow import quality
from changeflow.apply.target import FileEntry, TargetCatalog, TargetTable, compact, write_files
from changeflow.config import ApplySpec, PipelineConfig
from changeflow.errors import TargetError
from changeflow.queues import io as qio
from changeflow.sites import consumer_name, open_pipeline, queue_site
from changeflow.state import schema, utcnow

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)
RuleFilter = Callable[["DataFrame"], "DataFrame"]
P = schema.apply_progress


@dataclass
class ApplyResult:
    """What one apply run did."""

    apply: str
    batches: int = 0
    messages: int = 0
    tables: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def target_catalog(cfg: PipelineConfig, spec: ApplySpec) -> TargetCatalog:
    """The target catalog of the site an apply runs at (its queue's site)."""
    rt, _ = queue_site(cfg, spec.queue)
    return TargetCatalog(rt.store, rt.spec.target_root)


def high_water_marks(cfg: PipelineConfig, spec: ApplySpec) -> dict[str, int]:
    """The last applied commit position per source database."""
    rt, _ = queue_site(cfg, spec.queue)
    with rt.store.read() as c:
        rows = c.execute(select(P.c.source_database, P.c.commit_scn).where(P.c.apply == spec.name))
        return {r[0]: int(r[1]) for r in rows}


def unapplied(df: DataFrame, marks: dict[str, int]) -> DataFrame:
    """Row LCRs of transactions above the high-water mark of their source."""
    from pyspark.sql import functions as F

    rows = df.where(F.col("kind") == "ROW")
    if not marks:
        return rows
    cond: Column = ~F.col("source_database_name").isin(list(marks))
    for db, scn in marks.items():
        cond = cond | ((F.col("source_database_name") == db) & (F.col("commit_scn") > scn))
    return rows.where(cond)


Columns = dict[str, tuple[list[str], list[tuple[str, str]]]]
Marks = dict[str, tuple[int, object]]


def survey(changes: DataFrame) -> tuple[Columns, Marks]:
    """One pass over the changes: per target table its key columns and (column, logical
    type) in source order; per source database the highest commit position and time.

    Rows are grouped by their *shape* (the names and types of their values), of which a
    batch holds a handful, so the pass costs a hash aggregate, not an explode.
    """
    from pyspark.sql import functions as F

    values = F.coalesce("new_values", "old_values")
    shapes = changes.groupBy(
        "object_owner", "object_name", "key_columns", "source_database_name",
        F.map_keys(values).alias("cols"),
        F.map_values(values).getField("type").alias("types"),  # no lambda: stays in codegen
    ).agg(F.max("commit_scn").alias("scn"), F.max("commit_time").alias("t")).collect()
    out: Columns = {}
    marks: Marks = {}
    for r in sorted(shapes, key=lambda r: (r.object_owner, r.object_name)):
        name = f"{r.object_owner}.{r.object_name}".lower()
        keys, cols = out.setdefault(name, ([], []))
        if not keys and r.key_columns:
            keys.extend(k.lower() for k in r.key_columns)
        known = {c for c, _ in cols}
        # The maps keep insertion order, so columns keep the order the source listed them.
        for col, ltype in zip(r.cols or [], r.types or [], strict=True):
            if col.lower() not in known:
                cols.append((col.lower(), ltype))
                known.add(col.lower())
        best = marks.get(r.source_database_name)
        if best is None or (r.scn, r.t) > best:
            marks[r.source_database_name] = (r.scn, r.t)
    return out, marks


def table_columns(changes: DataFrame) -> Columns:
    """Per target table: key columns and (column, logical type), from the LCRs themselves."""
    return survey(changes)[0]


def row_images(changes: DataFrame, table: TargetTable) -> DataFrame:
    """New images for INSERT/UPDATE, tombstones for DELETE and for a key an UPDATE left."""
    from pyspark.sql import functions as F

    from changeflow import lcr

    def image(values: str, deleted: bool) -> list[Column]:
        cols = [
            F.col(values).getItem(c.upper()).getField(lcr.LOGICAL_TYPES[t].field)
            .cast(lcr.LOGICAL_TYPES[t].spark_type).alias(c)
            for c, t in table.columns
        ]
        return cols + [
            F.col("commit_scn").alias("_cf_scn"), F.col("position").alias("_cf_pos"),
            F.lit(deleted).alias("_cf_deleted"),
        ]

    cmd = F.col("command_type")
    key_moved = F.lit(False)
    for k in table.key_columns:
        o = F.col("old_values").getItem(k.upper())
        n = F.col("new_values").getItem(k.upper())
        key_moved = key_moved | ~o.eqNullSafe(n)
    upserts = changes.where(cmd.isin("INSERT", "UPDATE")).select(*image("new_values", False))
    deletes = changes.where(
        (cmd == "DELETE") | ((cmd == "UPDATE") & F.col("old_values").isNotNull() & key_moved)
    ).select(*image("old_values", True))
    return upserts.unionByName(deletes)


def _record_marks(conn: object, apply: str, marks: Marks) -> None:
    for source, (scn, when) in marks.items():
        key = (P.c.apply == apply) & (P.c.source_database == source)
        vals = {"commit_scn": scn, "commit_time": when, "updated_at": utcnow()}
        if conn.execute(select(P.c.commit_scn).where(key)).first():  # type: ignore[attr-defined]
            conn.execute(P.update().where(key).values(**vals))  # type: ignore[attr-defined]
        else:
            conn.execute(P.insert().values(  # type: ignore[attr-defined]
                apply=apply, source_database=source, **vals))


def apply_once(
    spark: SparkSession, cfg: PipelineConfig, name: str, *,
    rule_filter: RuleFilter | None = None, max_batches: int | None = None,
) -> ApplyResult:
    """Apply every pending batch of the apply's queue once."""
    started = time.monotonic()
    open_pipeline(cfg)
    spec: ApplySpec = cfg.component("apply", name)
    rt, queue = queue_site(cfg, spec.queue)
    consumer = consumer_name("apply", name)
    catalog = target_catalog(cfg, spec)
    result = ApplyResult(name)
    batches = rt.catalog.pending(queue, consumer, max_batches=max_batches)
    if not batches:
        return result
    df = qio.read_batches(spark, batches)
    if rule_filter is not None:
        df = rule_filter(df)
    changes = unapplied(df, high_water_marks(cfg, spec)).persist()
    try:
        with qio.guard(batches):
            columns, marks = survey(changes)
            written = _write_tables(spark, catalog, spec, changes, columns)
        quality.check_target(spark, cfg, stage=f"apply:{name}", catalog=catalog,
                             written=written, changes=changes)
        with rt.store.begin() as conn:
            for table, files, _ in written:
                catalog.commit(conn, table, files)
            _record_marks(conn, name, marks)
            rt.catalog.ack(queue, consumer, batches[-1].seq, conn)
    finally:
        changes.unpersist()
    result.batches = len(batches)
    result.messages = sum(b.n_messages for b in batches)
    result.tables = {t.name: n for t, _, n in written}
    from changeflow.propagation import purge

    purge(spark, cfg, spec.queue)
    for table, _, _ in written:
        compact(spark, catalog, table.name)
    result.seconds = time.monotonic() - started
    return result


def _write_tables(
    spark: SparkSession, catalog: TargetCatalog, spec: ApplySpec, changes: DataFrame,
    columns: Columns,
) -> list[tuple[TargetTable, list[FileEntry], int]]:
    """Write every touched table's delta; tables are written concurrently (one job each)."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql import functions as F

    tag = uuid.uuid4().hex[:12]
    plans = []
    for name, (keys, cols) in columns.items():
        if not keys:
            raise TargetError(f"target table {name}: the LCRs carry no key columns")
        table = catalog.evolve(name, keys, cols, spec.buckets)
        owner, obj = name.upper().split(".", 1)
        mine = changes.where((F.upper("object_owner") == owner) & (F.upper("object_name") == obj))
        plans.append((table, row_images(mine, table)))
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [(t, pool.submit(write_files, spark, t, rows, "delta", tag)) for t, rows in plans]
        return [(t, *f.result()) for t, f in futures]
