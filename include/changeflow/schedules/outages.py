"""Destination checks made before every propagation pass: outages named, not misread.

A pass that cannot write its destination must fail as a *destination outage*
(transient: counted, backed off, alerted, finally auto-disabling the schedule), with a
message naming the site, the queue and the path, rather than surfacing later as a
misleading "batch is corrupt or missing" about the source. Checked here, cheaply,
before Spark starts on the pass:

- the destination site's staging root, when it is a local path: it must be a
  writable directory; it may be absent only while the destination queue holds no
  staged batch (it is then created by the first write). A root that vanished under
  live batches is an unmounted volume or a deleted directory, never something to
  re-create silently;
- the destination state store answers (an unreachable one is a
  :class:`~changeflow.errors.DestinationUnavailableError` naming it).

Object-store roots (``s3a://`` and friends) are checked by the write itself:
:func:`changeflow.queues.io.guard` names the destination when a write fails.
"""

from __future__ import annotations

import os
import tempfile
from urllib.parse import urlparse

from changeflow.config import PipelineConfig
from changeflow.errors import DestinationUnavailableError, QueueNotFoundError
from changeflow.fs import local_path
from changeflow.propagation.transports import transport_for
from changeflow.sites import queue_site


def check_destination(cfg: PipelineConfig, name: str) -> None:
    """Raise :class:`DestinationUnavailableError` when a propagation's destination is down.

    Args:
        name: the propagation.
    """
    spec = cfg.component("propagation", name)
    transport = transport_for(cfg, spec)  # e.g. a remote IDAP endpoint: its own probe
    if transport is not None:
        return transport.probe(cfg, spec) if transport.probe is not None else None
    ref = spec.destination_queue
    try:
        rt, queue = queue_site(cfg, ref)
        live = rt.catalog.info(queue).batches if rt.catalog.exists(queue) else 0
    except QueueNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 (any failure to reach the store is an outage)
        site = cfg.queue(ref).site
        raise DestinationUnavailableError(
            f"destination site {site} (queue {ref}): state store "
            f"{_safe_url(cfg.sites[site].state_url)} unreachable: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from exc
    root = local_path(rt.spec.staging_root)
    if root is None:
        return
    where = f"destination site {rt.name} (queue {ref}): staging root {root}"
    if not os.path.exists(root):
        if live:
            raise DestinationUnavailableError(
                f"{where} is missing, but the queue holds {live} staged batches "
                "(unmounted volume or deleted directory?)")
        return
    if not os.path.isdir(root):
        raise DestinationUnavailableError(f"{where} is not a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=root, prefix=".changeflow-probe-"):
            pass
    except OSError as exc:
        raise DestinationUnavailableError(f"{where} is not writable: {exc}") from exc


def _safe_url(url: str) -> str:
    """A state URL without its password.

    >>> _safe_url("postgresql+psycopg://u:secret@h:5432/db")
    'postgresql+psycopg://u:***@h:5432/db'
    """
    parsed = urlparse(url)
    if parsed.password:
        return url.replace(f":{parsed.password}@", ":***@", 1)
    return url
