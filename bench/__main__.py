"""Run the benchmarks (``make bench``): results, archives, misses last, a non-zero exit.

Usage: ``python -m bench [--size small|full] [--only NAME ...] [--no-fail] [--archive |
--no-archive] [--out FILE]``.

Every entry is a ratio to a baseline measured in the same run by the same engine (or to
the peer a user would pick), with a numeric target and a direction (:mod:`bench.results`).
All entries go to ``bench-results.json``; a full-size run archives each suite as
``docs/results/bench-<suite>-<date>-<commit>.json`` with the size, load average and
machine (``python -m bench.report --write-readme`` builds the README's table from
them). The run prints every entry, then the misses, and exits 1 when anything was
missed (a target, a skipped baseline or peer, a failed suite) unless ``--no-fail``.
The JSON run events of the pipelines the benchmarks run go to ``bench-events.jsonl``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench import results

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"small": {"rows": 500_000, "pg": "small"}, "full": {"rows": 5_000_000, "pg": "full"}}
# (name, module, how its run() is sized, whether it needs a Spark session)
SUITES = [
    ("pipeline", "bench.pipeline_bench", "rows", True),
    ("apply", "bench.apply_bench", "pg", True),
    ("rules", "bench.rules_bench", "rows", True),
    ("quality", "bench.quality_bench", "rows", True),
    ("schedules", "bench.schedule_bench", "rows", True),
    ("postgres", "bench.pg_bench", "pg", True),
    ("aq", "bench.aq_bench", "pg", False),
    ("idap", "bench.idap_bench", "pg", False),
    ("mcq", "bench.mcq_bench", "pg", False),
    ("ops", "bench.ops_bench", "rows", True),
    ("reliability", "bench.reliability_bench", "rows", True),
    ("scaling", "bench.scaling_bench", "pg", True),
    ("kafka", "bench.kafka_bench", "pg", True),
    ("cluster", "bench.cluster_bench", "rows", True),
    ("startup", "bench.startup", "rows", False),
]


def _spark() -> Any:
    from changeflow.spark import get_session

    spark = get_session("changeflow-bench")
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _meta(size: str, started: dt.datetime, load_start: list[float] | None,
          seconds: float) -> dict[str, Any]:
    head, dirty = results.commit(ROOT)
    return {"size": size, "started": started.isoformat(timespec="seconds"),
            "ended": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "seconds": round(seconds, 1), "commit": head, "dirty": dirty,
            "load_average": {"start": load_start, "end": results.load_average()},
            "machine": results.machine(), "argv": sys.argv[1:]}


def run_suite(name: str, module: str, arg: Any, spark: Any) -> list[dict[str, Any]]:
    """One suite's entries (a suite that raises gives one failed entry)."""
    try:
        entries = importlib.import_module(module).run(spark, arg)
    except Exception as exc:  # noqa: BLE001  (one failing suite must not hide the others)
        traceback.print_exc()
        entries = [results.failed_suite(name, f"{type(exc).__name__}: {exc}")]
    for e in entries:
        e["suite"] = name
    return entries


def main(argv: list[str] | None = None) -> int:
    """Run the chosen suites; 1 when anything was missed (unless ``--no-fail``)."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="full")
    p.add_argument("--only", nargs="*", choices=[s[0] for s in SUITES])
    p.add_argument("--out", default=str(ROOT / "bench-results.json"))
    p.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed")
    p.add_argument("--archive", action=argparse.BooleanOptionalAction, default=None,
                   help="archive each suite in docs/results/ (default: full size only)")
    p.add_argument("--events", default=os.environ.get("CHANGEFLOW_EVENTS") or str(
        ROOT / "bench-events.jsonl"), help="where run events go (a file, stderr or off)")
    args = p.parse_args(argv)
    os.environ["CHANGEFLOW_EVENTS"] = args.events
    os.environ.setdefault("CHANGEFLOW_DRIVER_MEMORY", "8g")
    archive = args.size == "full" if args.archive is None else args.archive
    spark = None
    everything: list[dict[str, Any]] = []
    for name, module, sizing, needs_spark in SUITES:
        if args.only and name not in args.only:
            continue
        if needs_spark and spark is None:
            spark = _spark()
        started, load = dt.datetime.now(dt.UTC), results.load_average()
        t0 = time.monotonic()
        entries = run_suite(name, module, SIZES[args.size][sizing], spark)
        meta = _meta(args.size, started, load, time.monotonic() - t0)
        for e in entries:
            e.setdefault("size", args.size)
        everything.extend(entries)
        Path(args.out).write_text(json.dumps(everything, indent=2, default=str))
        if archive:
            print(f"archived {name}: {results.archive(name, entries, meta)}", flush=True)
    print()
    for e in everything:
        print(results.describe(e))
    missed = results.misses(everything)
    print(f"\nresults written to {args.out}")
    if missed:
        print(f"\nMISSED ({len(missed)} of {len(everything)}):")
        for e in missed:
            print(f"  {results.describe(e)}")
    else:
        print(f"\nall {len(everything)} entries met their targets or are reported only")
    return 1 if missed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
