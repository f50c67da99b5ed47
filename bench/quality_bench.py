"""Quality benchmark: validating an N-LCR batch, as a ratio to propagating it.

A temporary two-site pipeline holds one source batch of ``n_rows`` generated row LCRs
(INSERT/UPDATE/DELETE of ``HR.EMPLOYEES``, four typed columns, 100 messages per
transaction). Three propagations (``pa``, ``pb``, ``pc``) move it to three destination
queues with quality checks disabled: that is the baseline, the engine's own propagation
of the same data in the same run. Each destination batch is then validated with
:func:`changeflow.quality.check_batch`, with every LCR-batch suite and the hop
reconciliation, exactly as a propagation runs it. The best of the three runs of each is
reported; ratio = validation seconds / propagation seconds (lower is better). CPU
seconds (driver JVM, where local-mode executors run, plus the Python process) are
reported too: on a machine shared with other jobs they vary less than wall time.

Run alone: ``python bench/quality_bench.py [n_rows]`` (default 5,000,000).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.results import entry
from changeflow import lcr

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

TARGET = 0.3

PIPELINE = """
version: 1
sites:
  s1: {{staging_root: s1/staging, target_root: s1/targets, state_url: "sqlite:///s1/state.db",
        database: DBS1.EXAMPLE.COM}}
  s2: {{staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db",
        database: DBS2.EXAMPLE.COM}}
queues:
  - {{name: bench.src, site: s1}}
  - {{name: bench.qa, site: s2}}
  - {{name: bench.qb, site: s2}}
  - {{name: bench.qc, site: s2}}
propagations:
  - {{name: pa, source_queue: bench.src@s1, destination_queue: bench.qa@s2}}
  - {{name: pb, source_queue: bench.src@s1, destination_queue: bench.qb@s2}}
  - {{name: pc, source_queue: bench.src@s1, destination_queue: bench.qc@s2}}
