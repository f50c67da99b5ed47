"""A throwaway PostgreSQL 15 cluster (wal_level=logical) for the postgres tests.

The cluster listens on a free TCP port of 127.0.0.1 and on a Unix socket in a
temporary directory, and is stopped and removed at the end of the session.
PostgreSQL refuses to run as root, so initdb and pg_ctl run as the ``postgres``
system user when the tests run as root.
"""

from __future__ import annotations

import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.testing.pg_cluster import PG_BIN, PgCluster


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    """The session's PostgreSQL cluster, removed at the end."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 is not installed at {PG_BIN}; run make setup")
    cluster = PgCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture()
def workdir() -> Iterator[Path]:
    """A scratch directory for a test's staging roots and state stores."""
    d = Path(tempfile.mkdtemp(prefix="changeflow-pgtest-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write_pipeline(root: Path, body: str) -> Path:
    """Write a pipeline file with two sites (s1, s2) on SQLite state stores."""
    text = textwrap.dedent("""
        version: 1
        sites:
          s1: {staging_root: s1/staging, target_root: s1/targets,
               state_url: "sqlite:///s1/state.db", database: PG1.EXAMPLE.COM}
          s2: {staging_root: s2/staging, target_root: s2/targets,
               state_url: "sqlite:///s2/state.db", database: PG2.EXAMPLE.COM}
    """) + textwrap.dedent(body)
    path = root / "pipeline.yaml"
    path.write_text(text)
    return path


@pytest.fixture()
def pipeline_file() -> Any:
    """The :func:`write_pipeline` helper."""
    return write_pipeline
