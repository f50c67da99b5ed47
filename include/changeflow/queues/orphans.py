"""Orphaned batch directories: written by a writer killed before its commit.

A batch becomes visible only when its catalog row commits, so a writer killed between
writing its files and committing leaves a ``batch-<id>`` directory that no row
references and no reader ever sees. :func:`find` lists such directories older than a
safe age (a younger one may belong to a writer that is about to commit), and
:func:`remove` deletes them. ``changeflow queues orphans`` runs both by hand, and
every purge sweeps a queue at most once per :data:`SWEEP_INTERVAL`.

File listing goes through pyarrow's file systems (local, ``s3://``/``s3a://``,
``hdfs://``), so neither command starts a JVM.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass

from sqlalchemy import select

from changeflow.queues.arrow_io import _filesystem
from changeflow.queues.catalog import QueueCatalog
from changeflow.state import schema

log = logging.getLogger(__name__)
B = schema.queue_batches
QT = schema.quarantine

#: A directory younger than this may belong to a writer still about to commit.
SAFE_AGE = 3600.0
#: Purge sweeps one queue for orphans at most this often (seconds).
SWEEP_INTERVAL = 600.0
_last_sweep: dict[tuple[str, str], float] = {}


@dataclass(frozen=True)
class Orphan:
    """A batch directory no catalog row references."""

    queue: str
    path: str
    age_seconds: float
    n_bytes: int


def find(catalog: QueueCatalog, queue: str, *, min_age: float = SAFE_AGE) -> list[Orphan]:
    """Unreferenced ``batch-*`` directories of a queue, older than ``min_age`` seconds."""
    root = catalog.queue_path(queue)
    fs, inner = _filesystem(root)
    from pyarrow import fs as pafs

    try:
        entries = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    except OSError as exc:
        log.warning("orphans: cannot list %s: %s", root, exc)
        return []
    with catalog.store.read() as conn:
        known = {r[0].rstrip("/").rsplit("/", 1)[-1] for r in conn.execute(
            select(B.c.path).where(B.c.queue == queue.lower(), B.c.path != ""))}
        known |= {r[0].rstrip("/").rsplit("/", 1)[-1] for r in conn.execute(
            select(QT.c.path).where(QT.c.queue == queue.lower()))}
    now = dt.datetime.now(dt.UTC)
    out = []
    for e in entries:
        if e.type != pafs.FileType.Directory or not e.base_name.startswith("batch-"):
            continue
        if e.base_name in known:
            continue
        files = fs.get_file_info(pafs.FileSelector(e.path, recursive=True))
        mtimes = [f.mtime for f in files if f.mtime is not None] or (
            [e.mtime] if e.mtime is not None else [])
        newest = max(mtimes) if mtimes else now
        if newest.tzinfo is None:
            newest = newest.replace(tzinfo=dt.UTC)
        age = (now - newest).total_seconds()
        if age < min_age:
            continue
        size = sum(f.size or 0 for f in files if f.type == pafs.FileType.File)
        out.append(Orphan(queue.lower(), f"{root.rstrip('/')}/{e.base_name}", age, size))
    return out


def remove(orphans: list[Orphan]) -> int:
    """Delete orphaned directories. Returns how many were removed."""
    n = 0
    for o in orphans:
        fs, inner = _filesystem(o.path)
        try:
            fs.delete_dir(inner)
            n += 1
        except FileNotFoundError:
            continue
        log.info("removed orphaned batch directory %s (%.0f s old)", o.path, o.age_seconds)
    return n


def sweep(catalog: QueueCatalog, queue: str, *, min_age: float = SAFE_AGE) -> int:
    """Remove a queue's orphans, at most once per :data:`SWEEP_INTERVAL` per process."""
    key = (catalog.store.url, queue.lower())
    now = time.monotonic()
    if now - _last_sweep.get(key, -SWEEP_INTERVAL) < SWEEP_INTERVAL:
        return 0
    _last_sweep[key] = now
    return remove(find(catalog, queue, min_age=min_age))
