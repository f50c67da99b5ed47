"""A pass of many small tables, side by side (``parallelism``, the default 4) against one
table after the other (``parallelism: 1``): the same engine, the same changes.

Each apply has eight tables of hr.employees' shape of its own (``TABLE_ROWS`` rows each,
made through the product), so both meet the same history (maintenance falls on the same
passes); each pass brings ``CHANGES`` UPDATE LCRs per table, one transaction per table,
with the default configuration (rules on, conflict detection on, quality checks on,
maintenance on). After a first (cold) pass of each apply, three passes each,
alternating; the medians count (``apply.tables_side_by_side``, reported).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.apply_bench import RULES as RULES_OF_BENCH
from bench.apply_bench import changes, make_table, timed
from bench.results import entry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TABLES = [f"T{i}" for i in range(1, 9)]
TABLE_ROWS = {"tiny": 10_000, "small": 100_000, "full": 100_000}
CHANGES = {"tiny": 100, "small": 1_000, "full": 1_000}
PIPELINE = """
version: 1
rules: rules.yaml
sites:
  s2: {staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db",
        database: DBS2.EXAMPLE.COM}
queues:
  - {name: bench.par, site: s2}
  - {name: bench.seq, site: s2}
applies:
  - {name: par, queue: bench.par@s2, buckets: 4}
  - {name: seq, queue: bench.seq@s2, buckets: 4, parallelism: 1}
"""
# the apply suite's rule set, its clients these two applies
RULES = RULES_OF_BENCH.split("clients:")[0] + """clients:
  par: {type: apply, queue: bench.par, positive_rule_set: FROM_DBS1}
  seq: {type: apply, queue: bench.seq, positive_rule_set: FROM_DBS1}
"""


def side_by_side(spark: SparkSession, root: Path, size: str) -> dict[str, Any]:
    """The entry: passes of eight tables at ``parallelism`` 4 over the same at 1."""
    from changeflow.apply.engine import apply_once, targets_of
    from changeflow.clients import rule_filter
    from changeflow.config import load_config
    from changeflow.queues import io as qio
    from changeflow.sites import open_pipeline, queue_site

    n_rows, n_changes = TABLE_ROWS.get(size, 100_000), CHANGES.get(size, 1_000)
    root.mkdir()
    (root / "pipeline.yaml").write_text(PIPELINE)
    (root / "rules.yaml").write_text(RULES)
    cfg = load_config(root / "pipeline.yaml")
    open_pipeline(cfg)
    targets = targets_of(cfg, cfg.applies[0])
    targets.register(spark)
    for name in ("par", "seq"):  # each apply its own tables, of the same history
        for t in TABLES:
            make_table(spark, targets, f"bench.{name}_{t}".lower(), n_rows)
    times: dict[str, list[float]] = {"par": [], "seq": []}
    steps: dict[str, list[dict[str, float]]] = {"par": [], "seq": []}
    for run in range(1, 5):  # par, then seq, with the same changes: the first is cold
        for name in ("par", "seq"):
            rt, q = queue_site(cfg, cfg.component("apply", name).queue)
            batch = None
            for i, t in enumerate(TABLES):
                frame = changes(spark, n_rows, n_changes, run, table=f"{name}_{t}".upper(),
                                scn=1000 + 10 * run + i)
                batch = frame if batch is None else batch.unionByName(frame)
            qio.enqueue(spark, rt.catalog, q, batch, producer="bench")
            rules = rule_filter(cfg, "apply", name)
            seconds, res = timed(lambda: apply_once(spark, cfg, name, rule_filter=rules))  # noqa: B023
            want = {f"bench.{name}_{t}".lower(): n_changes for t in TABLES}
            if res.tables != want or res.errors:
                raise RuntimeError(f"apply {name} run {run} did not apply {want}: {res}")
            times[name].append(seconds)
            steps[name].append({k: round(v, 3) for k, v in res.timings.items()})
    par, seq = statistics.median(times["par"][1:]), statistics.median(times["seq"][1:])
    return entry(
        "apply.tables_side_by_side", value=par, unit="s", baseline_value=seq,
        baseline=(f"the same passes one table after the other (parallelism: 1): "
                  f"{len(TABLES)} tables of {n_rows:,} rows, {n_changes:,} changes each; "
                  "its own eight tables of the same history; medians of three warm passes, "
                  "alternating"),
        figures={"tables": len(TABLES), "rows_per_table": n_rows,
                 "changes_per_table": n_changes, "parallelism": 4,
                 "runs": {k: [round(x, 3) for x in v] for k, v in times.items()},
                 "steps": steps,
                 "cold": {k: round(v[0], 3) for k, v in times.items()}})
