"""A throwaway PostgreSQL cluster with ``wal_level=logical``, for tests and benchmarks.

The cluster listens on a free TCP port of 127.0.0.1 and on a Unix socket in its own
temporary directory. PostgreSQL refuses to run as root, so ``initdb`` and ``pg_ctl``
run as the ``postgres`` system user (created when missing) when the caller is root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import textwrap
from pathlib import Path
from typing import Any

PG_BIN = Path(os.environ.get("CHANGEFLOW_PG_BIN", "/usr/lib/postgresql/15/bin"))


def free_port() -> int:
    """A TCP port nobody listens on right now."""
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
    """A throwaway cluster: :meth:`start` it, use it, :meth:`stop` it (removes its files)."""

    def __init__(self, root: Path | None = None, port: int | None = None):
        self.root = root or Path(tempfile.mkdtemp(prefix="changeflow-pg-"))
        self.port = port or free_port()
        self.data = self.root / "data"
        self.sock = self.root / "sock"

    def start(self) -> PgCluster:
        """Initialise and start the cluster (fsync off: it is thrown away)."""
        if not (PG_BIN / "initdb").exists():
            raise RuntimeError(f"PostgreSQL 15 is not installed at {PG_BIN}; run make setup")
        os.chmod(self.root, 0o755)
        self.sock.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
        subprocess.run(_as_pg_user([str(PG_BIN / "initdb"), "-D", str(self.data),
                                    "--username=postgres", "-A", "trust", "-E", "UTF8",
                                    "--no-sync"]), check=True, capture_output=True)
        opts = (f"-c wal_level=logical -c port={self.port} -c listen_addresses=127.0.0.1 "
                f"-c unix_socket_directories={self.sock} -c max_replication_slots=20 "
                "-c max_wal_senders=10 -c fsync=off -c full_page_writes=off "
                "-c max_connections=100 -c shared_buffers=128MB -c max_wal_size=2GB")
        subprocess.run(_as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", opts,
                                    "-l", str(self.root / "server.log"), "-w", "start"]),
                       check=True, capture_output=True)
        return self

    def stop(self) -> None:
        """Stop the cluster and delete its files."""
        subprocess.run(_as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m",
                                    "immediate", "-w", "stop"]), capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        """A libpq URL of a database of this cluster (superuser ``postgres``)."""
        return f"postgresql://postgres@/{db}?host={self.sock}&port={self.port}"

    def argv(self, name: str, *args: str, db: str | None = None) -> list[str]:
        """The command line of a client tool (psql, pgbench, createdb) for a database."""
        argv = [str(PG_BIN / name), "-h", str(self.sock), "-p", str(self.port), "-U",
                "postgres", *args]
        return [*argv, db] if db else argv

    def tool(self, name: str, *args: str, db: str = "postgres", **kw: Any) -> str:
        """Run a client tool against a database and return its output."""
        done = subprocess.run(self.argv(name, *args, db=db), capture_output=True, text=True,
                              check=False, **kw)
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
        """An autocommit psycopg connection to a database."""
        import psycopg

        return psycopg.connect(self.url(db), autocommit=True)
