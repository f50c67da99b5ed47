"""A throwaway PostgreSQL 15 cluster (wal_level=logical) for the postgres tests.

The cluster listens on a free TCP port of 127.0.0.1 and on a Unix socket in a
temporary directory, and is stopped and removed at the end of the session.
PostgreSQL refuses to run as root, so initdb and pg_ctl run as the ``postgres``
system user when the tests run as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PG_BIN = Path(os.environ.get("CHANGEFLOW_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_pg_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
    return ["runuser", "-u", "postgres", "--", *argv]


class PgCluster:
    """A running throwaway cluster."""

    def __init__(self, root: Path, port: int):
        self.root = root
        self.port = port
        self.data = root / "data"
        self.sock = root / "sock"

    def url(self, db: str = "postgres") -> str:
        """A libpq URL of a database of this cluster (superuser ``postgres``)."""
        return f"postgresql://postgres@/{db}?host={self.sock}&port={self.port}"

    def tool(self, name: str, *args: str, db: str = "postgres", **kw: Any) -> str:
        """Run a client tool (psql, pgbench, createdb) against a database."""
        argv = [str(PG_BIN / name), "-h", str(self.sock), "-p", str(self.port), "-U", "postgres",
                *args]
        if name in ("psql", "pgbench", "createdb", "dropdb"):
            argv.append(db)
        done = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
        if done.returncode != 0:
            raise RuntimeError(f"{name} {args} failed: {done.stderr[-2000:]}")
        return done.stdout

    def sql(self, db: str, text: str) -> str:
        """Run a SQL script through psql: each statement commits on its own (autocommit)."""
        return self.tool("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-f", "-",
                         db=db, input=textwrap.dedent(text))

    def createdb(self, db: str) -> str:
        """Create a database and return its URL."""
        self.tool("createdb", db=db)
        return self.url(db)

    def connect(self, db: str) -> Any:
        """An autocommit psycopg connection."""
        import psycopg

        return psycopg.connect(self.url(db), autocommit=True)


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    """The session's PostgreSQL cluster."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 is not installed at {PG_BIN}; run make setup")
    root = Path(tempfile.mkdtemp(prefix="changeflow-pg-"))
    os.chmod(root, 0o755)
    cluster = PgCluster(root, _free_port())
    cluster.sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(cluster.sock, "postgres")
    subprocess.run(_as_pg_user([str(PG_BIN / "initdb"), "-D", str(cluster.data),
                                "--username=postgres", "-A", "trust", "-E", "UTF8",
                                "--no-sync"]), check=True, capture_output=True)
    opts = (f"-c wal_level=logical -c port={cluster.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={cluster.sock} -c max_replication_slots=20 "
            "-c max_wal_senders=10 -c fsync=off "
            "-c full_page_writes=off -c max_connections=100 -c shared_buffers=128MB")
    subprocess.run(_as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(cluster.data), "-o", opts,
                                "-l", str(root / "server.log"), "-w", "start"]),
                   check=True, capture_output=True)
    try:
        yield cluster
    finally:
        subprocess.run(_as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(cluster.data), "-m",
                                    "immediate", "-w", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


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
