"""Capture rule sets run on each batch before it is enqueued."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from changeflow.capture.postgres import run_pg_capture
from changeflow.config import load_config
from changeflow.queues import arrow_io
from changeflow.sites import queue_site

pytestmark = [pytest.mark.postgres, pytest.mark.spark]


def test_capture_rule_filter(pg: Any, spark: Any, workdir: Path, pipeline_file: Any,
                             monkeypatch: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    monkeypatch.setenv("CF_RULES_SRC", pg.createdb(f"rules_{tag}"))
    pg.sql(f"rules_{tag}", "CREATE TABLE a (id int PRIMARY KEY); "
           "CREATE TABLE b (id int PRIMARY KEY)")
    path = pipeline_file(workdir, f"""
        queues: [{{name: strm.q1, site: s1}}]
        captures:
          - name: cap
            queue: strm.q1@s1
            source: {{type: postgres, database: PG1, url_env: CF_RULES_SRC, slot: rules_{tag}}}
        applies: [{{name: reader, queue: strm.q1@s1}}]
    """)
    cfg = load_config(path)
    run_pg_capture(spark, cfg, "cap")
    pg.sql(f"rules_{tag}", "INSERT INTO a VALUES (1); INSERT INTO b VALUES (1), (2)")
    result = run_pg_capture(spark, cfg, "cap",
                            rule_filter=lambda df: df.where(df.object_name == "B"))
    assert result.messages == 2
    rt, queue = queue_site(cfg, "strm.q1@s1")
    table = arrow_io.read_arrow_batches(rt.catalog.pending(queue, "apply:reader"))
    assert set(table.column("object_name").to_pylist()) == {"B"}
    assert run_pg_capture(spark, cfg, "cap").messages == 0  # acknowledged, filtered or not
