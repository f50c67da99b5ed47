"""Cost as the work grows: apply, propagation and capture over four sizes in one run.

Each curve measures the candidate and its same-engine baseline at every size, warm (one
untimed run of each at the smallest size first), so a reader sees whether the cost
follows the changes or the table (``python -m bench.report --plot`` draws
``docs/bench-scaling.png`` from the archived run):

* ``scaling.apply``: 100,000 UPDATE changes (small: 10,000) applied by ``apply_once``
  (quality, rules, conflict detection and maintenance on) into Iceberg targets of 1, 2,
  5 and 10 million rows (small: 100k to 1M), against a full Spark rewrite of each
  table. Judged: the apply's time at the largest table over its time at the smallest
  (ten times the table, the same changes), target <= 2.0: the cost follows the changes,
  not the table (SPEC §12).
* ``scaling.propagate``: one batch of 0.5, 1, 2 and 4 million LCRs (small: 50k to
  400k) propagated with rules and quality on, against a raw Spark copy. Judged: the
  throughput ratio at the largest size, target >= 0.7 (as ``pipeline.propagate``).
* ``scaling.capture``: Debezium change-event files of 125k to 1M events (small: 12.5k
  to 100k) captured, against a declared-schema Spark copy. Judged: the throughput
  ratio at the largest size, target >= 0.6 (as ``ops.debezium_capture``).
"""

from __future__ import annotations

import tempfile
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import apply_bench as ab
from bench import pipeline_bench as pb
from bench.results import entry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SIZES = {
    "tiny": {"apply": [20_000, 40_000, 80_000, 160_000], "changes": 1_000,
             "propagate": [10_000, 20_000, 40_000, 80_000],
             "capture": [2_000, 4_000, 8_000, 16_000]},
    "small": {"apply": [100_000, 250_000, 500_000, 1_000_000], "changes": 10_000,
              "propagate": [50_000, 100_000, 200_000, 400_000],
              "capture": [12_500, 25_000, 50_000, 100_000]},
    "full": {"apply": [1_000_000, 2_000_000, 5_000_000, 10_000_000], "changes": 100_000,
             "propagate": [500_000, 1_000_000, 2_000_000, 4_000_000],
             "capture": [125_000, 250_000, 500_000, 1_000_000]},
}


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def apply_curve(spark: SparkSession, sizes: list[int], n_changes: int) -> list[dict]:
    """Per table size: a warm apply of ``n_changes`` (the faster of the second and third)
    and a warm rewrite of the table (the fastest after the first)."""
    points = []
    for i, n_rows in enumerate(sizes):
        with tempfile.TemporaryDirectory(prefix="scaling-apply-") as tmp:
            cfg, targets = ab.setup(spark, Path(tmp))
            ab.make_table(spark, targets, ab.TABLE, n_rows)
            rewrites = [ab.rewrite(spark, targets, ab.TABLE) for _ in range(2 if i else 3)]
            apply = ab.Applier(spark, cfg, n_rows, n_changes)
            applies = [apply(1), apply(2), apply(3)]
            spark.sql(f"DROP TABLE IF EXISTS {targets.ident('bench.rewrite')} PURGE")
            spark.sql(f"DROP TABLE IF EXISTS {targets.ident(ab.TABLE)} PURGE")
        points.append({"size": n_rows, "changes": n_changes, "candidate_s": min(applies[1:]),
                       "baseline_s": min(rewrites[1:]), "cold_candidate_s": applies[0],
                       "steps": apply.profile[-1]["steps"]})
    return points


def propagate_curve(spark: SparkSession, sizes: list[int]) -> list[dict]:
    """Per batch size: a warm propagation (rules, quality on) and a warm raw copy."""
    points = []
    for i, n in enumerate(sizes):
        with tempfile.TemporaryDirectory(prefix="scaling-prop-") as tmp:
            root = Path(tmp)
            cfg, path = pb.setup(spark, root, n)
            if i == 0:  # warm-up, untimed
                pb.measure(spark, cfg, path, root, n, 3)
            raw, prop = pb.measure(spark, cfg, path, root, n, 0)
        points.append({"size": n, "candidate_s": prop, "baseline_s": raw})
    return points


