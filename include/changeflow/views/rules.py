"""Rules and rule sets per client, like ``DBA_STREAMS_RULES``, with last-run matches."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from changeflow.config import PipelineConfig
from changeflow.state import schema_obs
from changeflow.views.common import SECTIONS, aware, check_component, component_site

COLUMNS = (("client", "text"), ("client_type", "text", "type"),
           ("rule_set", "text", "rule set"), ("rule_set_type", "text", "polarity"),
           ("rule", "text"), ("rule_type", "text", "rule type"),
           ("matched", "count", "matched (last run)"),
           ("evaluated", "count", "evaluated (last run)"), ("condition", "text"))


def _stats(rt: Any, kind: str, client: str) -> dict[tuple[str, str], dict[str, Any]]:
    S = schema_obs.rule_stats
    with rt.store.read() as c:
        rows = c.execute(select(S).where(S.c.client == client, S.c.kind == kind)).all()
    return {(r.rule_set, r.rule): dict(r._mapping) for r in rows}


def rules(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """One row per rule of each client's positive and negative rule sets.

    ``matched`` is how many messages the rule was TRUE for in the client's last run
    (``None`` when not counted: never run, or more rules than
    :data:`changeflow.rules.stats.MAX_RULES`); ``evaluated`` how many it saw.

    Raises:
        UnknownComponentError: ``component`` is no capture, propagation or apply.
    """
    from changeflow.clients import rule_sets
    from changeflow.rules import transforms as model

    if component is not None and not any(
            component in [c.name for c in getattr(cfg, s)] for s in SECTIONS.values()):
        check_component(cfg, "apply", component)
    out = []
    for kind, section in SECTIONS.items():
        for spec in getattr(cfg, section):
            if component is not None and spec.name != component:
                continue
            pair = rule_sets(cfg, kind, spec.name)
            stats = _stats(component_site(cfg, kind, spec), kind, spec.name)
            evaluated = next((s["evaluated"] for s in stats.values()), None)
            sets = [] if pair is None else [(rs, p) for rs, p in (
                (pair.positive, "POSITIVE"), (pair.negative, "NEGATIVE")) if rs is not None]
            if not sets:
                out.append({"client": spec.name, "client_type": kind, "rule_set": None,
                            "rule_set_type": None, "rule": None, "rule_type": None,
                            "condition": "(no rule set: every message)", "matched": None,
                            "evaluated": evaluated})
            for rs, polarity in sets:
                for rule in rs.rules:
                    s = stats.get((rs.name, rule.name))
                    steps, fn = model.of_rule(rule)
                    out.append({
                        "client": spec.name, "client_type": kind, "rule_set": rs.name,
                        "rule_set_type": polarity, "rule": rule.name,
                        "rule_type": rule.rule_type, "condition": rule.condition,
                        "action_context": {k: v for k, v in rule.action_context.items()
                                           if k != model.INTERNAL_KEY} or None,
                        "transformations": [st.describe() for st in steps]
                        + ([f"function {fn}"] if fn else []),
                        "matched": s["matched"] if s and s["matched"] >= 0 else None,
                        "evaluated": s["evaluated"] if s else evaluated,
                        "last_run": aware(s["recorded_at"]) if s else None,
                    })
    return out
