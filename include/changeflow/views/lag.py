"""End-to-end lag per path: source commit to applied, p50/p95 over the last hour.

A path is a source database and the apply its changes reach, with the route between
them (capture, queues, propagations) read from the configuration. The figures come
from the histograms apply runs record (:mod:`changeflow.obs.lag`): the lag of each
transaction from the commit time its LCRs carry to the moment its batch was applied.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import select

from changeflow.config import PipelineConfig
from changeflow.obs import lag as L
from changeflow.sites import queue_site
from changeflow.state import schema_obs, utcnow
from changeflow.views.common import aware, check_component

COLUMNS = (("path", "text"), ("transactions", "count"), ("p50", "duration"),
           ("p95", "duration"), ("max", "duration"), ("last_measured", "time",
                                                      "last measured"))


def route(cfg: PipelineConfig, database: str, apply: Any) -> list[str]:
    """The components from a source database to an apply: captures, then propagations."""
    target = cfg.qualify(apply.queue)
    caps = [c for c in cfg.captures if c.source.database.upper() == database.upper()]
    for cap in caps:
        paths: list[tuple[str, list[str]]] = [(cfg.qualify(cap.queue), [cap.name])]
        seen: set[str] = set()
        while paths:
            queue, steps = paths.pop(0)
            if queue == target:
                return [*steps, apply.name]
            seen.add(queue)
            for p in cfg.propagations:
                if cfg.qualify(p.source_queue) == queue and cfg.qualify(p.destination_queue) \
                        not in seen:
                    paths.append((cfg.qualify(p.destination_queue), [*steps, p.name]))
    return [apply.name]


def lag(cfg: PipelineConfig, component: str | None = None, *,
        window: float = 3600.0) -> list[dict[str, Any]]:
    """p50/p95/max lag per (source database, apply) over the last ``window`` seconds.

    Raises:
        UnknownComponentError: ``component`` is not an apply of the pipeline.
    """
    check_component(cfg, "apply", component)
    H = schema_obs.lag_hist
    since = utcnow() - dt.timedelta(seconds=window)
    out = []
    for spec in cfg.applies:
        if component is not None and spec.name != component:
            continue
        rt, _ = queue_site(cfg, spec.queue)
        with rt.store.read() as c:
            rows = c.execute(select(H).where(H.c.apply == spec.name, H.c.recorded_at >= since)
                             .order_by(H.c.source_database)).all()
        by_db: dict[str, list[Any]] = {}
        for r in rows:
            by_db.setdefault(r.source_database, []).append(r)
        for db, hist in sorted(by_db.items()):
            bins = L.merge(json.loads(r.bins) for r in hist)
            out.append({
                "path": " → ".join([db, *route(cfg, db, spec)]), "source_database": db,
                "apply": spec.name, "transactions": sum(int(r.n) for r in hist),
                "p50": L.quantile(bins, 0.50), "p95": L.quantile(bins, 0.95),
                "max": max(float(r.max_seconds) for r in hist),
                "last_measured": aware(max(r.recorded_at for r in hist)),
                "window_seconds": window,
            })
    return out
