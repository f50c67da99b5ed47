"""Fixtures of the Debezium tests: a pipeline file writer and a throwaway PostgreSQL."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.config import PipelineConfig, load_config
from changeflow.testing.pg_cluster import PG_BIN, PgCluster


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    """A PostgreSQL cluster for the round trip through the project's own capture."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 is not installed at {PG_BIN}; run make setup")
    cluster = PgCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


def pipeline(root: Path, body: str, *, quality: bool = True) -> PipelineConfig:
    """A one-site pipeline (SQLite state store) with ``body`` appended."""
    text = ("quality: {enabled: false}\n" if not quality else "") + textwrap.dedent("""
        version: 1
        sites:
          s1: {staging_root: s1/staging, target_root: s1/targets,
               state_url: "sqlite:///s1/state.db", database: DBS1.EXAMPLE.COM}
    """) + textwrap.dedent(body)
    path = root / "pipeline.yaml"
    path.write_text(text)
    return load_config(path)


def write_events(path: Path, events: list[Any]) -> Path:
    """Write events as JSON lines (strings are written as they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n"
                            for e in events))
    return path


def queue_rows(cfg: PipelineConfig, ref: str) -> list[dict[str, Any]]:
    """Every message of a queue's retained batches, sorted by message id."""
    from changeflow.debezium.export import queue_batches
    from changeflow.queues import arrow_io

    batches = queue_batches(cfg, ref)
    if not batches:
        return []
    return sorted(arrow_io.read_arrow_batches(batches).to_pylist(), key=lambda r: r["msg_id"])


class Helpers:
    """The helpers above, handed to tests as the ``dbz`` fixture."""

    pipeline = staticmethod(pipeline)
    write_events = staticmethod(write_events)
    queue_rows = staticmethod(queue_rows)


@pytest.fixture()
def dbz() -> type[Helpers]:
    """Pipeline, event-file and queue helpers."""
    return Helpers