def capture_curve(spark: SparkSession, sizes: list[int]) -> list[dict]:
    """Per number of events: a warm Debezium capture and a warm declared-schema copy."""
    from bench.ops_bench import PIPELINE, RULES, write_events
    from changeflow.clients import rule_filter
    from changeflow.config import load_config
    from changeflow.debezium.capture import run_debezium_capture
    from changeflow.debezium.reader import read_schema

    points = []
    for i, n in enumerate(sizes):
        with tempfile.TemporaryDirectory(prefix="scaling-dbz-") as tmp:
            work = Path(tmp)
            write_events(work / "events", n)
            files = str(work / "events" / "pg1.shop.orders")
            times = []
            for attempt in range(2 if i == 0 else 1):
                out = str(work / f"raw{attempt}")
                raw = _timed(lambda f=files, o=out: spark.read.schema(read_schema(True))
                             .json(f).write.parquet(o))
                run = work / f"run{attempt}"
                run.mkdir()
                (run / "rules.yaml").write_text(textwrap.dedent(RULES))
                (run / "p.yaml").write_text(textwrap.dedent(PIPELINE.format(
                    root=work / "events")))
                cfg = load_config(run / "p.yaml")
                cap = _timed(lambda c=cfg: run_debezium_capture(
                    spark, c, "dbz", rule_filter(c, "capture", "dbz")))
                times.append((raw, cap))
        points.append({"size": n, "candidate_s": times[-1][1], "baseline_s": times[-1][0]})
    return points


def _rounded(points: list[dict]) -> list[dict]:
    return [{k: round(v, 3) if isinstance(v, float) else v for k, v in p.items()}
            for p in points]


def run(spark: SparkSession, size: str = "small") -> list[dict[str, Any]]:
    """The three curves and their judged entries."""
    p = SIZES.get(size, SIZES["small"])
    applied = apply_curve(spark, p["apply"], p["changes"])
    propagated = propagate_curve(spark, p["propagate"])
    captured = capture_curve(spark, p["capture"])
    first, last = applied[0], applied[-1]
    prop, cap = propagated[-1], captured[-1]
    return [
        entry("scaling.apply", value=last["candidate_s"], unit="s",
              baseline_value=first["candidate_s"],
              baseline=f"the same apply ({p['changes']:,} changes) into a table "
                       f"{last['size'] // first['size']}x smaller ({first['size']:,} rows)",
              target=2.0, direction="<=", headline=True, figures={
                  "x": "target rows", "candidate": "apply_once (warm)",
                  "baseline_curve": "Spark CREATE OR REPLACE TABLE AS SELECT (warm)",
                  "rewrite_growth": round(last["baseline_s"] / first["baseline_s"], 3),
                  "curve": _rounded(applied)}),
        entry("scaling.propagate", value=prop["size"] / prop["candidate_s"], unit="LCR/s",
              baseline_value=prop["size"] / prop["baseline_s"],
              baseline=f"raw Spark Parquet copy of the same {prop['size']:,}-LCR batch",
              target=0.7, direction=">=", figures={
                  "x": "LCRs in the batch", "candidate": "propagate_once (rules, quality on)",
                  "baseline_curve": "spark.read.parquet().write.parquet()",
                  "curve": _rounded(propagated)}),
        entry("scaling.capture", value=cap["size"] / cap["candidate_s"], unit="events/s",
              baseline_value=cap["size"] / cap["baseline_s"],
              baseline=f"declared-schema Spark copy of the same {cap['size']:,} events",
              target=0.6, direction=">=", figures={
                  "x": "Debezium events", "candidate": "Debezium file capture (quality on)",
                  "baseline_curve": "spark.read.schema(read schema).json().write.parquet()",
                  "curve": _rounded(captured)}),
    ]