quality: {{enabled: {enabled}}}
"""


def _typed(type_name: str, value: Column) -> Column:
    from pyspark.sql import functions as F

    field = lcr.LOGICAL_TYPES[type_name].field
    parts = [F.lit(type_name).alias("type")]
    for name, ddl in lcr.VALUE_FIELDS[1:]:
        v = value if name == field else F.lit(None)
        parts.append(v.cast(lcr.spark_type(ddl)).alias(name))
    return F.struct(*parts)


def _row_map(salt: str) -> Column:
    from pyspark.sql import functions as F

    rid = F.col("id")
    return F.create_map(
        F.lit("EMPLOYEE_ID"), _typed("INTEGER", rid),
        F.lit("LAST_NAME"),
        _typed("VARCHAR2", F.concat(F.lit(f"name{salt}-"), rid.cast("string"))),
        F.lit("SALARY"), _typed("NUMBER", (rid % 9000 + 1000).cast("decimal(38,10)")),
        F.lit("HIRE_DATE"),
        _typed("DATE", F.date_add(F.lit(dt.date(2000, 1, 1)), (rid % 5000).cast("int"))),
    )


def generate(spark: SparkSession, n_rows: int, *, txn_size: int = 100) -> DataFrame:
    """``n_rows`` valid row LCRs following the contract, ``txn_size`` per transaction."""
    from pyspark.sql import functions as F

    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    df = spark.range(0, n_rows, 1, max(2, n_rows // 250_000))
    txn = (F.col("id") / txn_size).cast("bigint")
    cmd = F.element_at(F.array(*[F.lit(c) for c in lcr.DML_COMMANDS]),
                       (F.col("id") % 3 + 1).cast("int"))
    given = {
        "schema_version": F.lit(lcr.SCHEMA_VERSION),
        "msg_id": F.substring(F.sha2(F.col("id").cast("string"), 256), 1, 32),
        "kind": F.lit("ROW"), "origin": F.lit("CAPTURED"),
        "source_database_name": F.lit("DBS1.EXAMPLE.COM"), "command_type": cmd,
        "object_owner": F.lit("HR"), "object_name": F.lit("EMPLOYEES"),
        "transaction_id": F.concat(F.lit("tx"), txn.cast("string")),
        "commit_scn": txn + 1,
        "commit_time": (F.lit(base).cast("long") + txn).cast("timestamp"),
        "position": F.col("id") % txn_size,
        "key_columns": F.array(F.lit("EMPLOYEE_ID")),
        "old_values": F.when(cmd != "INSERT", _row_map("o")),
        "new_values": F.when(cmd != "DELETE", _row_map("n")),
    }
    return df.select(*[given.get(n, F.lit(None)).cast(lcr.spark_type(t)).alias(n)
                       for n, t, _ in lcr.LCR_FIELDS])


def _config(root: Path, enabled: bool) -> Any:
    from changeflow.config import load_config

    path = root / f"pipeline-{enabled}.yaml"
    path.write_text(PIPELINE.format(enabled=str(enabled).lower()))
    return load_config(path)


def _validate(spark: SparkSession, cfg: Any, queue: str, hop: Any) -> tuple[float, Any]:
    """Validate the committed destination batch as if it had just been written."""
    from changeflow.quality import HopCounters, check_batch
    from changeflow.queues.catalog import NewBatch
    from changeflow.sites import queue_site

    rt, q = queue_site(cfg, queue)
    [b] = _batches(rt, q)
    batch = NewBatch(b.batch_id, b.path, b.n_messages, b.n_bytes, producer=f"bench:{queue}")
    counters = HopCounters(hop.messages_read, hop.messages_propagated, hop.messages_discarded)
    start = time.perf_counter()
    report = check_batch(spark, cfg, stage=f"bench:{queue}", batch=batch, queue=queue,
                         counters=counters)
    return time.perf_counter() - start, report


def _batches(rt: Any, queue: str) -> list[Any]:
    from sqlalchemy import select

    from changeflow.queues.catalog import batch_from_row as _batch
    from changeflow.state import schema

    B = schema.queue_batches
    with rt.store.engine.connect() as c:
        return [_batch(r) for r in c.execute(select(B).where(B.c.queue == queue))]


def _cpu(spark: SparkSession) -> float:
    """CPU seconds used so far by the JVM (driver and local executors) and this process."""
    import os

    jvm: Any = spark.sparkContext._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        jvm_cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:  # not Linux, or a remote driver: wall time only
        jvm_cpu = 0.0
    return jvm_cpu + time.process_time()


def _timed(spark: SparkSession, fn: Any) -> tuple[float, float, Any]:
    cpu, wall = _cpu(spark), time.perf_counter()
    out = fn()
    return time.perf_counter() - wall, _cpu(spark) - cpu, out


def run(spark: SparkSession, n_rows: int) -> list[dict]:
    """Propagate and validate an ``n_rows`` batch twice; one entry ``{name, figures, ...}``."""
    from changeflow.propagation import propagate_once
    from changeflow.queues import io as qio
    from changeflow.sites import open_pipeline, queue_site

    with tempfile.TemporaryDirectory(prefix="quality-bench-") as tmp:
        root = Path(tmp)
        plain, checked = _config(root, False), _config(root, True)
        open_pipeline(plain)
        rt, src = queue_site(plain, "bench.src@s1")
        qio.enqueue(spark, rt.catalog, src, generate(spark, n_rows), producer="bench")
        prop, val, prop_cpu, val_cpu, report = [], [], [], [], None
        for name in ("pa", "pb", "pc"):
            wall, cpu, hop = _timed(spark, lambda n=name: propagate_once(spark, plain, n))
            prop.append(wall)
            prop_cpu.append(cpu)
            queue = f"bench.q{name[1]}@s2"
            wall, cpu, (_, report) = _timed(
                spark, lambda q=queue, h=hop: _validate(spark, checked, q, h))
            val.append(wall)
            val_cpu.append(cpu)
    best_prop, best_val = min(prop), min(val)
    assert report is not None and report.status == "passed", report
    return [entry(
        "quality.validate_batch", value=best_val, unit="s", baseline_value=best_prop,
        baseline="propagation of the same batch (quality disabled), same run, best of three",
        target=TARGET, direction="<=", headline=True, figures={
            "rows": n_rows, "validate_runs": [round(v, 3) for v in val],
            "propagate_runs": [round(p, 3) for p in prop],
            "validate_rows_per_s": round(n_rows / best_val),
            "validate_cpu_seconds": round(min(val_cpu), 3),
            "propagate_cpu_seconds": round(min(prop_cpu), 3),
            "cpu_ratio": round(min(val_cpu) / min(prop_cpu), 3),
            "expectations": len(report.checks)})]


def main(argv: list[str]) -> int:
    """Run the benchmark alone and print its entries as JSON."""
    from changeflow.spark import get_session

    n_rows = int(argv[1]) if len(argv) > 1 else 5_000_000
    entries = run(get_session("quality-bench"), n_rows)
    print(json.dumps(entries, indent=2))
    return 0 if entries[0]["met"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
