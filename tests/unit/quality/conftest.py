"""Inline LCR DataFrames for the quality unit tests."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from changeflow import lcr

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def row_lcr(i: int, command: str = "INSERT", **over: Any) -> dict[str, Any]:
    """A valid row LCR of HR.REGIONS (key REGION_ID = i), with fields overridden."""
    image = {"REGION_ID": lcr.encode_value(i), "REGION_NAME": lcr.encode_value(f"r{i}")}
    msg: dict[str, Any] = {name: None for name in lcr.FIELD_NAMES}
    msg.update(
        schema_version=lcr.SCHEMA_VERSION, msg_id=lcr.message_id("t", i, command), kind="ROW",
        origin="CAPTURED", source_database_name="DBS1.EXAMPLE.COM", command_type=command,
        object_owner="HR", object_name="REGIONS", transaction_id="tx1", commit_scn=10,
        commit_time=T0, position=i, key_columns=["REGION_ID"],
        old_values=None if command == "INSERT" else image,
        new_values=None if command == "DELETE" else image,
    )
    msg.update(over)
    return msg


@pytest.fixture
def lcr_frame(spark: Any) -> Callable[[list[dict[str, Any]]], Any]:
    """Build a DataFrame following the LCR contract from message dicts."""

    def build(messages: list[dict[str, Any]]) -> Any:
        rows = [tuple(m[n] for n in lcr.FIELD_NAMES) for m in messages]
        return spark.createDataFrame(rows, lcr.spark_schema())

    return build
