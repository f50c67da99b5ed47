"""The conversion's generated code stays small enough for the JIT compiler.

HotSpot does not compile a method of more than 8,000 bytes of bytecode, and its
compilers give up on much smaller ones full of locals; the conversion once made one
``processNext`` of some 35 KB, run in the interpreter. See
``convert.codegen_barrier`` and docs/debezium.md#performance.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from changeflow.debezium import convert, onepass, reader
from changeflow.debezium.capture import debezium_source

pytestmark = pytest.mark.spark

HUGE_METHOD = 8000  # bytes of bytecode: HotSpot's -XX:+DontCompileHugeMethods limit
DEC = {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
       "parameters": {"scale": "2"}}
IMAGE = {"type": "struct", "optional": True, "fields": [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "customer"},
    {**DEC, "field": "amount"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp",
     "field": "placed"},
    {"type": "boolean", "optional": True, "field": "paid"},
    {"type": "float64", "optional": True, "field": "weight"}]}
SCHEMA = {"type": "struct", "optional": False, "name": "inv.inventory.orders.Envelope",
          "fields": [{**IMAGE, "field": "before"}, {**IMAGE, "field": "after"}]}


def _method_sizes(spark: Any, df: Any) -> list[int]:
    """The largest generated method of each whole-stage code unit of ``df``'s plan."""
    debug = spark._jvm.org.apache.spark.sql.execution.debug.package
    text = debug.codegenString(df._jdf.queryExecution().executedPlan())
    return [int(s) for s in re.findall(r"maxMethodCodeSize:(\d+)", text)]


def test_no_generated_method_of_the_conversion_is_too_large_to_compile(
        spark: Any, tmp_path: Path, dbz: Any) -> None:
    row = {"id": 1, "customer": "c", "amount": "AQ==", "placed": 1_700_000_000_000_000,
           "paid": True, "weight": 1.5}
    path = dbz.write_events(tmp_path / "events" / "inv.inventory.orders" / "0.json", [
        {"schema": SCHEMA, "payload": {"before": row, "after": row, "op": "u", "ts_ms": 1,
                                       "source": dbz.pg_source(1000, 7, 900, table="orders")}}])
    cfg = dbz.capture(tmp_path, tmp_path / "events",
                      [{"name": "inventory.orders", "key": ["id"]}])
    source = debezium_source(cfg.component("capture", "dbz"))
    uris = [path.resolve().as_uri()]
    guess = onepass.guess(spark, uris, source)
    assert guess is not None
    df = convert.to_lcrs(reader.read_events(spark, uris, with_schemas=True), source,
                         guess.tables)
    sizes = _method_sizes(spark, df)
    assert len(sizes) >= 5, sizes  # the steps are units of their own
    assert max(sizes) < HUGE_METHOD, sizes
    assert df.count() == 1
