"""Benchmarks of the apply into Apache Iceberg targets: the same engine on both sides.

The target has the shape of hr.employees (12 columns) and 10 million rows (``--size
small``: 1 million), made through the product (:func:`changeflow.targets.tables.create`
and a bulk ``writeTo(...).append()`` into the catalog); each apply brings 100,000
UPDATE LCRs (small: 10,000) spread over the whole table, carrying the key and the old
value of the changed column, with the default configuration: rules on (a positive rule
set), conflict detection on, quality checks on, maintenance on. Each apply is
``changeflow.apply.engine.apply_once``; the first of a process is *cold* (reported
beside the warm figure), the figures compare warm with warm: a pass runs a few dozen
small Spark queries, whose generated code and JIT settle over its first applies (the
second took 8.5 s, the twelfth 4.8 s), while a peer's one big query settles within its
first run, and the peer's runs change what the JIT made of the code both share (the
Parquet reader, Iceberg's writer: applies run between them took 6.0-8.1 s, against
4.8-6.3 s before). So the warm apply is measured where the peers are, in the same JVM
at the same time: the *median* of the four applies after the maintenance cycle (below),
each run just before one of the ``MERGE INTO`` peer's four runs (interleaved, as an A/B
comparison is), and each peer's warm figure is the median of its warm runs. The median
of applies 2-12 that did no maintenance (the warm figure until 2026-12-06) and the
second apply are kept beside it.

* ``apply.changes``: the warm apply over a full rewrite of the same table by the same
  engine (Spark: ``CREATE OR REPLACE TABLE ... USING iceberg ... AS SELECT``, same
  partition spec and codec; the fastest of three warm rewrites: two before the applies,
  one after the peers). Target <= 0.2.
* ``apply.repeated``: the mean apply over a whole maintenance cycle, maintenance
  (Iceberg's ``rewrite_data_files`` when due) included, over the same rewrite: applies
  3 to the one whose maintenance rewrote the last of the data files the table had
  before apply 3 (its rewrite of deleted rows: the whole table's at once, or the last
  group of buckets' where it is spread; at most :data:`CYCLE_CAP`; where it did not
  come, the full maintenance that follows is counted in). Beside it, the mean of
  applies 3-12 (the first 10 in a row after the warm-up) and of the worst 10 in a row
  of the cycle. Target <= 0.25.
* ``apply.vs_merge_into``: the warm apply over Iceberg's own ``MERGE INTO`` of as many
  row images (read from Parquet) into a table of the same rows and properties
  (``write.merge.mode=merge-on-read``), on the same Spark, warm (the median of the
  second to fourth of four).
  Target <= 1.0.
* ``apply.conflict_detection``: applies with detection on over detection off, medians
  of three each, interleaved. Target <= 1.3.
* ``apply.vs_merge_cdc``: the same over the ``MERGE INTO`` a user of plain Iceberg
  writes for change rows (an operation column; the newest change per key by a window;
  delete, update or insert), on the same table after the image merges (reported).
* ``apply.vs_deltalake``: the warm apply over a delta-rs ``MERGE`` of as many rows
  into a Delta table of the same rows (another engine and format: reported).
* ``apply.one_shot_vs_merge_into``: what a scheduled job pays: a fresh process that
  imports changeflow, starts a Spark session and applies one queued batch (as the DAG's
  spark-submit task does) over a fresh process that starts a session and runs the
  ``MERGE INTO`` of as many images; alternating, medians of two (reported).
* ``apply.read_after_applies``: a full scan (Spark ``count``/``sum``) of the snapshot
  with the most position deletes of the maintenance cycle (time travel: the most
  deletes a reader meets under the default policy; before a whole table's rewrite of
  deleted rows where it is not spread), over the same scan after Iceberg's maintenance
  (reported); the same for DuckDB's own Iceberg reader (``iceberg_scan`` of the
  metadata file, best of two) and for PyIceberg's Arrow scan (both reported).
* ``apply.tables_side_by_side``: passes of eight small tables with the tables side by
  side (the default ``parallelism``) over one after the other (:mod:`bench.apply_tables`,
  reported).
* ``apply.long_history``: applies into a table of 100,000 rows given 10,000 snapshots
  (a week of applies every minute) over the same applies into one with a young history
  (:mod:`bench.apply_history`, reported).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import apply_peers as peers
from bench.results import entry

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SIZES = {"tiny": (100_000, 1_000), "small": (1_000_000, 10_000), "full": (10_000_000, 100_000)}
TABLE = "bench.big"
#: the applies while the JIT settles (the first is cold): the figure kept beside it
EARLY = range(2, 13)
#: the last apply of a maintenance cycle's measurement when no rewrite of deleted rows
#: came before it (each apply changes 1% of the rows; the default policy rewrites at 30%)
CYCLE_CAP = 45
BUCKETS = 16
PIPELINE = """
version: 1
rules: rules.yaml
sites:
  s2: {{staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db",
        database: DBS2.EXAMPLE.COM}}
