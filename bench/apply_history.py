"""The apply into a table with a long history against the same apply into a young one
(``apply.long_history``, reported).

Every Iceberg commit writes the table's metadata file anew, and that file lists every
snapshot the table keeps: ``expire_after_hours`` of them (a week by default), some
10,000 when an apply runs every minute. Two pipelines of the apply suite's shape, each
with a table of ``ROWS`` rows made through the product; one table is then given
``HISTORY`` snapshots more. They are copies of the table's first snapshot entry (its
summary, about 1.2 KB each), older than the table's own, committed through the
catalog in one metadata update (Iceberg's ``TableOperations.commit``): a year of
commits one by one would rewrite the growing file 10,000 times. Nothing reads their
manifests; every metadata file the applies write, and every table load, carries them.
After two applies each (the first cold), four applies each, alternating (ABBA), with
``CHANGES`` UPDATE LCRs each and the default configuration (rules, conflict detection,
quality checks, maintenance on); the medians count.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.apply_bench import TABLE, Applier, make_table, setup
from bench.results import entry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROWS, CHANGES, HISTORY = 100_000, 1_000, 10_000


def inflate(spark: SparkSession, targets: Any, table: str, n: int) -> int:
    """Give ``table`` ``n`` more snapshots, older than its own (see the module
    docstring); returns the size of the metadata file it then has."""
    jt = targets.java_table(spark, table)
    ops = jt.operations()
    base = ops.current()
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    assert jvm is not None
    parser = jvm.org.apache.iceberg.TableMetadataParser
    meta = json.loads(parser.toJson(base))
    first = meta["snapshots"][0]
    start = first["timestamp-ms"] - n * 10
    copies = []
    for i in range(n):
        c = json.loads(json.dumps(first))
        c["snapshot-id"], c["timestamp-ms"] = 9 * 10**17 + i, start + i * 10
        c.pop("parent-snapshot-id", None)
        if i:
            c["parent-snapshot-id"] = 9 * 10**17 + i - 1
        copies.append(c)
    meta["snapshots"] = copies + meta["snapshots"]
    with tempfile.NamedTemporaryFile("w", suffix=".metadata.json", delete=False) as f:
        json.dump(meta, f)
    made = parser.read(jt.io(), f.name)
    ops.commit(base, made)
    Path(f.name).unlink()
    jt.refresh()
    location = str(jt.operations().current().metadataFileLocation())
    return Path(location.removeprefix("file:")).stat().st_size


def long_history(spark: SparkSession, root: Path) -> dict[str, Any]:
    """The entry: the median apply into the table with the long history over the
    median apply into the young one."""
    appliers, sizes = {}, {}
    for arm in ("young", "long"):
        (root / arm).mkdir(parents=True)
        cfg, targets = setup(spark, root / arm)
        make_table(spark, targets, TABLE, ROWS)
        appliers[arm] = Applier(spark, cfg, ROWS, CHANGES)
        appliers[arm](1)
        appliers[arm](2)
        if arm == "long":
            sizes["long"] = inflate(spark, targets, TABLE, HISTORY)
    runs: dict[str, list[float]] = {"young": [], "long": []}
    for k in range(8):  # ABBA: young, long, long, young, ...
        arm = "young" if k % 4 in (0, 3) else "long"
        runs[arm].append(appliers[arm](3 + len(runs[arm])))
    young, long = statistics.median(runs["young"]), statistics.median(runs["long"])
    steps = {arm: [p["steps"] for p in a.profile[2:]] for arm, a in appliers.items()}
    return entry(
        "apply.long_history", value=long, unit="s",
        baseline=f"the same apply into a table of the same {ROWS:,} rows with a young "
                 "history (a few snapshots), alternating (ABBA), medians of four",
        baseline_value=young, figures={
            "rows": ROWS, "changes": CHANGES, "snapshots_added": HISTORY,
            "metadata_bytes": sizes.get("long"),
            "runs": {k: [round(x, 3) for x in v] for k, v in runs.items()},
            "steps": steps})


def run(spark: SparkSession, size: str = "small") -> list[dict[str, Any]]:
    """The figure alone (``python -c 'import bench.apply_history as h; ...'``)."""
    with tempfile.TemporaryDirectory(prefix="apply-history-") as tmp:
        return [long_history(spark, Path(tmp))]
