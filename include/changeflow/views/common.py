"""What every dictionary view shares: the sites of a pipeline, component checks, times."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, select

from changeflow.config import PipelineConfig
from changeflow.errors import TerminalError
from changeflow.sites import SiteRuntime, queue_site, site
from changeflow.state import schema_obs

SECTIONS = {"capture": "captures", "propagation": "propagations", "apply": "applies"}


class UnknownComponentError(TerminalError):
    """A view was asked for a component the pipeline does not declare."""


def check_component(cfg: PipelineConfig, kind: str, name: str | None) -> None:
    """Refuse a component name the pipeline does not have, listing the ones it has.

    Raises:
        UnknownComponentError: naming the kind, the name and the pipeline file.
    """
    if name is None:
        return
    if kind == "queue":
        known = [f"{q.name}@{q.site}" for q in cfg.queues]
        if name.lower() in known or any(name.lower() == q.name for q in cfg.queues):
            return
    else:
        known = [c.name for c in getattr(cfg, SECTIONS[kind])]
        if name in known:
            return
    raise UnknownComponentError(
        f"no {kind} named {name!r} in {cfg.source_path or 'the pipeline'} (it has: "
        f"{', '.join(known) or 'none'})")


def aware(t: dt.datetime | None) -> dt.datetime | None:
    """A stored time as an aware UTC time (SQLite hands back naive ones)."""
    return t.replace(tzinfo=dt.UTC) if t is not None and t.tzinfo is None else t


def component_site(cfg: PipelineConfig, kind: str, spec: Any) -> SiteRuntime:
    """The site whose store holds a component's runs and positions."""
    ref = spec.source_queue if kind == "propagation" else spec.queue
    return queue_site(cfg, ref)[0]


def last_runs(rt: SiteRuntime, kind: str) -> dict[str, dict[str, Any]]:
    """The latest run of each component of a kind in a site's store, with totals."""
    R = schema_obs.runs
    with rt.store.read() as c:
        latest = select(R.c.name, func.max(R.c.id).label("id")).where(R.c.kind == kind) \
            .group_by(R.c.name).subquery()
        rows = c.execute(select(R).join(latest, R.c.id == latest.c.id)).all()
        totals = dict(c.execute(select(R.c.name, func.coalesce(func.sum(R.c.messages), 0))
                                .where(R.c.kind == kind, R.c.status == "succeeded")
                                .group_by(R.c.name)).all())
    out = {}
    for r in rows:
        m = dict(r._mapping)
        m["total_messages"] = int(totals.get(r.name, 0))
        out[r.name] = m
    return out


def state_of(run: dict[str, Any] | None, running: str) -> str:
    """A component's state from its latest run."""
    if run is None:
        return "NEVER RUN"
    if run["status"] == "running":
        return running
    return "ERROR" if run["status"] == "failed" else "IDLE"


def sites(cfg: PipelineConfig) -> list[SiteRuntime]:
    """The runtime of every declared site."""
    return [site(cfg, name) for name in cfg.sites]
