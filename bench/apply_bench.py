"""Benchmarks of the apply process (issue 13), every figure a ratio measured in one run.

The target has the shape of hr.employees (12 columns) and ``2 * rows`` rows (full size:
10 million); each apply brings ``rows / 50`` UPDATE LCRs (full size: 100,000) spread
over the whole table, carrying the key and the old value of the changed column (what
Oracle's LCRs carry without extra supplemental logging), with the default
configuration: quality checks on, rules on (a positive rule set per apply), conflict
detection on.

* ``apply.changes``: one apply, as a ratio to a full rewrite of the target (read every
  file, write it again) in the same run. Target <= 0.2. The first (cold) apply's own
  ratio is reported as a figure too.
* ``apply.repeated``: the mean of 10 consecutive applies (compactions included) over
  the rewrite. Target <= 0.25.
* ``apply.conflict_detection``: the same applies with detection on over detection off
  (medians of five each, interleaved). Target <= 1.3.
* ``apply.spark_pass``: the same apply with every pass in Spark (the driver pass needs
  a ``local`` master; a cluster deployment runs this path), the second of two, over the
  rewrite. Reported.
* ``apply.deltalake``: a ``MERGE`` of the same changes into a Delta table of the same
  rows with delta-rs (``deltalake``), over the same rewrite.
* ``apply.postgres``: ``INSERT ... ON CONFLICT DO UPDATE`` of the same changes into a
  PostgreSQL table of the same rows (a throwaway local cluster), over the same rewrite.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PIPELINE = """
