"""How a propagation reaches its destination: transports register here, by name.

Propagation itself moves LCR batches between two queues it can open (:mod:`changeflow.sites`).
What else a pass does is plugged in, so that the base knows nothing of its users:

- a :class:`Transport` takes a whole pass over when it *reaches* the destination (the
  HTTP transport of :mod:`changeflow.idap.propagate` reaches queues at remote IDAP sites,
  Oracle's propagation over a database link with an HTTP connect string), and may
  *probe* the destination before a pass (:mod:`changeflow.schedules.outages`);
- a :class:`Carrier` carries more after the queue-to-queue pass over a local destination
  (the user messages addressed to it, :mod:`changeflow.messaging.propagate`).

Both are entry points of the ``changeflow.propagation`` group (``pyproject.toml``),
loaded on first use, or registered in-process with :func:`register`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from changeflow.config import PipelineConfig, PropagationSpec
    from changeflow.pipeline import Pipeline
    from changeflow.propagation import PropagationResult
    from changeflow.state.leases import Lease

log = logging.getLogger(__name__)

GROUP = "changeflow.propagation"


@dataclass(frozen=True)
class Transport:
    """A way to a destination that local queues are not.

    Attributes:
        name: the entry point's name.
        reaches: ``reaches(cfg, spec)``: whether this transport carries the propagation.
        propagate: ``propagate(spark, pipe, spec, lease, rule_filter, max_batches)``: one
            pass under the propagation's lease (``pipe``: the run's resolved
            :class:`~changeflow.pipeline.Pipeline`), returning its ``PropagationResult``.
        probe: ``probe(cfg, spec)``: raise ``DestinationUnavailableError`` when the
            destination does not answer (None: nothing to probe before a pass).
    """

    name: str
    reaches: Callable[[PipelineConfig, PropagationSpec], bool]
    propagate: Callable[..., PropagationResult]
    probe: Callable[[PipelineConfig, PropagationSpec], None] | None = None


@dataclass(frozen=True)
class Carrier:
    """What a pass over a local destination carries after the LCR batches.

    Attributes:
        name: the entry point's name.
        carry: ``carry(pipe, spec, lease, result)``: adds what it carried to ``result``
            and returns it (``pipe``: the run's resolved pipeline).
    """

    name: str
    carry: Callable[[Pipeline, PropagationSpec, Lease, PropagationResult],
                    PropagationResult]


_PLUGINS: dict[str, Transport | Carrier] = {}
_LOADED = False


def register(plugin: Transport | Carrier) -> None:
    """Add (or replace) a transport or a carrier."""
    _PLUGINS[plugin.name] = plugin


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    try:
        found: Any = metadata.distribution("changeflow").entry_points.select(group=GROUP)
    except metadata.PackageNotFoundError:  # run from a source tree: any installed ones
        found = metadata.entry_points(group=GROUP)
    if not found:
        log.warning("no %s entry points: is changeflow installed (pip install -e .)?", GROUP)
    for ep in found:
        _PLUGINS.setdefault(ep.name, ep.load())


def transport_for(cfg: PipelineConfig, spec: PropagationSpec) -> Transport | None:
    """The transport that reaches a propagation's destination (None: a local queue)."""
    _load()
    for plugin in sorted(_PLUGINS.values(), key=lambda p: p.name):
        if isinstance(plugin, Transport) and plugin.reaches(cfg, spec):
            return plugin
    return None


def carriers() -> list[Carrier]:
    """Every carrier, by name."""
    _load()
    return sorted((p for p in _PLUGINS.values() if isinstance(p, Carrier)),
                  key=lambda p: p.name)
