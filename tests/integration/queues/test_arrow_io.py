"""Batches written with pyarrow read back through Spark with exactly the LCR contract."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
from changeflow.queues import arrow_io
from changeflow.queues import io as qio
from changeflow.queues.catalog import QueueCatalog
from changeflow.state import StateStore

pytestmark = pytest.mark.spark

NEW = {
    "ID": lcr.encode_value(7),
    "AMOUNT": lcr.encode_value(decimal.Decimal("12.5")),
    "NAME": lcr.encode_value("Europe"),
    "AT": lcr.encode_value(dt.datetime(2024, 1, 2, 3, 4, 5, 123456)),
    "AT_TZ": lcr.encode_value(dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)),
    "FLAG": lcr.encode_value(True),
    "DAY": lcr.encode_value(dt.date(2024, 2, 29)),
    "BYTES": lcr.encode_value(b"\x00\xff"),
    "RATIO": lcr.encode_value(0.25),
    "MISSING": lcr.encode_value(None, "NUMBER"),
}


def _message() -> dict[str, Any]:
    msg: dict[str, Any] = {name: None for name in lcr.FIELD_NAMES}
    msg.update(schema_version=lcr.SCHEMA_VERSION, msg_id="m1", kind="ROW", origin="CAPTURED",
               source_database_name="PG1", command_type="INSERT", object_owner="HR",
               object_name="REGIONS", transaction_id="9", commit_scn=100,
               commit_time=dt.datetime(2024, 1, 1, tzinfo=dt.UTC), position=1,
               key_columns=["ID"], new_values=list(NEW.items()))
    return msg


def test_spark_reads_arrow_batch_with_the_contract(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa

    catalog = QueueCatalog(StateStore(f"sqlite:///{tmp_path}/state.db"), str(tmp_path / "stg"))
    catalog.create_queue("strm.q")
    table = pa.Table.from_pylist([_message()], schema=lcr.arrow_schema())
    batch = arrow_io.write_arrow_batch(catalog, "strm.q", table, producer="t", dedup_key="k")
    assert batch is not None and batch.max_commit_scn == 100
    seq = catalog.commit_batch("strm.q", batch)
    assert catalog.commit_batch("strm.q", batch) is None  # dedup key
    lcr.check_schema(spark.read.parquet(batch.path).schema, path=batch.path)
    [row] = qio.read_batches(spark, _batches(catalog, seq)).collect()
    got = {k: lcr.decode_value(v) for k, v in row.new_values.items()}
    expected = {k: lcr.decode_value(v) for k, v in NEW.items()}
    expected["AT_TZ"] = expected["AT_TZ"].replace(tzinfo=None)  # Spark shows UTC, naive
    assert got == expected
    assert row.new_values["MISSING"]["type"] == "NUMBER"
    assert row.commit_time == dt.datetime(2024, 1, 1)  # session time zone is UTC


def test_arrow_reads_spark_batch(spark: Any, tmp_path: Path) -> None:
    catalog = QueueCatalog(StateStore(f"sqlite:///{tmp_path}/state.db"), str(tmp_path / "stg"))
    catalog.create_queue("strm.q")
    df = spark.createDataFrame([{**_message(), "new_values": NEW}], lcr.spark_schema())
    seq = qio.enqueue(spark, catalog, "strm.q", df, producer="t")
    table = arrow_io.read_arrow_batches(_batches(catalog, seq))
    assert table.schema == lcr.arrow_schema()
    [msg] = table.to_pylist()
    assert {k: lcr.decode_value(v) for k, v in msg["new_values"]} == {
        k: lcr.decode_value(v) for k, v in NEW.items()}


def _batches(catalog: QueueCatalog, seq: int | None) -> list[Any]:
    catalog.add_consumer("strm.q", "reader")
    with catalog.store.begin() as c:
        catalog.ack("strm.q", "reader", 0, c)
    return [b for b in catalog.pending("strm.q", "reader") if b.seq == seq]
