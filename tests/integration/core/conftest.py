"""A small two-site pipeline in a temporary directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from changeflow.config import PipelineConfig, load_config

PIPELINE = """
version: 1
sites:
  site1: {staging_root: s1/staging, target_root: s1/targets, state_url: "sqlite:///s1/state.db", database: DBS1.EXAMPLE.COM}
  site2: {staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2/state.db", database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.streams_queue, site: site1}
  - {name: strmadmin.streams_queue, site: site2}
captures:
  - name: cap
    queue: strmadmin.streams_queue@site1
    source:
      type: snapshot
      database: DBS1.EXAMPLE.COM
      root: source
      tables:
        - {name: hr.regions, key: [region_id]}
        - {name: hr.staff, key: [staff_id]}
propagations:
  - {name: p12, source_queue: strmadmin.streams_queue@site1, destination_queue: strmadmin.streams_queue@site2}
applies:
  - {name: ap, queue: strmadmin.streams_queue@site2, buckets: 4}
"""

STAFF_DDL = (
    "staff_id int, name string, salary decimal(8,2), hired date, active boolean, "
    "updated timestamp, score double"
)


@pytest.fixture
def pipeline(tmp_path: Path) -> PipelineConfig:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    return load_config(tmp_path / "pipeline.yaml")


@pytest.fixture
def snapshot(spark, pipeline: PipelineConfig) -> Callable[[str, int, list[tuple], str], None]:  # type: ignore[no-untyped-def]
    """Write snapshot ``n`` of a table."""

    def write(table: str, n: int, rows: list[tuple], ddl: str) -> None:
        root = pipeline.captures[0].source.root
        spark.createDataFrame(rows, ddl).coalesce(1).write.parquet(f"{root}/{table}/snap={n}")

    return write
