"""Fixtures of the Debezium tests: pipeline and event builders, a throwaway PostgreSQL."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
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


QUEUE = "strm.q@s1"


def capture(root_dir: Path, events: Path, tables: list[dict[str, Any]], *, database: str = "pg1",
            quality: bool = True) -> PipelineConfig:
    """A pipeline whose capture ``dbz`` reads the Debezium files under ``events`` into
    queue :data:`QUEUE`; ``tables`` as the source's ``tables`` list (name, key, columns)."""
    return pipeline(root_dir, f"""
        queues: [{{name: strm.q, site: s1}}]
        captures:
          - name: dbz
            queue: {QUEUE}
            source:
              type: debezium
              database: {database}
              root: {events}
              tables: {json.dumps(tables)}
    """, quality=quality)


def pg_source(lsn: int, tx: int, last_commit: int | None = None, *, table: str = "customers",
              schema: str = "inventory", snapshot: str = "false",
              ts_ms: int = 1700000000123) -> dict[str, Any]:
    """The ``source`` block of the PostgreSQL connector (``sequence``: the last commit
    LSN before the transaction, null when not given, then the change's LSN)."""
    return {"version": "2.7.0.Final", "connector": "postgresql", "name": "inv",
            "ts_ms": ts_ms, "ts_us": ts_ms * 1000 + 456, "snapshot": snapshot, "db": "shop",
            "sequence": json.dumps([None if last_commit is None else str(last_commit),
                                    str(lsn)]),
            "schema": schema, "table": table, "txId": tx, "lsn": lsn, "xmin": None}


def values(image: Any) -> dict[str, tuple[str, Any]] | None:
    """An LCR value map as ``{column: (logical type, Python value)}``."""
    if image is None:
        return None
    return {k: (v["type"], lcr.decode_value(v)) for k, v in image}


def batch_dirs(root_dir: Path) -> list[Path]:
    """Every batch directory written under the pipeline's staging root."""
    return [p for p in (root_dir / "s1" / "staging").rglob("batch-*") if p.is_dir()]


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

    QUEUE = QUEUE
    pipeline = staticmethod(pipeline)
    capture = staticmethod(capture)
    pg_source = staticmethod(pg_source)
    values = staticmethod(values)
    batch_dirs = staticmethod(batch_dirs)
    write_events = staticmethod(write_events)
    queue_rows = staticmethod(queue_rows)


@pytest.fixture()
def dbz() -> type[Helpers]:
    """Pipeline, event-file and queue helpers."""
    return Helpers
