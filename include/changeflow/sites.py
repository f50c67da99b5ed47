"""Runtime handles on the sites a pipeline declares.

A site bundles a state store, a staging root for queues and a target root. Opening a
pipeline creates its declared queues and registers the consumers its propagations and
applies need, so every job can start from a consistent catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from changeflow.config import PipelineConfig, Site
from changeflow.errors import ConfigError
from changeflow.fs import join
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
    from changeflow.storage import name_root

    name_root(spec.staging_root, f"site {name} staging root")  # named in storage errors
    name_root(spec.target_root, f"site {name} target root")
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
    """Create the declared queues and register the consumers (idempotent).

    A queue that was dropped is left dropped (its producers and consumers fail with
    :class:`~changeflow.errors.QueueDroppedError`), and a queue whose configured
    staging root changed is refused: its batches would be left behind.

    Raises:
        ConfigError: a declared queue lives elsewhere than its site's staging root.
    """
    for q in cfg.queues:
        rt = site(cfg, q.site)
        if not rt.catalog.create_queue(q.name, queue_table=q.queue_table,
                                       sort_order=q.sort_order,
                                       multiple_consumers=q.multiple_consumers):
            _check_location(cfg, rt, q.name)
    for kind, specs, attr in (("propagation", cfg.propagations, "source_queue"),
                              ("apply", cfg.applies, "queue")):
        for spec in specs:
            rt, qname = queue_site(cfg, getattr(spec, attr))
            if rt.catalog.exists(qname):
                rt.catalog.add_consumer(qname, consumer_name(kind, spec.name), kind)


def _check_location(cfg: PipelineConfig, rt: SiteRuntime, queue: str) -> None:
    props = rt.catalog.properties(queue)
    expected = join(rt.spec.staging_root, *queue.lower().split(".", 1))
    if props["status"] == "active" and props["storage_path"] != expected:
        raise ConfigError(
            f"queue {queue}@{rt.name} is stored at {props['storage_path']}, but the site's "
            f"staging_root now puts it at {expected}; changeflow does not move queues "
            f"silently. Restore staging_root, or move the directory and run "
            f"`changeflow queues relocate {queue}@{rt.name}`",
            file=cfg.source_path, key=f"sites.{rt.name}.staging_root")
