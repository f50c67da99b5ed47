"""A pipeline resolved once per run, and passed down to the stages.

A run (a job, a window, a CLI command) starts from the configuration and resolves it
once: the sites' stores and queue catalogs (:mod:`changeflow.sites`), the declared
queues created and their consumers registered (:meth:`Pipeline.open`), each queue
reference turned into a :class:`QueueHandle` (its site, store, catalog and bare name),
the component's rule sets compiled into its filter (:meth:`Pipeline.client`). The
stages take what they need from the :class:`Pipeline` instead of looking the same
queue and store up again (as a dlt pipeline hands its load packages down).

Every stage also accepts a plain configuration, which it resolves itself (tests,
notebooks): :func:`resolve` returns a pipeline as it is.

>>> from changeflow.config import PipelineConfig
>>> cfg = PipelineConfig.model_validate({"sites": {"s1": {
...     "staging_root": "/tmp/s", "target_root": "/tmp/t", "state_url": "sqlite://",
...     "database": "DB1"}}, "queues": [{"name": "hr.q", "site": "s1"}]})
>>> pipe = resolve(cfg)
>>> resolve(pipe) is pipe, pipe.queue("hr.q").address
(True, 'hr.q@s1')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow.config import PipelineConfig
from changeflow.sites import SiteRuntime, consumer_name, open_pipeline, site

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from changeflow.queues.catalog import QueueCatalog
    from changeflow.state import StateStore

RuleFilter = Callable[["DataFrame"], "DataFrame"]


@dataclass(frozen=True)
class QueueHandle:
    """A configured queue, resolved: its site and its bare name."""

    ref: str
    site: SiteRuntime
    name: str

    @property
    def catalog(self) -> QueueCatalog:
        """The queue catalog of the queue's site."""
        return self.site.catalog

    @property
    def store(self) -> StateStore:
        """The state store of the queue's site."""
        return self.site.store

    @property
    def address(self) -> str:
        """``owner.name@site``."""
        return f"{self.name}@{self.site.name}"


@dataclass(frozen=True)
class Client:
    """A capture, propagation or apply bound to its configuration and rule sets."""

    kind: str
    name: str
    spec: Any
    rule_filter: RuleFilter | None

    @property
    def consumer(self) -> str:
        """The consumer name it uses on its source queue."""
        return consumer_name(self.kind, self.name)


class Pipeline:
    """A configuration resolved for one run (see the module docstring)."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self._opened = False
        self._queues: dict[str, QueueHandle] = {}
        self._clients: dict[tuple[str, str], Client] = {}

    def open(self) -> Pipeline:
        """Create the declared queues and register the consumers, once per run."""
        if not self._opened:
            open_pipeline(self.cfg)
            self._opened = True
        return self

    def site(self, name: str) -> SiteRuntime:
        """A declared site's store and queue catalog."""
        return site(self.cfg, name)

    def queue(self, ref: str) -> QueueHandle:
        """A queue reference (``owner.name`` or ``owner.name@site``), resolved once."""
        handle = self._queues.get(ref)
        if handle is None:
            spec = self.cfg.queue(ref)
            handle = self._queues[ref] = QueueHandle(ref, self.site(spec.site), spec.name)
        return handle

    def client(self, kind: str, name: str) -> Client:
        """A component with its rule-set filter (compiled once; None: no rule set)."""
        key = (kind, name)
        if key not in self._clients:
            from changeflow.clients import rule_filter

            self._clients[key] = Client(kind, name, self.cfg.component(kind, name),
                                        rule_filter(self.cfg, kind, name))
        return self._clients[key]


def resolve(cfg: PipelineConfig | Pipeline) -> Pipeline:
    """The pipeline of a run: ``cfg`` itself when it is resolved already."""
    return cfg if isinstance(cfg, Pipeline) else Pipeline(cfg)
