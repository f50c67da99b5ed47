"""The apply benchmark's peers: Iceberg's own MERGE INTO, delta-rs MERGE, reads (Spark,
DuckDB over PyIceberg's Arrow), and a full maintenance of the target."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

PEER = "bench.peer"


class CandidateFailed(RuntimeError):
    """The candidate's run between a peer's runs failed: the benchmark stops."""


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def merge_into(spark: SparkSession, targets: Any, root: Path, n_rows: int,
               n_changes: int, between: Callable[[int], Any] | None = None
               ) -> dict[str, Any]:
    """Iceberg's ``MERGE INTO`` of ``n_changes`` row images into a table of the same rows
    and properties (merge-on-read), four times (cold, then three warm: their median);
    row images read from Parquet. ``between(run)``, when given, runs before each
    ``MERGE INTO`` (the candidate's runs interleaved with the peer's: the same JVM, as
    warm, on both sides)."""
    from pyspark.sql import functions as F

    from bench.apply_bench import changed_ids, employees, make_table

    try:
        load = make_table(spark, targets, PEER, n_rows)
        runs = []
        for run in (1, 2, 3, 4):
            path = str(root / f"merge-src-{run}")
            changed_ids(spark, n_rows, n_changes, run).select(
                *employees(F.col("id"), f"m{run}-"), F.lit("DBS1.EXAMPLE.COM").alias("_cf_src"),
                F.lit(1000 + run).cast("bigint").alias("_cf_scn"), F.col("id").alias("_cf_pos"),
                F.lit(None).cast("binary").alias("_cf_tag")).write.parquet(path)
            sql = (f"MERGE INTO {targets.ident(PEER)} t USING (SELECT * FROM parquet.`{path}`) s "
                   "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
                   "WHEN NOT MATCHED THEN INSERT *")
            if between is not None:
                try:
                    between(run)
                except Exception as exc:  # the candidate's failure is not the peer's
                    raise CandidateFailed(f"between MERGE INTO runs: {exc}") from exc
            runs.append(_timed(lambda sql=sql: spark.sql(sql).collect())[0])
        jt = targets.java_table(spark, PEER)
        summary = dict(jt.currentSnapshot().summary())
        updated = int(summary.get("spark.merge-into.num-target-rows-matched-updated", -1))
        if updated != n_changes or int(summary.get("added-position-delete-files", 0)) == 0:
            return {"skipped": f"MERGE INTO did not update {n_changes} rows merge-on-read "
                               f"(updated {updated}; snapshot summary {summary})"[:500]}
        try:
            cdc = [_cdc_merge(spark, targets, root, n_rows, n_changes, run)
                   for run in (5, 6, 7)]
        except Exception as exc:  # noqa: BLE001  (this peer is reported: its reason is kept)
            cdc = [None]
            failed = f"{type(exc).__name__}: {exc}"[:300]
        else:
            failed = None
        spark.sql(f"DROP TABLE IF EXISTS {targets.ident(PEER)} PURGE")
    except CandidateFailed:
        raise
    except Exception as exc:  # noqa: BLE001  (a failed peer is a miss with its reason)
        return {"skipped": f"MERGE INTO failed: {type(exc).__name__}: {exc}"[:500]}
    return {"seconds": statistics.median(runs[1:]), "cold_seconds": round(runs[0], 3),
            "runs": [round(x, 3) for x in runs], "load_seconds": round(load, 2),
            "mode": "merge-on-read", "cdc_failed": failed,
            "cdc_seconds": statistics.median(cdc[1:]) if cdc[1:] else None,
            "cdc_runs": [round(x, 3) for x in cdc if x is not None]}


def _cdc_merge(spark: SparkSession, targets: Any, root: Path, n_rows: int, n_changes: int,
               run: int) -> float:
    """The ``MERGE INTO`` a user of plain Iceberg writes for change rows (flattened, as
    Debezium's ExtractNewRecordState gives them: an operation, the row, its commit
    position): the newest change per key, then delete, update or insert. Its seconds."""
    from pyspark.sql import functions as F

    from bench.apply_bench import TARGET_COLUMNS, changed_ids, employees

    path = str(root / f"cdc-src-{run}")
    changed_ids(spark, n_rows, n_changes, run).select(
        F.lit("u").alias("op"), *employees(F.col("id"), f"c{run}-"),
        F.lit(1000 + run).cast("bigint").alias("commit_scn"), F.col("id").alias("pos")) \
        .write.parquet(path)
    cols = [c for c, _ in TARGET_COLUMNS]
    sets = ", ".join(f"{c} = s.{c}" for c in cols if c != "id")
    sql = (f"MERGE INTO {targets.ident(PEER)} t USING (SELECT * FROM (SELECT *, row_number() "
           "OVER (PARTITION BY id ORDER BY commit_scn DESC, pos DESC) AS rn FROM "
           f"parquet.`{path}`) WHERE rn = 1) s ON t.id = s.id "
           "WHEN MATCHED AND s.op = 'd' THEN DELETE "
           f"WHEN MATCHED THEN UPDATE SET {sets}, _cf_scn = s.commit_scn, _cf_pos = s.pos "
           f"WHEN NOT MATCHED AND s.op <> 'd' THEN INSERT ({', '.join(cols)}, _cf_scn, _cf_pos) "
           f"VALUES ({', '.join('s.' + c for c in cols)}, s.commit_scn, s.pos)")
    seconds = _timed(lambda: spark.sql(sql).collect())[0]
    summary = dict(targets.java_table(spark, PEER).currentSnapshot().summary())
    updated = int(summary.get("spark.merge-into.num-target-rows-matched-updated", -1))
    if updated != n_changes:
        raise RuntimeError(f"the CDC MERGE updated {updated} rows, not {n_changes}")
    return seconds


def _batches(df: DataFrame, n: int) -> Any:
    """A large frame as Arrow tables of at most 2 million rows (bounded memory)."""
    import pyarrow as pa

    step = 2_000_000
    for lo in range(0, n, step):
        yield pa.Table.from_batches(df.where(f"id >= {lo} AND id < {lo + step}").toArrow()
                                    .to_batches())


def deltalake(spark: SparkSession, root: Path, n_rows: int, n_changes: int) -> dict[str, Any]:
    """delta-rs: the same rows as a Delta table, then a MERGE of as many rows, twice."""
    try:
        import deltalake as dl
        import pyarrow as pa
        from pyspark.sql import functions as F

        from bench.apply_bench import changed_ids, employees, target_rows
    except ImportError as exc:
        return {"skipped": f"deltalake is not installed: {exc}"}
    path = str(root / "delta")
    table = target_rows(spark, n_rows).drop("_cf_src", "_cf_scn", "_cf_pos", "_cf_tag")
    load, _ = _timed(lambda: [dl.write_deltalake(path, b, mode="append")
                              for b in _batches(table, n_rows)])
    runs = []
    for run in (1, 2):
        src = changed_ids(spark, n_rows, n_changes, 50 + run).select(
            *employees(F.col("id"), f"d{run}-"))
        data = pa.Table.from_batches(src.toArrow().to_batches())

        def merge(data: Any = data) -> Any:
            t = dl.DeltaTable(path)
            return (t.merge(data, predicate="t.id = s.id", source_alias="s", target_alias="t")
                    .when_matched_update_all().when_not_matched_insert_all().execute())

        seconds, stats = _timed(merge)
        if stats["num_target_rows_updated"] != n_changes:
            return {"skipped": f"delta-rs MERGE updated {stats}"}
        runs.append(seconds)
    return {"seconds": statistics.median(runs[1:]), "cold_seconds": round(runs[0], 3),
            "runs": [round(x, 3) for x in runs], "load_seconds": round(load, 2),
            "version": dl.__version__}


def reads(spark: SparkSession, targets: Any, table: str, *, maintained: bool,
          state: str = "after 10 applies", snapshot: int | None = None) -> dict[str, Any]:
    """A full scan of the table by Spark (best of two) and by DuckDB's Iceberg reader
    (PyIceberg's Arrow scan beside it), with the table's file counts: its current state, or ``snapshot``'s (time
    travel)."""
    jt = targets.java_table(spark, table)
    snap = jt.currentSnapshot() if snapshot is None else jt.snapshot(snapshot)
    summary = dict(snap.summary())
    when = "" if snapshot is None else f" VERSION AS OF {snapshot}"
    sql = f"SELECT count(*), sum(salary), max(first_name) FROM {targets.ident(table)}{when}"
    spark_runs = [_timed(lambda: spark.sql(sql).collect())[0] for _ in range(2)]
    out: dict[str, Any] = {
        "state": "after maintenance" if maintained else state,
        "spark_seconds": min(spark_runs), "spark_runs": [round(x, 3) for x in spark_runs],
        "data_files": int(summary.get("total-data-files", 0)),
        "delete_files": int(summary.get("total-delete-files", 0)),
        "position_deletes": int(summary.get("total-position-deletes", 0))}
    if snapshot is not None:
        out["snapshot"] = snapshot
    out.update(_duckdb(targets, table, snapshot))
    return out


def most_deleted(spark: SparkSession, targets: Any, table: str) -> tuple[int, int]:
    """The snapshot of the table's history with the most position deletes (where
    merge-on-read's read cost is largest: the last before a rewrite of deleted rows),
    and how many applies (snapshots with a pass id) it holds."""
    from changeflow.targets.tables import ancestors

    jt = targets.java_table(spark, table)
    chain = list(ancestors(spark, jt, jt.currentSnapshot().snapshotId()))[::-1]
    counts = [int(s.summary().get("total-position-deletes") or 0) for s in chain]
    at = max(range(len(chain)), key=lambda i: (counts[i], i))
    applies = sum(1 for s in chain[: at + 1] if s.summary().get("changeflow.pass-id"))
    return int(chain[at].snapshotId()), applies


def _duckdb(targets: Any, table: str, snapshot: int | None = None) -> dict[str, Any]:
    """DuckDB's own Iceberg reader (``iceberg_scan`` of the table's metadata file, delete
    files applied; best of two), and PyIceberg's Arrow scan of the same columns beside
    it (the reader of a Python user without DuckDB)."""
    try:
        import duckdb
    except ImportError as exc:
        return {"duckdb_skipped": f"duckdb is not installed: {exc}"}
    from changeflow.targets.read import duckdb_connection, duckdb_scan, pyiceberg_catalog

    def scan() -> Any:
        t = pyiceberg_catalog(targets).load_table(table)
        return t.scan(selected_fields=("id", "salary", "first_name"),
                      snapshot_id=snapshot).to_arrow()

    try:
        con = duckdb_connection()
        sql = ("SELECT count(*), sum(salary), max(first_name) FROM "
               f"{duckdb_scan(targets, table, snapshot=snapshot)}")
        runs = [_timed(lambda: con.execute(sql).fetchone()) for _ in range(2)]
        con.close()
        read, arrow = _timed(scan)
    except Exception as exc:  # noqa: BLE001
        return {"duckdb_skipped": f"{type(exc).__name__}: {exc}"[:300]}
    row = runs[-1][1]
    return {"duckdb_seconds": min(t for t, _ in runs),
            "duckdb_runs": [round(t, 3) for t, _ in runs],
            "duckdb_rows": row[0] if row else None, "duckdb_version": duckdb.__version__,
            "pyiceberg_scan_seconds": round(read, 3), "pyiceberg_rows": arrow.num_rows}


def maintain_fully(spark: SparkSession, targets: Any, table: str) -> dict[str, Any]:
    """Iceberg's maintenance of the table as the apply runs it, due whatever the counts."""
    from changeflow.targets.maintenance import maintain
    from changeflow.targets.policy import MaintenancePolicy

    return maintain(spark, targets, table, MaintenancePolicy(delete_ratio=1e-9,
                                                             files_per_bucket=1))


