"""Run the benchmarks and write bench-results.json (``make bench``).

Usage: ``python -m bench [--size small|full] [--only NAME ...] [--out FILE] [--events FILE]``.
Each benchmark reports a ratio against a baseline measured in the same run, because
absolute times on a shared machine mean little. The JSON run events of the pipelines the
benchmarks run go to ``bench-events.jsonl`` (``CHANGEFLOW_EVENTS``), not the terminal.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"small": {"rows": 500_000, "pg": "small"}, "full": {"rows": 5_000_000, "pg": "full"}}
# (name, module, how to call its run())
SUITES = [
    ("pipeline", "bench.pipeline_bench", "rows"),
    ("apply", "bench.apply_bench", "rows"),
    ("rules", "bench.rules_bench", "rows"),
    ("quality", "bench.quality_bench", "rows"),
    ("schedules", "bench.schedule_bench", "rows"),
    ("postgres", "bench.pg_bench", "pg"),
    ("aq", "bench.aq_bench", "pg"),
    ("idap", "bench.idap_bench", "pg"),
    ("mcq", "bench.mcq_bench", "pg"),
    ("ops", "bench.ops_bench", "rows"),
    ("reliability", "bench.reliability_bench", "rows"),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--size", choices=sorted(SIZES), default="full")
    p.add_argument("--only", nargs="*", choices=[s[0] for s in SUITES])
    p.add_argument("--out", default=str(ROOT / "bench-results.json"))
    p.add_argument("--events", default=os.environ.get("CHANGEFLOW_EVENTS") or str(
        ROOT / "bench-events.jsonl"), help="where run events go (a file, stderr or off)")
    args = p.parse_args(argv)
    os.environ["CHANGEFLOW_EVENTS"] = args.events
    os.environ.setdefault("CHANGEFLOW_DRIVER_MEMORY", "8g")
    from changeflow.spark import get_session

    spark = get_session("changeflow-bench")
    spark.sparkContext.setLogLevel("ERROR")
    results, failed = [], 0
    for name, module, arg in SUITES:
        if args.only and name not in args.only:
            continue
        started = time.time()
        try:
            mod = importlib.import_module(module)
            entries = mod.run(spark, SIZES[args.size][arg])
        except Exception as exc:  # noqa: BLE001  (one failing suite must not hide the others)
            traceback.print_exc()
            failed += 1
            entries = [{"name": name, "error": f"{type(exc).__name__}: {exc}"}]
        for e in entries:
            e.setdefault("suite", name)
            e.setdefault("size", args.size)
            e["suite_seconds"] = round(time.time() - started, 1)
        results.extend(entries)
        Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    print(f"\n{'benchmark':<34}{'ratio':>9}  {'target':<28}baseline")
    for e in results:
        print(f"{e['name']:<34}{e.get('ratio', 'ERROR')!s:>9}  {e.get('target', '')!s:<28}"
              f"{e.get('baseline', e.get('error', ''))}")
    print(f"\nresults written to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
