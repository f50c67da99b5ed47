"""Recent runs of every component, with their progress while they run."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from changeflow.config import PipelineConfig
from changeflow.state import schema_obs
from changeflow.views.common import SECTIONS, aware, check_component, sites

COLUMNS = (("component", "text"), ("run_id", "text", "run"), ("status", "state"),
           ("started_at", "time", "started"), ("seconds", "duration"),
           ("messages", "count"), ("batches", "count"), ("progress", "text"),
           ("error", "text"))


def _progress(text: str | None) -> str | None:
    if not text:
        return None
    p = json.loads(text)
    parts = []
    if p.get("tasks_total"):
        parts.append(f"{p['tasks_done']}/{p['tasks_total']} tasks")
    if "messages_committed" in p:
        parts.append(f"{p['messages_committed']:,} messages in {p['batches_committed']} batches")
    return ", ".join(parts) or f"{p.get('seconds', 0)} s"


def runs(cfg: PipelineConfig, component: str | None = None, *,
         limit: int = 20) -> list[dict[str, Any]]:
    """The latest runs (newest first) across the pipeline's sites, or of one component.

    Raises:
        UnknownComponentError: ``component`` is no capture, propagation or apply.
    """
    names = {c.name for s in SECTIONS.values() for c in getattr(cfg, s)}
    if component is not None and component not in names:
        check_component(cfg, "apply", component)
    R = schema_obs.runs
    out = []
    for rt in sites(cfg):
        with rt.store.read() as c:
            stmt = select(R).order_by(R.c.id.desc()).limit(limit)
            stmt = stmt.where(R.c.name == component) if component else \
                stmt.where(R.c.name.in_(sorted(names)))
            for r in c.execute(stmt):
                out.append({"component": f"{r.kind}:{r.name}", "site": rt.name,
                            "run_id": r.run_id, "status": r.status,
                            "started_at": aware(r.started_at), "ended_at": aware(r.ended_at),
                            "seconds": r.seconds, "messages": r.messages, "batches": r.batches,
                            "progress": _progress(r.progress), "error": r.error})
    return sorted(out, key=lambda r: r["started_at"], reverse=True)[:limit]
