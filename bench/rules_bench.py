"""Rules benchmark: filter throughput with 0, 10, 1,000 and 10,000 rules.

Each variant reads the same Parquet batch of generated row LCRs, filters it with a
client's rule sets (``RuleSetPair.filter``, row migration included) and writes the
result to Spark's ``noop`` sink, which forces every column of every surviving row to
be computed. The baseline is the same read and write with no rule set (the raw
Parquet copy); ratio = throughput / baseline throughput, in the same process. A naive
OR-tree of 100 table rules (every condition compiled and OR-ed) is measured for the
record.

Run alone: ``python bench/rules_bench.py [n_rows]`` (default 5,000,000).
"""

from __future__ import annotations

import functools
import json
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

from bench.results import entry
from changeflow import lcr
from changeflow.rules import templates as tpl
from changeflow.rules.migration import ROW_SUBSET_KEY
from changeflow.rules.ruleset import Rule, RuleSet, RuleSetPair

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

N_TABLES = 12_000  # tables seen in the data; 10,000 rules cover ~82% of them
N_SCHEMAS = 50
N_SUBSET = 50
TARGET_10K = 0.67


def _typed(type_name: str, value: Column) -> Column:
    from pyspark.sql import functions as F

    field = lcr.LOGICAL_TYPES[type_name].field
    parts = [F.lit(type_name).alias("type")]
    for name, ddl in lcr.VALUE_FIELDS[1:]:
        v = value if name == field else F.lit(None)
        parts.append(v.cast(lcr.spark_type(ddl)).alias(name))
    return F.struct(*parts)


