"""Opening a messaging session: :func:`connect` (a store, a URL or a pipeline file).

With a pipeline configuration, its ``messaging`` section is applied to the site's store
first (:mod:`changeflow.messaging.declare`) and gives the session's settings, and its
rules file gives messaging clients their rule sets.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from changeflow.messaging import dequeue as DQ
from changeflow.messaging.model import agent_name
from changeflow.messaging.session import RulesLookup, Session, Settings
from changeflow.state import StateStore

if TYPE_CHECKING:
    from changeflow.config import PipelineConfig
    from changeflow.pipeline import Pipeline


def connect(target: PipelineConfig | Pipeline | StateStore | str, user: str | None = None, *,
            site: str | None = None, lock_timeout: float | None = None,
            max_message_size: int | None = None, poll_max: float | None = None,
            rules: RulesLookup | None = None) -> Session:
    """Open a messaging session.

    Args:
        target: a pipeline configuration or the run's resolved
            :class:`~changeflow.pipeline.Pipeline` (its ``messaging`` section is applied
            to the site's store first, and its rules file gives messaging clients their rule
            sets), a :class:`~changeflow.state.StateStore`, or a state-store URL.
        user: the database user the session acts as (secure queues check it).
        site: the site to connect to, when the configuration declares several.
        lock_timeout, max_message_size, poll_max: override :class:`Settings`.
        rules: messaging clients' rule sets by name (default: the pipeline's rules file).
    """
    overrides: dict[str, Any] = {k: v for k, v in (
        ("lock_timeout", lock_timeout), ("max_message_size", max_message_size),
        ("poll_max", poll_max)) if v is not None}
    if isinstance(target, (StateStore, str)):
        store = target if isinstance(target, StateStore) else StateStore(target)
        return Session(store, user=user, site=site, rules=rules,
                       settings=replace(Settings(), **overrides))
    from changeflow.messaging.declare import setup, site_of
    from changeflow.pipeline import resolve

    pipe = resolve(target)
    name, rt = site_of(pipe, site)
    setup(pipe)
    cfg = pipe.cfg
    mc = cfg.messaging
    settings = replace(Settings(lock_timeout=mc.lock_timeout,
                                max_message_size=mc.max_message_size,
                                buffer_max_bytes=mc.buffer_max_bytes,
                                buffer_spill_after=mc.buffer_spill_after), **overrides)
    return Session(rt.store, user=user, site=name, rules=rules or _config_rules(cfg),
                   settings=settings)


def _config_rules(cfg: PipelineConfig) -> RulesLookup:
    def lookup(consumer: str) -> DQ.ClientRules | None:
        from changeflow.clients import registry

        reg = registry(cfg)
        if reg is None:
            return None
        for name, client in reg.clients.items():
            if agent_name(name) == consumer and client.type == "dequeue":
                return reg.client(name).evaluate
        return None

    return lookup
