"""The cost of the promise: propagation of many small batches with leases and ordered commits.

A propagation pass holds its lease, commits its destination batch under the queue's row
lock with its source range, and drains a backlog in bounded passes. This benchmark
checks that none of that slows the hot path, with the default configuration (quality
checks on) and a realistic rule set (100 system-created table rules, the data's table
among them):

* ``reliability.small_batches_vs_raw_copy``: 1,000 source batches of 5,000 messages
  (full size; 100 at ``--size small``) propagated until drained, as a throughput ratio
  to a raw ``spark.read.parquet(all batches).write.parquet(copy)`` of the same files.
  Target ≥ 0.5.
* ``reliability.small_batches_vs_one_batch``: the same messages as one source batch,
  propagated the same way, as a throughput ratio (one batch time / many batches time).
  Target ≥ 0.7.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.results import entry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PIPELINE = """
version: 1
sites:
  s1: {staging_root: s1/staging, target_root: s1/targets, state_url: "sqlite:///s1/state.db", database: DBS1.EXAMPLE.COM}
  s2: {staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db", database: DBS2.EXAMPLE.COM}
queues:
  - {name: bench.many, site: s1}
  - {name: bench.one, site: s1}
  - {name: bench.dmany, site: s2}
  - {name: bench.done, site: s2}
propagations:
  - {name: pmany, source_queue: bench.many@s1, destination_queue: bench.dmany@s2}
  - {name: pone, source_queue: bench.one@s1, destination_queue: bench.done@s2}
"""
BATCH = 5_000


def _rule_filter() -> Any:
    from bench.rules_bench import table_rules
    from changeflow.rules import templates as tpl
    from changeflow.rules.ruleset import Rule, RuleSet, RuleSetPair

    rules = table_rules(99)
    rules.append(Rule("EMPLOYEES_RULE", tpl.system_condition("dml", "TABLE", "HR", "EMPLOYEES",
                                                            False, None), rule_type="TABLE"))
    return RuleSetPair(positive=RuleSet("BENCH_RULES", rules)).filter


def _split_into_batches(spark: SparkSession, cfg: Any, ref: str, n_batches: int) -> list[str]:
    """Write ``n_batches`` x 5,000 LCRs as that many committed batches of one queue."""
    from bench.quality_bench import generate
    from changeflow import fs
    from changeflow.queues.catalog import NewBatch
    from changeflow.sites import queue_site

    rt, q = queue_site(cfg, ref)
    staging = rt.catalog.queue_path(q)
    tmp = f"{staging}/_bulk-{uuid.uuid4().hex}"
    generate(spark, n_batches * BATCH).repartition(n_batches).write.parquet(tmp)
    files = sorted(p for p, _ in fs.data_files(spark, tmp))
    paths = []
    for f in files:
        batch_id, path = rt.catalog.new_batch_path(q)
        local = f.removeprefix("file:")
        os.makedirs(path, exist_ok=True)
        os.rename(local, os.path.join(path, os.path.basename(local)))
        rt.catalog.commit_batch(q, NewBatch(batch_id, path, BATCH, os.path.getsize(
            os.path.join(path, os.path.basename(local))), "bench"))
        paths.append(path)
    fs.delete(spark, tmp)
    return paths


def _drain(spark: SparkSession, cfg: Any, name: str, rule_filter: Any) -> tuple[float, int, int]:
    from changeflow.propagation import propagate_once

    started = time.perf_counter()
    passes = messages = 0
    while True:
        res = propagate_once(spark, cfg, name, rule_filter=rule_filter)
        if not res.batches_read:
            break
        passes += 1
        messages += res.messages_propagated
    return time.perf_counter() - started, passes, messages


def run(spark: SparkSession, n_rows: int) -> list[dict]:
    """``n_rows`` 5,000,000 (full: 1,000 batches) or fewer (small: 100 batches)."""
    from changeflow.config import load_config
    from changeflow.sites import open_pipeline

    n_batches = 1000 if n_rows >= 5_000_000 else 100
    total = n_batches * BATCH
    with tempfile.TemporaryDirectory(prefix="reliability-bench-") as tmp:
        root = Path(tmp)
        (root / "pipeline.yaml").write_text(PIPELINE)
        cfg = load_config(root / "pipeline.yaml")
        open_pipeline(cfg)
        paths = _split_into_batches(spark, cfg, "bench.many@s1", n_batches)
        _split_into_batches(spark, cfg, "bench.one@s1", 1)  # warm the same code paths
        rule_filter = _rule_filter()
        # The same messages as one batch: one big file set under one batch directory.
        from bench.quality_bench import generate
        from changeflow.queues import io as qio
        from changeflow.sites import queue_site

        rt, q = queue_site(cfg, "bench.one@s1")
        _drain(spark, cfg, "pone", rule_filter)  # the warm-up batch
        qio.enqueue(spark, rt.catalog, q, generate(spark, total), producer="bench")
        raw_started = time.perf_counter()
        spark.read.parquet(*paths).write.parquet(str(root / "raw-copy"))
        raw = time.perf_counter() - raw_started
        many, passes, moved = _drain(spark, cfg, "pmany", rule_filter)
        one, one_passes, one_moved = _drain(spark, cfg, "pone", rule_filter)
    assert moved == total and one_moved == total, (moved, one_moved, total)
    figures = {"batches": n_batches, "messages": total, "passes": passes,
               "many_batches_seconds": round(many, 2), "one_batch_seconds": round(one, 2),
               "raw_copy_seconds": round(raw, 2), "rules": 100, "quality": "on"}
    return [
        entry("reliability.small_batches_vs_raw_copy", value=total / many, unit="LCR/s",
              baseline_value=total / raw, baseline="spark.read.parquet(the same batch files)"
              ".write.parquet(copy), same run", target=0.5, direction=">=", headline=True,
              figures=figures),
        entry("reliability.small_batches_vs_one_batch", value=total / many, unit="LCR/s",
              baseline_value=total / one, baseline="the same messages propagated as one "
              "batch, same run", target=0.7, direction=">=", figures=figures),
    ]
