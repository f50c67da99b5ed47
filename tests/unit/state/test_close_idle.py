"""``changeflow.state.close_idle``: idle connections closed, the stores still usable."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from sqlalchemy import text

from changeflow.state import StateStore, close_idle


def _open_files(path: Path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since listed
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(path))
    return n


def test_idle_connections_close_and_the_store_reopens(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    with store.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
    assert _open_files(tmp_path) > 0
    close_idle()
    assert _open_files(tmp_path) == 0
    with store.read() as conn:
        assert conn.execute(text("SELECT x FROM t")).scalar() == 1


def test_an_in_memory_store_keeps_its_database() -> None:
    store = StateStore("sqlite://")
    with store.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS kept (x INTEGER)"))
    close_idle()
    with store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM kept")).scalar() == 0