version: 1
rules: rules.yaml
sites:
  s2: {{staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db", database: DBS2.EXAMPLE.COM}}
queues:
  - {{name: bench.dst, site: s2}}
  - {{name: bench.off, site: s2}}
  - {{name: bench.warm, site: s2}}
applies:
  - {{name: a, queue: bench.dst@s2, buckets: {buckets}}}
  - {{name: nodetect, queue: bench.off@s2, buckets: {buckets}, conflicts: {{detect: false}}}}
  - {{name: warm, queue: bench.warm@s2, buckets: {buckets}}}
"""

# The default configuration has rules on: every apply takes the source's untagged BENCH
# changes (as the demo's apply clients take HR's).
RULES = """
rules:
  BENCH_DML:
    condition: ((:dml.get_object_owner() = 'BENCH') and :dml.is_null_tag() = 'Y'
                and :dml.get_source_database_name() = 'DBS1.EXAMPLE.COM')
    rule_type: SCHEMA
rule_sets:
  FROM_DBS1: {rules: [BENCH_DML]}
clients:
  a: {type: apply, queue: bench.dst, positive_rule_set: FROM_DBS1}
  nodetect: {type: apply, queue: bench.off, positive_rule_set: FROM_DBS1}
  warm: {type: apply, queue: bench.warm, positive_rule_set: FROM_DBS1}
"""

# The apply target has the shape of hr.employees (12 columns of the seed's HR schema).
TARGET_COLUMNS = [
    ("id", "INTEGER"), ("first_name", "VARCHAR2"), ("last_name", "VARCHAR2"),
    ("email", "VARCHAR2"), ("phone_number", "VARCHAR2"), ("hire_date", "DATE"),
    ("job_id", "VARCHAR2"), ("salary", "NUMBER"), ("commission_pct", "NUMBER"),
    ("manager_id", "INTEGER"), ("department_id", "INTEGER"),
    ("updated", "TIMESTAMP WITH TIME ZONE"),
]


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


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
        *_employees(F.col("id"), ""), F.lit(0).cast("bigint").alias("_cf_seq"),
        F.lit(0).cast("bigint").alias("_cf_scn"), F.col("id").alias("_cf_pos"),
        F.lit(False).alias("_cf_deleted"), F.lit("DBS1.EXAMPLE.COM").alias("_cf_src"))


def _changed_ids(spark: SparkSession, n_rows: int, n_changes: int, run: int) -> DataFrame:
    from pyspark.sql import functions as F

    step = max(1, n_rows // n_changes)
    return spark.range(0, n_changes).select(((F.col("id") * step + run) % n_rows).alias("id"))


def _changes(spark: SparkSession, n_rows: int, n_changes: int, run: int) -> DataFrame:
    """UPDATE row LCRs for ``n_changes`` keys spread over the whole table."""
    import datetime as dt

    from pyspark.sql import functions as F

    from changeflow import lcr, values

    ids = _changed_ids(spark, n_rows, n_changes, run)
    rows = ids.select(*_employees(F.col("id"), f"r{run}-"),
                      F.concat(F.lit("first-"), F.col("id").cast("string")).alias("old_first"))
    new = rows.drop("old_first")
    old = rows.select(F.col("id"), F.col("old_first").alias("first_name"))
    given = {
        "schema_version": F.lit(lcr.SCHEMA_VERSION),
        "msg_id": F.substring(F.sha2(F.concat_ws(":", F.lit(run), F.col("id")), 256), 1, 32),
        "kind": F.lit("ROW"), "origin": F.lit("CAPTURED"),
        "source_database_name": F.lit("DBS1.EXAMPLE.COM"), "command_type": F.lit("UPDATE"),
        "object_owner": F.lit("BENCH"), "object_name": F.lit("BIG"),
        "transaction_id": F.lit(f"tx{run}"), "commit_scn": F.lit(1000 + run),
        "commit_time": F.lit(dt.datetime(2025, 1, 1, tzinfo=dt.UTC)), "position": F.col("id"),
        "key_columns": F.array(F.lit("ID")),
        "new_values": values.row_map(new.schema),
        "old_values": values.row_map(old.schema, prefix="_old_"),
    }
    frame = rows.select("*", *[F.col(c).alias(f"_old_{c}") for c in ("id",)],
                        F.col("old_first").alias("_old_first_name"))
    return frame.select(*[given.get(n, F.lit(None)).cast(lcr.spark_type(t)).alias(n)
                          for n, t, _ in lcr.LCR_FIELDS])


def _setup(spark: SparkSession, root: Path, n_rows: int) -> tuple[Any, Any, list[str]]:
    from changeflow.apply.engine import target_catalog
    from changeflow.apply.target import TargetTable, write_files
    from changeflow.config import load_config
    from changeflow.sites import open_pipeline

    (root / "pipeline.yaml").write_text(PIPELINE.format(buckets=16))
    (root / "rules.yaml").write_text(RULES)
    cfg = load_config(root / "pipeline.yaml")
    open_pipeline(cfg)
    catalog = target_catalog(cfg, cfg.applies[0])
    table = TargetTable("bench.big", f"{root}/s2/targets/bench.big", ["id"], TARGET_COLUMNS,
                        16, 0)
    files, n = write_files(spark, table, _target_rows(spark, n_rows), "base",
                           uuid.uuid4().hex[:8])
    with catalog.store.begin() as conn:
        catalog.commit(conn, table, files, rows=n)
    return cfg, catalog, [f.path for f in files]


def _enqueue(spark: SparkSession, cfg: Any, queue: str, df: DataFrame) -> None:
    from changeflow.queues import io as qio
    from changeflow.sites import queue_site

    rt, q = queue_site(cfg, queue)
    qio.enqueue(spark, rt.catalog, q, df, producer="bench")


# Per apply: seconds per step of the pass (summed) and Spark jobs started, for the figures.
PROFILE: list[dict[str, Any]] = []


def _last_job(spark: SparkSession) -> int:
    ids = spark.sparkContext.statusTracker().getJobIdsForGroup()
    return max(ids, default=-1)


def _apply(spark: SparkSession, cfg: Any, name: str, queue: str, df: DataFrame,
           n_changes: int) -> float:
    from changeflow.apply.engine import apply_once
    from changeflow.clients import rule_filter

    _enqueue(spark, cfg, queue, df)
    rules = rule_filter(cfg, "apply", name)
    assert rules is not None
    before = _last_job(spark)
    seconds, res = _timed(lambda: apply_once(spark, cfg, name, rule_filter=rules))
    assert res.tables == {"bench.big": n_changes} and res.errors == 0, res
    PROFILE.append({"apply": name, "seconds": round(seconds, 3),
                    "spark_jobs": _last_job(spark) - before,
                    "steps": {k: round(v, 3) for k, v in res.timings.items()}})
    return seconds


def run(spark: SparkSession, n_rows: int) -> list[dict]:
    """Every apply figure; the target has ``2 * n_rows`` rows."""
    from changeflow.apply.target import read_table

    rows, changes = 2 * n_rows, max(1000, n_rows // 50)
    PROFILE.clear()
    with tempfile.TemporaryDirectory(prefix="apply-bench-") as tmp:
        root = Path(tmp)
        cfg, catalog, paths = _setup(spark, root, rows)
        rewrite, _ = _timed(lambda: spark.read.parquet(*paths).write.parquet(str(root / "rw")))
        cold = _apply(spark, cfg, "a", "bench.dst@s2", _changes(spark, rows, changes, 1),
                      changes)
        one = _apply(spark, cfg, "a", "bench.dst@s2", _changes(spark, rows, changes, 2),
                     changes)
        repeated = [_apply(spark, cfg, "a", "bench.dst@s2", _changes(spark, rows, changes, r),
                           changes) for r in range(3, 13)]
        on, off = [], []
        for r in range(13, 23):  # five of each, interleaved
            if r % 2:
                on.append(_apply(spark, cfg, "a", "bench.dst@s2",
                                 _changes(spark, rows, changes, r), changes))
            else:
                off.append(_apply(spark, cfg, "nodetect", "bench.off@s2",
                                  _changes(spark, rows, changes, r), changes))
        changed = read_table(spark, catalog, "bench.big").where(
            "first_name like 'r22-%'").count()
        assert changed == changes, changed
        spark_pass = _spark_pass(spark, cfg, rows, changes)
        delta = _deltalake(spark, root, rows, changes)
    pg = _postgres(spark, rows, changes)
    return _results(rows, changes, rewrite, cold, one, repeated, on, off, delta, pg,
                    spark_pass)


def _spark_pass(spark: SparkSession, cfg: Any, rows: int, changes: int) -> list[float]:
    """Two applies with every pass in Spark (what a cluster deployment, whose executors
    hold the files, runs; the driver pass needs a ``local`` master)."""
    from changeflow.apply import driver_pass

    driver_pass.ENABLED = False
    try:
        return [_apply(spark, cfg, "a", "bench.dst@s2", _changes(spark, rows, changes, r),
                       changes) for r in (23, 24)]
    finally:
        driver_pass.ENABLED = True


def _results(rows: int, changes: int, rewrite: float, cold: float, one: float,
             repeated: list[float], on: list[float], off: list[float],
             delta: dict[str, float], pg: dict[str, float],
             spark_pass: list[float]) -> list[dict]:
    base = {"target_rows": rows, "changes": changes, "target_columns": len(TARGET_COLUMNS),
            "buckets": 16, "full_rewrite_seconds": round(rewrite, 3)}
    rewrite_base = "full rewrite of the target table (read all files, write them), same run"
    return [
        {"name": "apply.changes", "figures": {**base, "apply_seconds": round(one, 3),
                                             "cold_apply_seconds": round(cold, 3),
                                             "cold_ratio": round(cold / rewrite, 3),
                                             "profile": list(PROFILE)},
         "baseline": rewrite_base, "ratio": round(one / rewrite, 3),
         "target": "<= 0.2 (time ratio)"},
        {"name": "apply.repeated", "figures": {**base, "runs": [round(x, 3) for x in repeated]},
         "baseline": rewrite_base, "ratio": round(statistics.mean(repeated) / rewrite, 3),
         "target": "<= 0.25 (mean of 10 applies / rewrite)"},
        {"name": "apply.conflict_detection",
         "figures": {"on_seconds": [round(x, 3) for x in on],
                     "off_seconds": [round(x, 3) for x in off]},
         "baseline": "the same applies with conflict detection off, same run",
         "ratio": round(statistics.median(on) / statistics.median(off), 3),
         "target": "<= 1.3 (time ratio)"},
        {"name": "apply.spark_pass", "figures": {
            **base, "apply_seconds": [round(x, 3) for x in spark_pass]},
         "baseline": rewrite_base, "ratio": round(spark_pass[-1] / rewrite, 3),
         "target": "reported (the same apply with every pass in Spark: the path of a "
                   "cluster deployment)"},
        {"name": "apply.deltalake", "figures": {**base, **{k: round(v, 3)
                                                             for k, v in delta.items()}},
         "baseline": rewrite_base + " (Spark)",
         "ratio": round(delta["merge_seconds"] / rewrite, 3),
         "target": "reported (delta-rs MERGE of the same changes)"},
        {"name": "apply.postgres", "figures": {**base, **{k: round(v, 3) for k, v in pg.items()}},
         "baseline": rewrite_base + " (Spark)",
         "ratio": round(pg["upsert_seconds"] / rewrite, 3) if "upsert_seconds" in pg else None,
         "target": "reported (INSERT ... ON CONFLICT of the same changes)"},
    ]


def _deltalake(spark: SparkSession, root: Path, rows: int, changes: int) -> dict[str, float]:
    """delta-rs: write the same rows as a Delta table, then MERGE the changes."""
    import deltalake
    import pyarrow as pa

    path = str(root / "delta")
    table = _target_rows(spark, rows).drop("_cf_seq", "_cf_scn", "_cf_pos", "_cf_deleted",
                                          "_cf_src")
    written, _ = _timed(lambda: [deltalake.write_deltalake(path, b, mode="append")
                                 for b in _batches(table)])
    from pyspark.sql import functions as F

    src = _changed_ids(spark, rows, changes, 99).select(*_employees(F.col("id"), "d-"))
    data = pa.Table.from_batches(src.toArrow().to_batches())

    def merge() -> Any:
        dt = deltalake.DeltaTable(path)
        return (dt.merge(data, predicate="t.id = s.id", source_alias="s", target_alias="t")
                .when_matched_update_all().when_not_matched_insert_all().execute())

    seconds, stats = _timed(merge)
    assert stats["num_target_rows_updated"] == changes, stats
    return {"merge_seconds": seconds, "load_seconds": written}


def _batches(df: DataFrame) -> Any:
    """A large frame as Arrow tables of a few million rows (bounded memory)."""
    import pyarrow as pa

    reader = df.toArrow() if df.count() <= 2_000_000 else None
    if reader is not None:
        yield reader
        return
    n = df.count()
    step = 2_000_000
    for lo in range(0, n, step):
        yield pa.Table.from_batches(df.where(f"id >= {lo} AND id < {lo + step}").toArrow()
                                    .to_batches())


def _postgres(spark: SparkSession, rows: int, changes: int) -> dict[str, float]:
    """PostgreSQL: COPY the rows into a table, then upsert the changes from a COPY."""
    from changeflow.testing.pg_cluster import PG_BIN, PgCluster

    if not (PG_BIN / "initdb").exists():
        return {"skipped": 1.0}
    cluster = PgCluster().start()
    try:
        return _pg_measure(spark, cluster, rows, changes)
    finally:
        cluster.stop()


def _pg_measure(spark: SparkSession, cluster: Any, rows: int, changes: int) -> dict[str, float]:
    import io

    from pyspark.sql import functions as F

    cluster.createdb("bench")
    ddl = ("id bigint PRIMARY KEY, first_name text, last_name text, email text, "
           "phone_number text, hire_date date, job_id text, salary numeric, "
           "commission_pct numeric, manager_id bigint, department_id bigint, updated timestamptz")
    with cluster.connect("bench") as conn:
        conn.execute(f"CREATE UNLOGGED TABLE big ({ddl})")
        conn.commit()

        def load() -> None:
            for part in _batches(_target_rows(spark, rows).drop(
                    "_cf_seq", "_cf_scn", "_cf_pos", "_cf_deleted", "_cf_src")):
                buf = io.StringIO()
                part.to_pandas().to_csv(buf, index=False, header=False)
                buf.seek(0)
                with conn.cursor().copy("COPY big FROM STDIN (FORMAT csv)") as cp:
                    cp.write(buf.read())
            conn.commit()

        loaded, _ = _timed(load)
        src = _changed_ids(spark, rows, changes, 77).select(*_employees(F.col("id"), "p-"))
        buf = io.StringIO()
        frame: Any = src.toPandas()
        frame.to_csv(buf, index=False, header=False)
        text = buf.getvalue()
        cols = [c.split()[0] for c in ddl.split(", ")]
        sets = ", ".join(f"{c} = excluded.{c}" for c in cols[1:])

        def upsert() -> int:
            conn.execute(f"CREATE TEMP TABLE ch ({ddl.replace(' PRIMARY KEY', '')})")
            with conn.cursor().copy("COPY ch FROM STDIN (FORMAT csv)") as cp:
                cp.write(text)
            n = conn.execute(f"INSERT INTO big SELECT * FROM ch ON CONFLICT (id) DO UPDATE "
                             f"SET {sets}").rowcount
            conn.execute("DROP TABLE ch")
            conn.commit()
            return n

        seconds, n = _timed(upsert)
        assert n == changes, n
    return {"upsert_seconds": seconds, "load_seconds": loaded}
