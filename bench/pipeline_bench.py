"""Benchmarks of the core pipeline (issue 2).

* ``pipeline.propagate``: propagation throughput as a ratio to a raw
  ``spark.read.parquet(...).write.parquet(...)`` copy of the same batch, same run.
  Target ≥ 0.7.

The apply benchmarks are in ``bench/apply_bench.py``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def run(spark: SparkSession, n_rows: int) -> list[dict]:
    """The propagation benchmark (the apply benchmarks live in ``bench/apply_bench.py``)."""
    return [propagate(spark, n_rows)]
