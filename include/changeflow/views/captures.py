"""Captures, like Oracle's ``V$STREAMS_CAPTURE`` and ``DBA_CAPTURE``.

One row per capture: its source, position (LSN, snapshot number or Debezium
position), last capture time, lag behind the source, messages captured and state.
The lag is measured where it is cheap: pending snapshots or Debezium files on a local
root; with ``probe=True`` a PostgreSQL source is asked for its current WAL position
(bytes behind).
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any

from sqlalchemy import select

from changeflow.config import PipelineConfig
from changeflow.state import schema
from changeflow.views.common import aware, check_component, component_site, last_runs, state_of

COLUMNS = (("capture", "text"), ("source_type", "text", "type"), ("source", "text"),
           ("queue", "text"), ("position", "text"), ("last_capture_time", "time",
                                                     "last capture"),
           ("lag", "text"), ("messages_captured", "count", "messages"), ("state", "state"))


def _position(kind: str, rows: Any) -> tuple[str | None, Any]:
    if not rows:
        return None, None
    if kind == "postgres":
        slot = [r for r in rows if r.source_object.startswith("slot:")]
        return (slot[0].position, slot[0].updated_at) if slot else (None, None)
    if kind == "debezium":
        pos = [r for r in rows if r.source_object == "debezium:position"]
        files = [r for r in rows if r.source_object.startswith("file:")]
        when = max((r.updated_at for r in rows), default=None)
        text = f"{pos[0].position} ({len(files)} files)" if pos else f"{len(files)} files"
        return text, when
    best = max(rows, key=lambda r: int(r.position))
    return f"snapshot {best.position}", max(r.updated_at for r in rows)


def _local(root: str) -> str | None:
    path = root.removeprefix("file:")
    return path if "://" not in path and os.path.isdir(path) else None


def _lag(spec: Any, rows: Any, probe: bool) -> str | None:
    src = spec.source
    if src.type == "snapshot":
        root = _local(src.root)
        if root is None:
            return None
        done = {r.source_object: int(r.position) for r in rows}
        behind = 0
        for t in src.tables:
            d = os.path.join(root, t.name.lower())
            snaps = [int(n[5:]) for n in os.listdir(d) if n.startswith("snap=")] \
                if os.path.isdir(d) else []
            behind = max(behind, len([s for s in snaps if s > done.get(t.name, 0)]))
        return f"{behind} snapshots"
    if src.type == "debezium":
        root = _local(src.root)
        if root is None:
            return None
        captured = {r.source_object[5:].removeprefix("file:") for r in rows
                    if r.source_object.startswith("file:")}
        pending = sum(1 for d, _, files in os.walk(root) for f in files
                      if fnmatch.fnmatch(f, src.pattern) and not f.startswith((".", "_"))
                      and os.path.join(d, f) not in captured)
        return f"{pending} files"
    if src.type == "postgres" and probe:
        return _pg_lag(src, rows)
    return None


def _pg_lag(src: Any, rows: Any) -> str | None:
    from changeflow.pgconn import connect, lsn_to_int, resolve_url

    slot = [r for r in rows if r.source_object.startswith("slot:")]
    try:
        with connect(resolve_url(src), application_name="changeflow-views",
                     attempts=1) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        current = str(row[0]) if row else "0/0"
    except Exception as exc:  # noqa: BLE001  (a view shows what it can)
        return f"unknown ({type(exc).__name__})"
    done = int(slot[0].commit_scn) if slot else 0
    return f"{max(0, lsn_to_int(current) - done):,} bytes"


def captures(cfg: PipelineConfig, component: str | None = None, *,
             probe: bool = False) -> list[dict[str, Any]]:
    """The captures of a pipeline (or one), as ``V$STREAMS_CAPTURE`` shows them.

    Raises:
        UnknownComponentError: ``component`` is not a capture of the pipeline.
    """
    check_component(cfg, "capture", component)
    CP = schema.capture_progress
    out = []
    runs_by_site: dict[str, dict[str, dict[str, Any]]] = {}
    for spec in cfg.captures:
        if component is not None and spec.name != component:
            continue
        rt = component_site(cfg, "capture", spec)
        runs = runs_by_site.setdefault(rt.name, last_runs(rt, "capture"))
        with rt.store.read() as c:
            rows = c.execute(select(CP).where(CP.c.capture == spec.name)).all()
        position, when = _position(spec.source.type, rows)
        src = spec.source
        where = (f"slot {src.slot}" if src.type == "postgres" else
                 f"{src.bootstrap_servers} {','.join(src.topics)}" if src.type == "kafka"
                 else src.root)
        run = runs.get(spec.name)
        out.append({
            "capture": spec.name, "source_type": src.type, "source": f"{src.database}: {where}",
            "database": src.database, "queue": cfg.qualify(spec.queue), "position": position,
            "last_capture_time": aware(when), "lag": _lag(spec, rows, probe),
            "messages_captured": run["total_messages"] if run else 0,
            "last_run": aware(run["started_at"]) if run else None,
            "last_error": run["error"] if run else None,
            "state": state_of(run, "CAPTURING CHANGES"),
        })
    return out
