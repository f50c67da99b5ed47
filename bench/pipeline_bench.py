"""Benchmarks of the core pipeline (issue 2).

* ``pipeline.propagate``: propagation throughput as a ratio to a raw
  ``spark.read.parquet(...).write.parquet(...)`` copy of the same batch, same run.
  Target ≥ 0.7.
* ``pipeline.apply``: applying C changes into a T-row Parquet target, as a ratio to a
  full rewrite of that target, same run. Target ≤ 0.2 (full size: 100,000 changes into
  10,000,000 rows).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PIPELINE = """
version: 1
sites:
  s1: {{staging_root: s1/staging, target_root: s1/targets, state_url: "sqlite:///s1/state.db", database: DBS1.EXAMPLE.COM}}
  s2: {{staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db", database: DBS2.EXAMPLE.COM}}
queues:
  - {{name: bench.src, site: s1}}
  - {{name: bench.dst, site: s2}}
  - {{name: bench.dst0, site: s2}}
  - {{name: bench.dst1, site: s2}}
propagations:
  - {{name: p0, source_queue: bench.src@s1, destination_queue: bench.dst0@s2}}
  - {{name: p1, source_queue: bench.src@s1, destination_queue: bench.dst1@s2}}
applies:
  - {{name: a, queue: bench.dst@s2, buckets: {buckets}}}
quality: {{enabled: false}}
"""


def _config(root: Path, buckets: int) -> Any:
    from changeflow.config import load_config

    (root / "pipeline.yaml").write_text(PIPELINE.format(buckets=buckets))
    return load_config(root / "pipeline.yaml")


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def propagate(spark: SparkSession, n_rows: int, repeats: int = 2) -> dict:  # noqa: D417
    """Propagation vs raw Parquet copy of the same batch."""
    from bench.quality_bench import generate
    from changeflow.propagation import propagate_once
    from changeflow.queues import io as qio
    from changeflow.sites import open_pipeline, queue_site

    raw, prop = [], []
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        root = Path(tmp)
        cfg = _config(root, 16)
        open_pipeline(cfg)
        rt, src = queue_site(cfg, "bench.src@s1")
        qio.enqueue(spark, rt.catalog, src, generate(spark, n_rows), producer="bench")
        path = rt.catalog.pending(src, "propagation:p0")[0].path
        for i in range(repeats):  # each propagation is its own consumer of the same batch
            raw.append(_timed(lambda i=i: spark.read.parquet(path).write.parquet(
                str(root / f"copy{i}")))[0])
            seconds, res = _timed(lambda i=i: propagate_once(spark, cfg, f"p{i}"))
            assert res.messages_propagated == n_rows, res
            prop.append(seconds)
    best_raw, best_prop = min(raw), min(prop)
    return {
        "name": "pipeline.propagate",
        "figures": {"rows": n_rows, "propagate_seconds": round(best_prop, 3),
                    "raw_copy_seconds": round(best_raw, 3),
                    "propagate_rows_per_s": round(n_rows / best_prop),
                    "propagate_runs": [round(x, 3) for x in prop],
                    "raw_copy_runs": [round(x, 3) for x in raw]},
        "baseline": "spark.read.parquet(batch).write.parquet(copy) of the same batch, same run",
        "ratio": round(best_raw / best_prop, 3),
        "target": ">= 0.7 (throughput ratio)",
    }


# The apply target has the shape of hr.employees (12 columns of the seed's HR schema).
TARGET_COLUMNS = [
    ("id", "INTEGER"), ("first_name", "VARCHAR2"), ("last_name", "VARCHAR2"),
    ("email", "VARCHAR2"), ("phone_number", "VARCHAR2"), ("hire_date", "DATE"),
    ("job_id", "VARCHAR2"), ("salary", "NUMBER"), ("commission_pct", "NUMBER"),
    ("manager_id", "INTEGER"), ("department_id", "INTEGER"),
    ("updated", "TIMESTAMP WITH TIME ZONE"),
]


def _employees(ids: Any, tag: str) -> list[Any]:
    """Columns of an hr.employees-like row computed from an id column."""
    from pyspark.sql import functions as F

    sid = ids.cast("string")
    return [
        ids.alias("id"),
        F.concat(F.lit(f"{tag}first-"), sid).alias("first_name"),
        F.concat(F.lit("last-"), sid).alias("last_name"),
        F.concat(F.lit("E"), sid, F.lit("@example.com")).alias("email"),
        F.concat(F.lit("515.123."), (ids % 10000).cast("string")).alias("phone_number"),
        F.date_add(F.lit("2000-01-01").cast("date"), (ids % 9000).cast("int")).alias("hire_date"),
        F.concat(F.lit("JOB_"), (ids % 19).cast("string")).alias("job_id"),
        (ids % 100000 / 100).cast("decimal(38,10)").alias("salary"),
        ((ids % 40) / 100).cast("decimal(38,10)").alias("commission_pct"),
        (ids % 1000).alias("manager_id"),
        (ids % 27 * 10).alias("department_id"),
        (F.lit(1_700_000_000) + ids).cast("timestamp").alias("updated"),
    ]


def _target_rows(spark: SparkSession, n: int) -> DataFrame:
    from pyspark.sql import functions as F

    ids = spark.range(0, n, 1, max(2, n // 1_000_000))
    return ids.select(
        *_employees(F.col("id"), ""),
        F.lit(0).cast("bigint").alias("_cf_scn"), F.col("id").alias("_cf_pos"),
        F.lit(False).alias("_cf_deleted"),
    )


def _changes(spark: SparkSession, n_rows: int, n_changes: int) -> DataFrame:
    """UPDATE row LCRs for ``n_changes`` keys spread over the whole table."""
    import datetime as dt

    from pyspark.sql import functions as F

    from changeflow import lcr, values

    step = max(1, n_rows // n_changes)
    rows = spark.range(0, n_changes).select(*_employees(F.col("id") * step, "changed-"))
    given = {
        "schema_version": F.lit(lcr.SCHEMA_VERSION),
        "msg_id": F.substring(F.sha2(F.col("id").cast("string"), 256), 1, 32),
        "kind": F.lit("ROW"), "origin": F.lit("CAPTURED"),
        "source_database_name": F.lit("DBS1.EXAMPLE.COM"), "command_type": F.lit("UPDATE"),
        "object_owner": F.lit("BENCH"), "object_name": F.lit("BIG"),
        "transaction_id": F.lit("tx1"), "commit_scn": F.lit(1),
        "commit_time": F.lit(dt.datetime(2025, 1, 1, tzinfo=dt.UTC)), "position": F.col("id"),
        "key_columns": F.array(F.lit("ID")),
        "new_values": values.row_map(rows.schema),
    }
    return rows.select(*[given.get(n, F.lit(None)).cast(lcr.spark_type(t)).alias(n)
                         for n, t, _ in lcr.LCR_FIELDS])


def apply(spark: SparkSession, n_rows: int, n_changes: int) -> dict:
    """Apply of ``n_changes`` into an ``n_rows`` target vs a full rewrite of the target."""
    from changeflow.apply.engine import apply_once, target_catalog
    from changeflow.apply.target import TargetTable, read_table, write_files
    from changeflow.queues import io as qio
    from changeflow.sites import open_pipeline, queue_site

    buckets = 16  # the default of an apply
    with tempfile.TemporaryDirectory(prefix="apply-bench-") as tmp:
        root = Path(tmp)
        cfg = _config(root, buckets)
        open_pipeline(cfg)
        catalog = target_catalog(cfg, cfg.applies[0])
        table = TargetTable("bench.big", f"{root}/s2/targets/bench.big", ["id"],
                            TARGET_COLUMNS, buckets, 0)
        files, _ = write_files(spark, table, _target_rows(spark, n_rows), "base",
                               uuid.uuid4().hex[:8])
        with catalog.store.begin() as conn:
            catalog.commit(conn, table, files)
        rt, dst = queue_site(cfg, "bench.dst@s2")
        qio.enqueue(spark, rt.catalog, dst, _changes(spark, n_rows, n_changes), producer="bench")
        paths = [f.path for f in catalog.files("bench.big")]
        rewrite, _ = _timed(lambda: spark.read.parquet(*paths).write.parquet(str(root / "rw")))
        applied, res = _timed(lambda: apply_once(spark, cfg, "a"))
        assert res.tables == {"bench.big": n_changes}, res
        changed = read_table(spark, catalog, "bench.big").where("first_name like 'changed-%'").count()
        assert changed == n_changes, changed
    return {
        "name": "pipeline.apply",
        "figures": {"target_rows": n_rows, "changes": n_changes, "buckets": buckets,
                    "target_columns": len(TARGET_COLUMNS),
                    "apply_seconds": round(applied, 3),
                    "full_rewrite_seconds": round(rewrite, 3)},
        "baseline": "full rewrite of the target table (read all files, write them), same run",
        "ratio": round(applied / rewrite, 3),
        "target": "<= 0.2 (time ratio)",
    }


def run(spark: SparkSession, n_rows: int) -> list[dict]:
    """Both pipeline benchmarks; the apply target has ``2 * n_rows`` rows."""
    return [propagate(spark, n_rows),
            apply(spark, 2 * n_rows, max(1000, n_rows // 50))]
