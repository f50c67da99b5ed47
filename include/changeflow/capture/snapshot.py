"""Capture from table snapshots: the synchronous-capture analogue for sources without a log.

A source table is a series of snapshots, ``<root>/<owner.table>/snap=<n>/`` (Parquet
or CSV). Comparing snapshot ``n-1`` with ``n`` by primary key gives INSERT, UPDATE
and DELETE row LCRs with old and new values. The first snapshot is captured as
INSERTs (instantiation). Snapshot ``n`` of every table forms one source transaction
with one commit position, enqueued as one batch under the dedup key
``capture:<name>:snap=<n>``: re-running a capture never duplicates what it captured,
and its progress is recorded in the same state-store transaction as the enqueue.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import select

from changeflow import fs, lcr, quality, values
from changeflow.config import CaptureSpec, PipelineConfig, SnapshotSource, SnapshotTable
from changeflow.errors import ConfigError, SchemaMismatchError
from changeflow.pipeline import Pipeline, resolve
from changeflow.quality.batch import commit_capture
from changeflow.queues import io as qio
from changeflow.sites import SiteRuntime
from changeflow.state import schema, utcnow
from changeflow.state.leases import Lease

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass
class CaptureResult:
    """What one capture run did."""

    capture: str
    snapshots: list[int] = field(default_factory=list)
    messages: int = 0
    skipped: list[int] = field(default_factory=list)


def snapshot_source(spec: CaptureSpec) -> SnapshotSource:
    """A capture's source, which must be a snapshot source here."""
    if not isinstance(spec.source, SnapshotSource):
        raise ConfigError(f"capture {spec.name} does not read snapshots "
                          f"(its source is {spec.source.type})")
    return spec.source


def snapshot_path(source: SnapshotSource, table: str, n: int) -> str:
    """The directory of snapshot ``n`` of a table."""
    return fs.join(source.root, table.lower(), f"snap={n}")


def list_snapshots(spark: SparkSession, source: SnapshotSource, table: str) -> list[int]:
    """Snapshot numbers present for a table, ascending."""
    out = []
    for name in fs.list_dirs(spark, fs.join(source.root, table.lower())):
        if name.startswith("snap=") and name[5:].isdigit():
            out.append(int(name[5:]))
    return sorted(out)


def read_snapshot(
    spark: SparkSession, source: SnapshotSource, table: SnapshotTable, n: int
) -> DataFrame:
    """Read one snapshot and check that its key columns are there."""
    path = snapshot_path(source, table.name, n)
    if source.format == "csv":
        reader = spark.read.option("header", "true")
        reader = reader.schema(table.schema_ddl) if table.schema_ddl else reader.option(
            "inferSchema", "true"
        )
        df = reader.csv(path)
    else:
        df = spark.read.parquet(path)
    lower = {c.lower() for c in df.columns}
    for key in table.key:
        if key.lower() not in lower:
            raise SchemaMismatchError(
                f"key column of {table.name} is missing from the snapshot", path=path, field=key
            )
    for f in df.schema.fields:
        values.logical_type_for(f.dataType, column=f"{table.name}.{f.name}")
    return df


def diff_snapshots(
    prev: DataFrame | None,
    cur: DataFrame,
    key: list[str],
    *,
    table: str,
    database: str,
    transaction_id: str,
    commit_scn: int,
    commit_time: dt.datetime,
) -> DataFrame:
    """Row LCRs that turn ``prev`` into ``cur`` (all INSERTs when ``prev`` is None).

    A pure transform: DataFrames in, a DataFrame following the LCR contract out.
    """
    from pyspark.sql import functions as F

    cols = cur.columns
    if prev is None:
        prev = cur.limit(0)
    prev = prev.select(*cols)
    o = prev.select(*[F.col(c).alias(f"o_{c}") for c in cols]).withColumn("_o", F.lit(True))
    n = cur.select(*[F.col(c).alias(f"n_{c}") for c in cols]).withColumn("_n", F.lit(True))
    cond = [F.col(f"o_{k}") == F.col(f"n_{k}") for k in key]
    joined = o.join(n, on=cond, how="full_outer")
    nonkey = [c for c in cols if c not in key]
    changed = F.lit(False)
    for c in nonkey:
        changed = changed | ~F.col(f"o_{c}").eqNullSafe(F.col(f"n_{c}"))
    command = (
        F.when(F.col("_o").isNull(), F.lit("INSERT"))
        .when(F.col("_n").isNull(), F.lit("DELETE"))
        .when(changed, F.lit("UPDATE"))
    )
    owner, name = (lcr.canonical_identifier(p) for p in table.split(".", 1))
    key_json = F.to_json(
        F.struct(*[F.coalesce(F.col(f"n_{k}"), F.col(f"o_{k}")).alias(k) for k in key])
    )
    lcrs = joined.withColumn("command_type", command).where(F.col("command_type").isNotNull())
    old_map = values.row_map(prev.schema, "o_")
    new_map = values.row_map(cur.schema, "n_")
    fields: dict[str, Column] = {
        "kind": F.lit("ROW"),
        "origin": F.lit("CAPTURED"),
        "source_database_name": F.lit(database.upper()),
        "command_type": F.col("command_type"),
        "object_owner": F.lit(owner),
        "object_name": F.lit(name),
        "transaction_id": F.lit(transaction_id),
        "commit_scn": F.lit(commit_scn).cast("bigint"),
        "commit_time": F.lit(commit_time).cast("timestamp"),
        "position": F.monotonically_increasing_id(),
        "key_columns": F.array(*[F.lit(lcr.canonical_identifier(k)) for k in key]),
        "old_values": F.when(F.col("command_type") != "INSERT", old_map),
        "new_values": F.when(F.col("command_type") != "DELETE", new_map),
        "msg_id": F.substring(
            F.sha2(
                F.concat_ws("\x1f", F.lit(database.upper()), F.lit(transaction_id),
                            F.lit(f"{owner}.{name}"), key_json),
                256,
            ),
            1,
            32,
        ),
    }
    return lcrs.select(*[_field(f, fields) for f in lcr.LCR_FIELDS])


