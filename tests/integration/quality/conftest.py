"""A two-site pipeline and inline LCR batches for the quality integration tests."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
from changeflow.config import PipelineConfig, load_config
from changeflow.sites import open_pipeline

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)

PIPELINE = """
version: 1
sites:
  site1: {staging_root: s1/staging, target_root: s1/targets, state_url: "sqlite:///s1/state.db",
          database: DBS1.EXAMPLE.COM}
  site2: {staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db",
          database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.streams_queue, site: site1}
  - {name: strmadmin.streams_queue, site: site2}
propagations:
  - {name: p12, source_queue: strmadmin.streams_queue@site1,
     destination_queue: strmadmin.streams_queue@site2}
applies:
  - {name: ap, queue: strmadmin.streams_queue@site2, buckets: 2}
"""


def row_lcr(i: int, command: str = "INSERT", **over: Any) -> dict[str, Any]:
    """A valid row LCR of HR.REGIONS (key REGION_ID = i), with fields overridden."""
    image = {"REGION_ID": lcr.encode_value(i), "REGION_NAME": lcr.encode_value(f"r{i}")}
    msg: dict[str, Any] = {name: None for name in lcr.FIELD_NAMES}
    msg.update(
        schema_version=lcr.SCHEMA_VERSION, msg_id=lcr.message_id("t", i, command, over),
        kind="ROW", origin="CAPTURED", source_database_name="DBS1.EXAMPLE.COM",
        command_type=command, object_owner="HR", object_name="REGIONS", transaction_id="tx10",
        commit_scn=10, commit_time=T0, position=i, key_columns=["REGION_ID"],
        old_values=None if command == "INSERT" else image,
        new_values=None if command == "DELETE" else image,
    )
    msg.update(over)
    return msg


@pytest.fixture
def make_pipeline(tmp_path: Path) -> Callable[[str], PipelineConfig]:
    """Write the pipeline (plus an optional ``quality:`` section) and open it."""

    def make(quality: str = "") -> PipelineConfig:
        (tmp_path / "pipeline.yaml").write_text(PIPELINE + quality)
        cfg = load_config(tmp_path / "pipeline.yaml")
        open_pipeline(cfg)
        return cfg

    return make


@pytest.fixture
def pipeline(make_pipeline: Callable[[str], PipelineConfig]) -> PipelineConfig:
    return make_pipeline("")


@pytest.fixture
def lcr_frame(spark: Any) -> Callable[[list[dict[str, Any]]], Any]:
    """Build a DataFrame following the LCR contract from message dicts."""

    def build(messages: list[dict[str, Any]]) -> Any:
        rows = [tuple(m[n] for n in lcr.FIELD_NAMES) for m in messages]
        return spark.createDataFrame(rows, lcr.spark_schema())

    return build