queues:
  - {{name: bench.dst, site: s2}}
  - {{name: bench.off, site: s2}}
applies:
  - {{name: a, queue: bench.dst@s2, buckets: {buckets}}}
  - {{name: nodetect, queue: bench.off@s2, buckets: {buckets}, conflicts: {{detect: false}}}}
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
"""
TARGET_COLUMNS = [
    ("id", "INTEGER"), ("first_name", "VARCHAR2"), ("last_name", "VARCHAR2"),
    ("email", "VARCHAR2"), ("phone_number", "VARCHAR2"), ("hire_date", "DATE"),
    ("job_id", "VARCHAR2"), ("salary", "NUMBER"), ("commission_pct", "NUMBER"),
    ("manager_id", "INTEGER"), ("department_id", "INTEGER"),
    ("updated", "TIMESTAMP WITH TIME ZONE"),
]


def timed(fn: Any) -> tuple[float, Any]:
    """``(seconds, result)`` of a call."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def employees(ids: Any, tag: str) -> list[Any]:
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


def target_rows(spark: SparkSession, n: int, tag: str = "") -> DataFrame:
    """``n`` rows in the target table's layout (data columns, then bookkeeping)."""
    from pyspark.sql import functions as F

    ids = spark.range(0, n, 1, max(2, n // 1_000_000))
    return ids.select(*employees(F.col("id"), tag), F.lit("DBS1.EXAMPLE.COM").alias("_cf_src"),
                      F.lit(0).cast("bigint").alias("_cf_scn"), F.col("id").alias("_cf_pos"),
                      F.lit(None).cast("binary").alias("_cf_tag"))


def changed_ids(spark: SparkSession, n_rows: int, n_changes: int, run: int) -> DataFrame:
    """``n_changes`` keys spread over the table; each run shifts them (no overlap under
    ``n_rows / n_changes`` runs)."""
    from pyspark.sql import functions as F

    step = max(1, n_rows // n_changes)
    return spark.range(0, n_changes).select(((F.col("id") * step + run) % n_rows).alias("id"))


def changes(spark: SparkSession, n_rows: int, n_changes: int, run: int,
            table: str = "BIG", scn: int | None = None) -> DataFrame:
    """UPDATE row LCRs for ``n_changes`` keys spread over the whole table ``BENCH.<table>``,
    one transaction (``tx<run>``, or ``tx<run>-<table>`` at commit position ``scn``)."""
    import datetime as dt

    from pyspark.sql import functions as F

    from changeflow import lcr, values

    ids = changed_ids(spark, n_rows, n_changes, run)
    rows = ids.select(*employees(F.col("id"), f"r{run}-"),
                      F.concat(F.lit("first-"), F.col("id").cast("string")).alias("old_first"))
    new = rows.drop("old_first")
    old = rows.select(F.col("id"), F.col("old_first").alias("first_name"))
    given = {
        "schema_version": F.lit(lcr.SCHEMA_VERSION),
        "msg_id": F.substring(F.sha2(F.concat_ws(":", F.lit(run), F.col("id"))
                                     if table == "BIG" else
                                     F.concat_ws(":", F.lit(run), F.lit(table), F.col("id")),
                                     256), 1, 32),
        "kind": F.lit("ROW"), "origin": F.lit("CAPTURED"),
        "source_database_name": F.lit("DBS1.EXAMPLE.COM"), "command_type": F.lit("UPDATE"),
        "object_owner": F.lit("BENCH"), "object_name": F.lit(table),
        "transaction_id": F.lit(f"tx{run}" if scn is None else f"tx{run}-{table}"),
        "commit_scn": F.lit(1000 + run if scn is None else scn),
        "commit_time": F.lit(dt.datetime(2025, 1, 1, tzinfo=dt.UTC)), "position": F.col("id"),
        "key_columns": F.array(F.lit("ID")),
        "new_values": values.row_map(new.schema),
        "old_values": values.row_map(old.schema, prefix="_old_"),
    }
    frame = rows.select("*", F.col("id").alias("_old_id"),
                        F.col("old_first").alias("_old_first_name"))
    return frame.select(*[given.get(n, F.lit(None)).cast(lcr.spark_type(t)).alias(n)
                          for n, t, _ in lcr.LCR_FIELDS])


def make_table(spark: SparkSession, targets: Any, name: str, n_rows: int) -> float:
    """Create a target table through the product and bulk-load ``n_rows``; its seconds."""
    from changeflow.targets import tables
    from changeflow.targets.catalog import TargetTable

    tables.create(spark, targets, TargetTable(name, ["id"], TARGET_COLUMNS, BUCKETS))
    seconds, _ = timed(lambda: target_rows(spark, n_rows).writeTo(targets.ident(name)).append())
    return seconds


def setup(spark: SparkSession, root: Path) -> tuple[Any, Any]:
    """The pipeline (config, Iceberg targets of its site)."""
    from changeflow.apply.engine import targets_of
    from changeflow.config import load_config
    from changeflow.sites import open_pipeline

    (root / "pipeline.yaml").write_text(PIPELINE.format(buckets=BUCKETS))
    (root / "rules.yaml").write_text(RULES)
    cfg = load_config(root / "pipeline.yaml")
    open_pipeline(cfg)
    targets = targets_of(cfg, cfg.applies[0])
    targets.register(spark)
    return cfg, targets


class Applier:
    """Enqueues a run's changes and applies them, keeping each apply's profile."""

    def __init__(self, spark: SparkSession, cfg: Any, n_rows: int, n_changes: int) -> None:
        self.spark, self.cfg, self.rows, self.changes = spark, cfg, n_rows, n_changes
        self.profile: list[dict[str, Any]] = []

    def __call__(self, run: int, name: str = "a") -> float:
        """Enqueue run ``run``'s changes for apply ``name``, apply them; the apply's seconds."""
        from changeflow.apply.engine import apply_once
        from changeflow.clients import rule_filter
        from changeflow.queues import io as qio
        from changeflow.sites import queue_site

        queue = self.cfg.component("apply", name).queue
        rt, q = queue_site(self.cfg, queue)
        qio.enqueue(self.spark, rt.catalog, q, changes(self.spark, self.rows, self.changes, run),
                    producer="bench")
        rules = rule_filter(self.cfg, "apply", name)
        seconds, res = timed(lambda: apply_once(self.spark, self.cfg, name, rule_filter=rules))
        if res.tables != {TABLE: self.changes} or res.errors:
            raise RuntimeError(f"apply {name} run {run} did not apply {self.changes} "
                               f"changes: {res}")
        self.profile.append({"run": run, "apply": name, "seconds": round(seconds, 3),
                             "steps": {k: round(v, 3) for k, v in res.timings.items()}})
        return seconds


def rewrite(spark: SparkSession, targets: Any, source: str) -> float:
    """A full rewrite of a table by Spark into a new Iceberg table of the same layout."""
    from changeflow.targets.tables import PROPERTIES

    props = ", ".join(f"'{k}' = '{v}'" for k, v in PROPERTIES.items())
    sql = (f"CREATE OR REPLACE TABLE {targets.ident('bench.rewrite')} USING iceberg "
           f"PARTITIONED BY (bucket({BUCKETS}, id)) TBLPROPERTIES ({props}, "
           f"'format-version' = '{targets.format_version}') "
           f"AS SELECT * FROM {targets.ident(source)}")
    return timed(lambda: spark.sql(sql).collect())[0]


def run(spark: SparkSession, size: str = "small") -> list[dict[str, Any]]:
    """Every apply figure at ``size`` (``small`` or ``full``)."""
    from bench.apply_history import long_history
    from bench.apply_tables import side_by_side

    n_rows, n_changes = SIZES.get(size, SIZES["small"])
    with tempfile.TemporaryDirectory(prefix="apply-bench-") as tmp:
        root = Path(tmp)
        cfg, targets = setup(spark, root)
        load = make_table(spark, targets, TABLE, n_rows)
        rewrites = [rewrite(spark, targets, TABLE) for _ in range(3)]
        apply = Applier(spark, cfg, n_rows, n_changes)
        cold, warm = apply(1), apply(2)
        start = data_files(spark, targets)
        last, end, rewritten = maintenance_cycle(
            apply, lambda: len(start & data_files(spark, targets)))
        # merge-on-read's read cost where it is largest: the snapshot of the most deleted
        # rows (time travel; the counts are recorded)
        worst, n_applies = peers.most_deleted(spark, targets, TABLE)
        reads = peers.reads(spark, targets, TABLE, maintained=False, snapshot=worst,
                            state=f"after {n_applies} applies, before the table's rewrite")
        on: list[float] = []
        off: list[float] = []
        for r in range(last + 1, last + 7):  # three of each, interleaved
            first = (r - last) % 2
            (on if first else off).append(apply(r, "a" if first else "nodetect"))
        check = spark.sql(f"SELECT count(*) FROM {targets.ident(TABLE)} "
                          f"WHERE first_name LIKE 'r{last + 6}-%'").first()
        if check is None or check[0] != n_changes:
            raise RuntimeError(f"the last apply's rows are not all there: {check}")
        maintained = timed(lambda: peers.maintain_fully(spark, targets, TABLE))[0]
        reads_after = peers.reads(spark, targets, TABLE, maintained=True)
        # the warm apply: four applies, one before each of the peer's MERGE INTO runs
        late = range(last + 7, last + 11)
        merge = peers.merge_into(spark, targets, root, n_rows, n_changes,
                                 between=lambda k: apply(late[0] + k - 1))
        delta = peers.deltalake(spark, root, n_rows, n_changes)
        rewrites.append(rewrite(spark, targets, TABLE))  # as warm as the peers
        jobs = peers.one_shot(spark, cfg, root, TABLE, n_rows, n_changes,
                              first_run=late[-1] + 1)
        tables = side_by_side(spark, root / "tables", size)
        history = long_history(spark, root / "history")
    figures = {"target_rows": n_rows, "changes": n_changes, "target_columns": 12,
               "buckets": BUCKETS, "load_seconds": round(load, 2),
               "rewrite_runs": [round(x, 3) for x in rewrites]}
    cycle = {"end": end, "rewritten": rewritten, "maintained_after": round(maintained, 3)}
    out = results(figures, rewrites, cold, warm, cycle, late, on, off, merge, delta,
                  reads, reads_after, apply.profile)
    return [*out, one_shot_entry(jobs), tables, history]


def one_shot_entry(jobs: dict[str, Any]) -> dict[str, Any]:
    """The one-shot apply job against a one-shot ``MERGE INTO`` job (reported)."""
    from bench.results import skipped

    what = ("a one-shot MERGE INTO job of as many row images (a fresh process: import, "
            "Spark session, MERGE INTO; median of two, alternating with the apply's)")
    if "skipped" in jobs:
        return skipped("apply.one_shot_vs_merge_into", jobs["skipped"], unit="s",
                       baseline=what, target=None, direction=None)
    return entry("apply.one_shot_vs_merge_into", value=jobs["seconds"], unit="s",
                 baseline=what, baseline_value=jobs["merge_seconds"], figures={
                     **jobs, "what": "a fresh process imports changeflow, starts a Spark "
                     "session (from its class archive) and applies one queued batch of the "
                     "changes (what the DAG's spark-submit task does), quality and "
                     "detection on; median of two"})


def data_files(spark: SparkSession, targets: Any) -> set[str]:
    """The data files of the benchmark table's current snapshot."""
    rows = spark.sql(f"SELECT file_path FROM {targets.ident(TABLE)}.data_files").collect()
    return {r[0] for r in rows}


def maintenance_cycle(apply: Any, remaining: Any, cap: int = CYCLE_CAP
                      ) -> tuple[int, int, bool]:
    """Applies 3, 4, ... until one's maintenance has rewritten the last of the data files
    the table had before apply 3 (``remaining()``, asked after each apply, is how many
    it still has) and applies 3-12 have run, at most to ``cap``: the last apply run, the
    cycle's last (that one, or ``cap``), and whether it came."""
    end = 0
    for r in range(3, cap + 1):
        apply(r)
        end = end or (r if remaining() == 0 else 0)
        if end and r >= EARLY[-1]:
            return r, end, True
    return cap, end or cap, bool(end)


def cycle_figures(profile: list[dict[str, Any]], cycle: dict[str, Any],
                  base: float) -> tuple[float, dict[str, Any]]:
    """The mean apply over the maintenance cycle (applies 3 to ``cycle["end"]``, with the
    full maintenance that followed when no apply's maintenance rewrote the table's data
    files),
    and its figures: the mean of applies 3-12 and of the worst 10 in a row."""
    runs = [p for p in profile if p["apply"] == "a" and 3 <= p["run"] <= cycle["end"]]
    seconds = [p["seconds"] for p in runs]
    total = sum(seconds) + (0.0 if cycle["rewritten"] else cycle["maintained_after"])
    windows = [statistics.mean(seconds[i:i + 10]) for i in range(max(1, len(seconds) - 9))]
    worst = max(range(len(windows)), key=lambda i: windows[i])
    # applies 3-12 whether or not the cycle ended before them
    first_ten = statistics.mean(p["seconds"] for p in profile
                                if p["apply"] == "a" and 3 <= p["run"] <= EARLY[-1])
    return total / len(seconds), {
        "runs": [round(x, 3) for x in seconds],
        "maintenance_seconds": [p["steps"].get("maintenance") for p in runs],
        "cycle_applies": len(seconds), "rewritten_by_an_apply": cycle["rewritten"],
        "maintenance_after_seconds": None if cycle["rewritten"] else cycle["maintained_after"],
        "first_ten_seconds": round(first_ten, 3), "first_ten_ratio": round(first_ten / base, 3),
        "worst_ten_seconds": round(windows[worst], 3),
        "worst_ten_ratio": round(windows[worst] / base, 3),
        "worst_ten": f"applies {runs[worst]['run']}-{runs[min(worst + 9, len(runs) - 1)]['run']}",
        "maintenance_per_apply_over_run": maintenance_per_apply(profile),
        "applies_in_run": len(profile),
        "note": ("mean apply over a maintenance cycle (applies 3 to the one whose "
                 "maintenance rewrote the last data file the table had before apply 3), "
                 "maintenance included")}


def steady(profile: list[dict[str, Any]], runs: range) -> float:
    """The median of the applies ``runs`` (``apply`` "a") that did no maintenance (its
    step under a second: the policy's check only): the warm apply (the applies run
    between the ``MERGE INTO`` peer's runs) or the early ones (:data:`EARLY`)."""
    seconds = [p["seconds"] for p in profile if p["apply"] == "a" and p["run"] in runs
               and (p["steps"].get("maintenance") or 0.0) < 1.0]
    return statistics.median(seconds)


def maintenance_per_apply(profile: list[dict[str, Any]]) -> float:
    """The maintenance seconds of every apply of the run, per apply (the 10-apply window
    may hold more or less of it than the run's share)."""
    return round(sum(p["steps"].get("maintenance") or 0.0 for p in profile)
                 / max(len(profile), 1), 3)


def results(figures: dict[str, Any], rewrites: list[float], cold: float, warm: float,
            cycle: dict[str, Any], late: range, on: list[float], off: list[float],
            merge: dict[str, Any], delta: dict[str, Any], reads: dict[str, Any],
            reads_after: dict[str, Any], profile: list[dict[str, Any]]) -> list[dict]:
    """The suite's entries from its measurements."""
    base = min(rewrites[1:])
    what = ("full rewrite of the same table by the same engine: Spark CREATE OR REPLACE "
            "TABLE ... USING iceberg AS SELECT (fastest of three warm runs)")
    second, warm, early = warm, steady(profile, late), steady(profile, EARLY)
    repeated, per_cycle = cycle_figures(profile, cycle, base)
    out = [
        entry("apply.changes", value=warm, unit="s", baseline=what, baseline_value=base,
              target=0.2, direction="<=", headline=True, figures={
                  **figures, "warm": (f"median of applies {late[0]}-{late[-1]}, each run "
                                      "just before one of the MERGE INTO peer's runs"),
                  "early_seconds": round(early, 3), "early_ratio": round(early / base, 3),
                  "early": (f"median of applies {EARLY[0]}-{EARLY[-1]} without maintenance, "
                            "while the JIT settles"),
                  "second_apply_seconds": round(second, 3),
                  "second_ratio": round(second / base, 3),
                  "cold_apply_seconds": round(cold, 3),
                  "cold_rewrite_seconds": round(rewrites[0], 3),
                  "cold_ratio": round(cold / rewrites[0], 3), "profile": profile}),
        entry("apply.repeated", value=repeated, unit="s", baseline=what,
              baseline_value=base, target=0.25, direction="<=", headline=True,
              figures=per_cycle),
    ]
    if "skipped" in merge:
        from bench.results import skipped

        out.append(skipped("apply.vs_merge_into", merge["skipped"], unit="s",
                           baseline="Iceberg MERGE INTO (merge-on-read), same Spark",
                           target=1.0, direction="<=", value=warm, headline=True))
    else:
        out.append(entry(
            "apply.vs_merge_into", value=warm, unit="s", baseline_value=merge["seconds"],
            baseline="Iceberg's own MERGE INTO ... WHEN MATCHED UPDATE SET * WHEN NOT MATCHED "
                     "INSERT * (write.merge.mode=merge-on-read) of as many row images read "
                     "from Parquet, same Spark, warm (median of runs 2-4 of 4)",
            target=1.0, direction="<=", headline=True, figures=merge))
    if merge.get("cdc_seconds"):
        out.append(entry(
            "apply.vs_merge_cdc", value=warm, unit="s", baseline_value=merge["cdc_seconds"],
            baseline="the MERGE INTO a user of plain Iceberg writes for as many change rows "
                     "(flattened, an operation column): the newest per key by a window, then "
                     "WHEN MATCHED AND op = 'd' DELETE / UPDATE SET / WHEN NOT MATCHED INSERT; "
                     "same Spark, warm (median of runs 2-3 of 3)",
            figures={"runs": merge.get("cdc_runs")}))
    out.append(entry(
        "apply.conflict_detection", value=statistics.median(on), unit="s",
        baseline="the same applies with conflict detection off (medians of three, "
                 "interleaved)", baseline_value=statistics.median(off), target=1.3,
        direction="<=", figures={"on": [round(x, 3) for x in on],
                                 "off": [round(x, 3) for x in off]}))
    if "skipped" in delta:
        from bench.results import skipped

        out.append(skipped("apply.vs_deltalake", delta["skipped"], unit="s",
                           baseline="delta-rs MERGE", target=None, direction=None, value=warm))
    else:
        out.append(entry(
            "apply.vs_deltalake", value=warm, unit="s", baseline_value=delta["seconds"],
            baseline="delta-rs (deltalake) MERGE of as many rows into a Delta table of the "
                     "same rows (another engine and format)", figures=delta))
    out.append(entry(
        "apply.read_after_applies", value=reads["spark_seconds"], unit="s",
        baseline="the same full scan after Iceberg's maintenance (rewrite_data_files)",
        baseline_value=reads_after["spark_seconds"],
        figures={"after_applies": reads, "after_maintenance": reads_after}))
    if reads.get("duckdb_seconds") is not None and reads_after.get("duckdb_seconds"):
        out.append(entry(
            "apply.duckdb_read_after_applies", value=reads["duckdb_seconds"], unit="s",
            baseline="DuckDB's Iceberg reader (iceberg_scan) after maintenance",
            baseline_value=reads_after["duckdb_seconds"],
            figures={"after_applies": reads, "after_maintenance": reads_after}))
        out.append(entry(
            "apply.pyiceberg_read_after_applies", value=reads["pyiceberg_scan_seconds"],
            unit="s", baseline="PyIceberg's Arrow scan (three columns) after maintenance",
            baseline_value=reads_after["pyiceberg_scan_seconds"],
            figures={"after_applies": reads, "after_maintenance": reads_after}))
    return out


if __name__ == "__main__":
    import json
    import sys

    from changeflow.spark import get_session

    print(json.dumps(run(get_session("apply-bench"), sys.argv[1] if len(sys.argv) > 1
                         else "small"), indent=2, default=str))
