"""Propagation in its default configuration against a raw Spark copy (same engine).

``pipeline.propagate``: one source batch of generated row LCRs is propagated by
``propagate_once`` with the default configuration: quality checks on (the LCR-batch
suite and the hop reconciliation) and a positive rule set (a schema rule taking the
data's HR changes, plus 99 table rules of other tables), as a throughput ratio to
``spark.read.parquet(batch).write.parquet(copy)`` of the same batch in the same run.
Each side runs three times, alternating (each propagation is its own consumer of the
batch); warm figures are the best of the second and third runs. The first runs are the
*cold* figure, and the *one-shot* figure adds what a spark-submit job pays before its
first batch (a Spark session for both sides, the GX context for the propagation),
measured in fresh processes (:mod:`bench.startup`). Target >= 0.7 (warm).

The cost curve over sizes is in :mod:`bench.scaling_bench`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import startup
from bench.results import entry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPEATS = 3
PIPELINE = """
version: 1
rules: rules.yaml
sites:
  s1: {staging_root: s1/staging, target_root: s1/targets, state_url: "sqlite:///s1/state.db",
       database: DBS1.EXAMPLE.COM}
  s2: {staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db",
       database: DBS2.EXAMPLE.COM}
queues:
  - {name: bench.src, site: s1}
""" + "".join(f"  - {{name: bench.dst{i}, site: s2}}\n" for i in range(4)) + """
propagations:
""" + "".join(f"  - {{name: p{i}, source_queue: bench.src@s1, destination_queue: bench.dst{i}@s2}}\n"
              for i in range(4))


def rules_yaml(names: list[str]) -> str:
    """A schema rule for HR (the data) and 99 table rules of other tables, as the
    positive rule set of each propagation in ``names``."""
    import yaml

    from changeflow.rules import templates as tpl

    rules = {"HR_DML": {"condition": tpl.system_condition("dml", "SCHEMA", "HR", None, False,
                                                         None), "rule_type": "SCHEMA"}}
    for t in range(99):
        rules[f"T{t}"] = {"condition": tpl.system_condition("dml", "TABLE", f"S{t % 50}", f"T{t}",
                                                           False, None), "rule_type": "TABLE"}
    return yaml.safe_dump({
        "rules": rules, "rule_sets": {"PROP": {"rules": list(rules)}},
        "clients": {n: {"type": "propagation", "positive_rule_set": "PROP"} for n in names}},
        sort_keys=False)


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def setup(spark: SparkSession, root: Path, n_rows: int) -> tuple[Any, str]:
    """The pipeline with one source batch of ``n_rows`` LCRs; (config, the batch's path)."""
    from bench.quality_bench import generate
    from changeflow.config import load_config
    from changeflow.queues import io as qio
    from changeflow.sites import open_pipeline, queue_site

    (root / "pipeline.yaml").write_text(PIPELINE)
    (root / "rules.yaml").write_text(rules_yaml([f"p{i}" for i in range(4)]))
    cfg = load_config(root / "pipeline.yaml")
    open_pipeline(cfg)
    rt, src = queue_site(cfg, "bench.src@s1")
    qio.enqueue(spark, rt.catalog, src, generate(spark, n_rows), producer="bench")
    return cfg, rt.catalog.pending(src, "propagation:p0")[0].path


def measure(spark: SparkSession, cfg: Any, path: str, root: Path, n_rows: int,
            i: int) -> tuple[float, float]:
    """One raw copy and one propagation (``p<i>``) of the batch: their seconds."""
    from changeflow.clients import rule_filter
    from changeflow.propagation import propagate_once

    raw, _ = _timed(lambda: spark.read.parquet(path).write.parquet(str(root / f"copy{i}")))
    rules = rule_filter(cfg, "propagation", f"p{i}")
    seconds, res = _timed(lambda: propagate_once(spark, cfg, f"p{i}", rule_filter=rules))
    if res.messages_propagated != n_rows:
        raise RuntimeError(f"propagation p{i} moved {res.messages_propagated} of {n_rows}")
    return raw, seconds


def run(spark: SparkSession, n_rows: int) -> list[dict[str, Any]]:
    """The propagation entry for a batch of ``n_rows`` LCRs."""
    startup.warm_gx()  # the warm figure does not pay it; the one-shot figure does
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        root = Path(tmp)
        cfg, path = setup(spark, root, n_rows)
        if not cfg.quality.enabled:
            raise RuntimeError("the benchmark must run the default configuration")
        runs = [measure(spark, cfg, path, root, n_rows, i) for i in range(REPEATS)]
    raw = [r for r, _ in runs]
    prop = [p for _, p in runs]
    warm_raw, warm_prop = min(raw[1:]), min(prop[1:])
    spark_start, gx = startup.spark_session(), startup.gx_context()
    one_shot_raw, one_shot_prop = raw[0] + spark_start, prop[0] + spark_start + gx
    return [entry(
        "pipeline.propagate", value=n_rows / warm_prop, unit="LCR/s",
        baseline_value=n_rows / warm_raw,
        baseline="spark.read.parquet(batch).write.parquet(copy) of the same batch, warm",
        target=0.7, direction=">=", headline=True, figures={
            "rows": n_rows, "quality": "on", "rules": "100 (1 schema rule matching)",
            "propagate_runs": [round(x, 3) for x in prop],
            "raw_copy_runs": [round(x, 3) for x in raw],
            "cold_ratio": round(raw[0] / prop[0], 3),
            "one_shot_ratio": round(one_shot_raw / one_shot_prop, 3),
            "spark_session_seconds": round(spark_start, 2),
            "gx_context_seconds": round(gx, 2)})]