def _field(spec: tuple[str, str, bool], given: dict[str, Column]) -> Column:
    from pyspark.sql import functions as F

    name, ddl, _ = spec
    if name == "schema_version":
        return F.lit(lcr.SCHEMA_VERSION).alias(name)
    expr = given.get(name, F.lit(None))
    return expr.cast(lcr.spark_type(ddl)).alias(name)


def _progress(rt: SiteRuntime, capture: str, table: str) -> int:
    t = schema.capture_progress
    with rt.store.read() as c:
        value = c.execute(
            select(t.c.position).where(t.c.capture == capture, t.c.source_object == table)
        ).scalar_one_or_none()
    return int(value) if value is not None else 0


def _record(conn: object, capture: str, tables: list[str], n: int, scn: int) -> None:
    t = schema.capture_progress
    for table in tables:
        key = (t.c.capture == capture) & (t.c.source_object == table)
        row = conn.execute(select(t.c.position).where(key)).first()  # type: ignore[attr-defined]
        vals = {"position": str(n), "commit_scn": scn, "updated_at": utcnow()}
        if row is None:
            conn.execute(t.insert().values(capture=capture, source_object=table, **vals))  # type: ignore[attr-defined]
        elif int(row[0]) < n:
            conn.execute(t.update().where(key).values(**vals))  # type: ignore[attr-defined]


def capture_snapshot(
    spark: SparkSession,
    cfg: PipelineConfig | Pipeline,
    spec: CaptureSpec,
    n: int,
    rule_filter: object | None = None,
    lease: Lease | None = None,
) -> int:
    """Capture snapshot ``n`` of every table as one transaction. Returns messages enqueued.

    Raises:
        QualityError: the batch failed a blocking check; it was committed set aside
            and the capture's position moved past it.
    """
    from functools import reduce

    pipe = resolve(cfg)
    rt, queue = pipe.queue(spec.queue).site, pipe.queue(spec.queue).name
    src = snapshot_source(spec)
    dedup = f"capture:{spec.name}:snap={n}"
    if rt.catalog.find_dedup(queue, dedup) is not None:
        log.info("capture %s: snapshot %s was captured before; skipping", spec.name, n)
        return 0
    tables = [t for t in src.tables if n in list_snapshots(spark, src, t.name)]
    scn = rt.store.next_counter(f"scn:{src.database.upper()}")
    commit_time = utcnow()
    txn = f"{spec.name}.{n}"
    parts = []
    for t in tables:
        prev_n = max((s for s in list_snapshots(spark, src, t.name) if s < n), default=None)
        prev = read_snapshot(spark, src, t, prev_n) if prev_n is not None else None
        cur = read_snapshot(spark, src, t, n)
        parts.append(
            diff_snapshots(prev, cur, t.key, table=t.name, database=src.database,
                           transaction_id=txn, commit_scn=scn, commit_time=commit_time)
        )
    if not parts:
        return 0
    lcrs = reduce(lambda a, b: a.unionByName(b), parts)
    if rule_filter is not None:
        lcrs = rule_filter(lcrs)  # type: ignore[operator]
    batch = qio.write_batch(spark, rt.catalog, queue, lcrs, producer=f"capture:{spec.name}",
                            dedup_key=dedup, warm_quality=pipe.cfg.quality.enabled)
    report = quality.check_batch(spark, pipe, stage=f"capture:{spec.name}", batch=batch,
                                 queue=spec.queue)
    return commit_capture(spark, rt, queue, batch, report, lease, lambda conn: _record(
        conn, spec.name, [t.name for t in tables], n, scn))


def run_capture(
    spark: SparkSession, cfg: PipelineConfig | Pipeline, name: str,
    rule_filter: object | None = None,
    *, lease_wait: float = 0.0,
) -> CaptureResult:
    """Capture every snapshot not captured yet, oldest first, holding the capture's lease.

    Raises:
        LeaseHeldError: another run of this capture is active (transient).
    """
    pipe = resolve(cfg).open()
    spec: CaptureSpec = pipe.cfg.component("capture", name)
    rt = pipe.queue(spec.queue).site
    result = CaptureResult(name)
    with Lease(rt.store, f"capture:{name}", wait=lease_wait) as lease:
        todo: set[int] = set()
        src = snapshot_source(spec)
        for t in src.tables:
            done = _progress(rt, name, t.name)
            todo.update(s for s in list_snapshots(spark, src, t.name) if s > done)
        for n in sorted(todo):
            count = capture_snapshot(spark, pipe, spec, n, rule_filter, lease)
            result.snapshots.append(n)
            result.messages += count
            log.info("capture %s: snapshot %s -> %s messages", name, n, count)
    return result