def generate(spark: SparkSession, n_rows: int) -> DataFrame:
    """``n_rows`` row LCRs over ``N_TABLES`` tables, following the LCR contract."""
    from pyspark.sql import functions as F

    df = spark.range(0, n_rows, 1, max(2, n_rows // 500_000))
    table = F.abs(F.xxhash64("id")) % N_TABLES
    commands = F.array(*[F.lit(c) for c in lcr.DML_COMMANDS])
    cmd = F.element_at(commands, (F.col("id") % 3 + 1).cast("int"))
    region = lambda salt: (F.abs(F.xxhash64("id", F.lit(salt))) % 5 + 1)  # noqa: E731
    values = lambda salt: F.create_map(  # noqa: E731
        F.lit("REGION_ID"), _typed("INTEGER", region(salt)),
        F.lit("NAME"), _typed("VARCHAR2", F.concat(F.lit(salt), F.col("id").cast("string"))),
    )  # fmt: skip
    given = {
        "schema_version": F.lit(lcr.SCHEMA_VERSION),
        "msg_id": F.col("id").cast("string"),
        "kind": F.lit("ROW"),
        "origin": F.lit("CAPTURED"),
        "source_database_name": F.lit("DBS1.EXAMPLE.COM"),
        "command_type": cmd,
        "object_owner": F.concat(F.lit("S"), (table % N_SCHEMAS).cast("string")),
        "object_name": F.concat(F.lit("T"), table.cast("string")),
        "tag": F.when(F.col("id") % 20 == 0, F.lit(bytearray(b"\x01"))),
        "transaction_id": F.concat(F.lit("tx"), (F.col("id") / 100).cast("bigint").cast("string")),
        "commit_scn": (F.col("id") / 100).cast("bigint"),
        "commit_time": F.lit("2024-01-01 00:00:00").cast("timestamp"),
        "position": F.col("id") % 100,
        "old_values": F.when(cmd != "INSERT", values("old")),
        "new_values": F.when(cmd != "DELETE", values("new")),
    }
    schema = lcr.spark_schema()
    return df.select(
        *[given.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in schema.fields]
    )


def table_rules(count: int, offset: int = 0) -> list[Rule]:
    """``count`` system-created DML table rules (ADD_TABLE_RULES conditions)."""
    out = []
    for t in range(offset, offset + count):
        cond = tpl.system_condition("dml", "TABLE", f"S{t % N_SCHEMAS}", f"T{t}", False, None)
        out.append(Rule(f"T{t}_RULE", cond, rule_type="TABLE"))
    return out


def subset_rules(count: int, offset: int) -> list[Rule]:
    """``count`` x 3 subset rules (ADD_SUBSET_RULES) on ``region_id = k``."""
    out = []
    for t in range(offset, offset + count):
        conds = tpl.subset_conditions(f"S{t % N_SCHEMAS}", f"T{t}", f"region_id={t % 5 + 1}",
                                      False, None, {})  # fmt: skip
        out += [Rule(f"T{t}_{op}", c, {ROW_SUBSET_KEY: op}, rule_type="SUBSET") for op, c in conds]
    return out


def _variants() -> dict[str, Any]:
    big = table_rules(10_000 - 3 * N_SUBSET) + subset_rules(N_SUBSET, 10_000 - 3 * N_SUBSET)
    naive = table_rules(100)
    return {
        "no_rule_set": RuleSetPair(),
        "rules_10": RuleSetPair(positive=RuleSet("R10", table_rules(10))),
        "rules_1000": RuleSetPair(positive=RuleSet("R1000", table_rules(1000))),
        "rules_10000": RuleSetPair(positive=RuleSet("R10000", big)),
        "naive_or_100": naive,
    }


def _naive_filter(df: DataFrame, rules: list[Rule]) -> DataFrame:
    from changeflow.rules.spark_compile import compile_condition

    conditions = (compile_condition(r.tree) for r in rules)
    return df.filter(functools.reduce(lambda a, b: a | b, conditions))


def _frame(spark: SparkSession, path: str, variant: Any) -> DataFrame:
    source = spark.read.parquet(path)
    return _naive_filter(source, variant) if isinstance(variant, list) else variant.filter(source)


WARMUPS = 2  # untimed runs per variant before the timed ones


def _measure(spark: SparkSession, path: str, variant: Any, repeats: int) -> dict[str, float]:
    """Best of ``repeats`` timed runs, after ``WARMUPS`` untimed ones.

    The JVM compiles Spark's generated code for a variant while its first runs execute
    (tiered JIT: interpreted, then C1, then C2 with recompilations), so they are slow;
    the figures compare steady-state throughput, every variant treated alike. The
    first (cold) run is reported too. The filter is built outside the timer: that is
    done once per job, whatever the data size.
    """
    runs = []
    for _ in range(WARMUPS + repeats):
        df = _frame(spark, path, variant)
        start = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        runs.append(time.perf_counter() - start)
    rows_out = _frame(spark, path, variant).count()
    best = min(runs[WARMUPS:])
    return {"seconds": round(best, 3), "cold_seconds": round(runs[0], 3), "rows_out": rows_out}


def run(spark: SparkSession, n_rows: int, *, repeats: int = 3) -> list[dict]:
    """Run every variant; entries ``{name, figures, baseline, ratio, target}``."""
    with tempfile.TemporaryDirectory(prefix="rules-bench-") as tmp:
        path = f"{tmp}/lcrs"
        generate(spark, n_rows).write.parquet(path)
        variants = _variants()
        results = {name: _measure(spark, path, v, repeats) for name, v in variants.items()}
    base = n_rows / results["no_rule_set"]["seconds"]
    cold_base = results["no_rule_set"]["cold_seconds"]
    entries = []
    for name, fig in results.items():
        if name == "no_rule_set":
            continue
        big = name == "rules_10000"
        entries.append(entry(
            f"rules.filter.{name}", value=n_rows / fig["seconds"], unit="LCR/s",
            baseline_value=base, baseline="the same read and noop write with no rule set "
            "(steady state, after two warm-up runs; best of three)",
            target=TARGET_10K if big else None, direction=">=" if big else None,
            headline=big, figures={"rows": n_rows, **fig,
                                   "cold_ratio": round(cold_base / fig["cold_seconds"], 3)}))
    return entries


def main(argv: list[str]) -> int:
    """Run the benchmark alone and print its entries as JSON."""
    from changeflow.spark import get_session

    n_rows = int(argv[1]) if len(argv) > 1 else 5_000_000
    entries = run(get_session("rules-bench"), n_rows)
    print(json.dumps(entries, indent=2))
    big = next(e for e in entries if e["name"].endswith("rules_10000"))
    return 0 if big["met"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