APPLY_JOB = """
import time
t = time.perf_counter()
from pathlib import Path
from changeflow.apply.engine import apply_once
from changeflow.clients import rule_filter
from changeflow.config import load_config
from changeflow.spark import get_session
spark = get_session("bench-one-shot-apply")
cfg = load_config(Path({root!r}) / "pipeline.yaml")
res = apply_once(spark, cfg, "a", rule_filter=rule_filter(cfg, "apply", "a"))
assert res.tables == {{{table!r}: {n}}} and not res.errors, res
print(time.perf_counter() - t)
"""
MERGE_JOB = """
import time
t = time.perf_counter()
from pathlib import Path
from changeflow.apply.engine import targets_of
from changeflow.config import load_config
from changeflow.spark import get_session
spark = get_session("bench-one-shot-merge")
cfg = load_config(Path({root!r}) / "pipeline.yaml")
targets = targets_of(cfg, cfg.applies[0])
targets.register(spark)
spark.sql(f"MERGE INTO {{targets.ident({table!r})}} t USING (SELECT * FROM "
          "parquet.`{path}`) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
          "WHEN NOT MATCHED THEN INSERT *").collect()
print(time.perf_counter() - t)
"""


def one_shot(spark: SparkSession, cfg: Any, root: Path, table: str, n_rows: int,
             n_changes: int, first_run: int) -> dict[str, Any]:
    """What a scheduled job pays: a fresh Python process that imports changeflow, starts
    a Spark session and applies one queued batch (as the DAG's spark-submit task does),
    against a fresh process that starts a session and runs Iceberg's ``MERGE INTO`` of
    as many row images into the same table; alternating, two of each (their medians).
    The batches are enqueued and the images written by this (warm) process beforehand;
    each run changes keys of its own (no conflicts between them)."""
    from pyspark.sql import functions as F

    from bench import startup
    from bench.apply_bench import changed_ids, changes, employees
    from changeflow.queues import io as qio
    from changeflow.sites import queue_site

    rt, q = queue_site(cfg, cfg.component("apply", "a").queue)
    applies: list[float] = []
    merges: list[float] = []
    try:
        for i in range(2):
            run = first_run + 2 * i
            qio.enqueue(spark, rt.catalog, q, changes(spark, n_rows, n_changes, run),
                        producer="bench")
            applies.append(startup._child(APPLY_JOB.format(  # noqa: SLF001
                root=str(root), table=table, n=n_changes)))
            path = str(root / f"one-shot-src-{run + 1}")
            changed_ids(spark, n_rows, n_changes, run + 1).select(
                *employees(F.col("id"), f"o{run + 1}-"),
                F.lit("DBS1.EXAMPLE.COM").alias("_cf_src"),
                F.lit(1000 + run + 1).cast("bigint").alias("_cf_scn"),
                F.col("id").alias("_cf_pos"), F.lit(None).cast("binary").alias("_cf_tag")) \
                .write.parquet(path)
            merges.append(startup._child(MERGE_JOB.format(  # noqa: SLF001
                root=str(root), table=table, path=path)))
    except Exception as exc:  # noqa: BLE001  (a failed measurement is reported with its reason)
        return {"skipped": f"one-shot jobs failed: {type(exc).__name__}: {exc}"[:500]}
    return {"seconds": statistics.median(applies), "merge_seconds": statistics.median(merges),
            "apply_runs": [round(x, 3) for x in applies],
            "merge_runs": [round(x, 3) for x in merges]}

