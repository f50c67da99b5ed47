"""User-message queues (AQ: ``DBA_QUEUES`` with ``AQ$`` states) and Meta Change Queue
listeners (seed 004), from the messaging and MCQ areas' own view functions."""

from __future__ import annotations

from typing import Any

from changeflow.config import PipelineConfig
from changeflow.views.common import UnknownComponentError, sites

USER_QUEUE_COLUMNS = (("queue", "text"), ("site", "text"), ("READY", "count", "ready"),
                      ("WAITING", "count", "waiting"), ("PROCESSED", "count", "processed"),
                      ("EXPIRED", "count", "expired"),
                      ("UNDELIVERABLE", "count", "undeliverable"),
                      ("oldest", "time", "oldest waiting"), ("subscribers", "count"))
LISTENER_COLUMNS = (("listener", "text"), ("pending", "count"), ("processed", "count"),
                    ("oldest_pending", "time", "oldest pending"),
                    ("last_mark", "time", "last mark"))


def user_queues(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """Every site's user-message queues with their depth per message state.

    Raises:
        UnknownComponentError: ``component`` is no queue of any site.
    """
    from changeflow.messaging import views as mviews

    out = []
    for rt in sites(cfg):
        for row in mviews.queues(rt.store, component):
            out.append({**row, "site": rt.name})
    if component is not None and not out:
        raise UnknownComponentError(f"no user-message queue named {component!r} in "
                                    f"{cfg.source_path or 'the pipeline'}")
    return out


def listeners(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """The Meta Change Queue's listeners: pending and processed entries, last mark.

    Raises:
        UnknownComponentError: ``component`` is not a listener.
    """
    from changeflow.mcq import views as qviews
    from changeflow.sites import site
    from changeflow.state import StateStore

    mcq = getattr(cfg, "mcq", None)
    if mcq is None:
        rows: list[dict[str, Any]] = []
    else:
        store = StateStore(mcq.state_url) if mcq.state_url else \
            site(cfg, mcq.site or next(iter(cfg.sites))).store
        rows = qviews.listener_rows(store)
    if component is not None:
        rows = [r for r in rows if r.get("listener") == component]
        if not rows:
            raise UnknownComponentError(f"no MCQ listener named {component!r} in "
                                        f"{cfg.source_path or 'the pipeline'}")
    return rows
