"""Runtime handles on the sites a pipeline declares.

A site bundles a state store, a staging root for queues and a target root. Opening a
pipeline creates its declared queues and registers the consumers its propagations and
applies need, so every job can start from a consistent catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from changeflow.config import PipelineConfig, Site
from changeflow.queues.catalog import QueueCatalog
from changeflow.state import StateStore


@dataclass(frozen=True)
class SiteRuntime:
    """One site's store and queue catalog."""

    name: str
    spec: Site
    store: StateStore
    catalog: QueueCatalog


@cache
def _open(name: str, spec: Site) -> SiteRuntime:
    store = StateStore(spec.state_url)
    return SiteRuntime(name, spec, store, QueueCatalog(store, spec.staging_root))


def site(cfg: PipelineConfig, name: str) -> SiteRuntime:
    """The runtime of a declared site."""
    return _open(name, cfg.sites[name])


def queue_site(cfg: PipelineConfig, ref: str) -> tuple[SiteRuntime, str]:
    """The site holding a queue reference, and the queue's bare name."""
    q = cfg.queue(ref)
    return site(cfg, q.site), q.name


def consumer_name(kind: str, name: str) -> str:
    """The consumer name a propagation or apply uses on its source queue."""
    return f"{kind}:{name}"


def open_pipeline(cfg: PipelineConfig) -> None:
    """Create the declared queues and register the consumers (idempotent)."""
    for q in cfg.queues:
        site(cfg, q.site).catalog.create_queue(
            q.name,
            queue_table=q.queue_table,
            sort_order=q.sort_order,
            multiple_consumers=q.multiple_consumers,
        )
    for p in cfg.propagations:
        rt, qname = queue_site(cfg, p.source_queue)
        rt.catalog.add_consumer(qname, consumer_name("propagation", p.name), "propagation")
    for a in cfg.applies:
        rt, qname = queue_site(cfg, a.queue)
        rt.catalog.add_consumer(qname, consumer_name("apply", a.name), "apply")
