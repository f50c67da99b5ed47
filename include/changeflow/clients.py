"""Rules-engine clients of a pipeline: which rule sets a capture, propagation or apply uses.

A component's rule sets come from its ``rule_sets`` entry in the pipeline file, or else
from the client of the same name in the rules file (as ``changeflow rules add-*``
writes it). With neither, the component has no rule set and takes every message
(seed 000, Table 5-1).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

from changeflow.config import PipelineConfig
from changeflow.errors import ChangeflowError, ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from changeflow.rules import RuleRegistry, RuleSetPair

SECTIONS = {"capture": "captures", "propagation": "propagations", "apply": "applies"}


@cache
def _registry(path: str, mtime: float) -> RuleRegistry:
    from changeflow.rules import load_rules

    return load_rules(path)


def registry(cfg: PipelineConfig) -> RuleRegistry | None:
    """The pipeline's rules registry, or None when it has no rules file."""
    import os

    if not cfg.rules:
        return None
    mtime = os.path.getmtime(cfg.rules) if os.path.exists(cfg.rules) else 0.0
    return _registry(cfg.rules, mtime)


def rule_sets(cfg: PipelineConfig, kind: str, name: str) -> RuleSetPair | None:
    """The positive and negative rule sets of a component (None: no rule set at all)."""
    from changeflow.rules import RuleSetPair

    spec = cfg.component(kind, name)
    refs = spec.rule_sets
    reg = registry(cfg)
    if reg is None:
        if refs.positive or refs.negative:
            raise ConfigError(f"{kind} {name} names rule sets but no 'rules' file is configured",
                              file=cfg.source_path, key="rules")
        return None
    if refs.positive or refs.negative:
        return RuleSetPair(
            positive=reg.rule_set(refs.positive) if refs.positive else None,
            negative=reg.rule_set(refs.negative) if refs.negative else None,
        )
    if name in reg.clients:
        return reg.client(name)
    return None


def rule_filter(
    cfg: PipelineConfig, kind: str, name: str
) -> Callable[[DataFrame], DataFrame] | None:
    """The DataFrame filter of a component's rule sets (None when it has none)."""
    pair = rule_sets(cfg, kind, name)
    if pair is None or (pair.positive is None and pair.negative is None):
        return None
    from changeflow.rules.stats import observed
    from changeflow.transform.client import transforming_rules, with_transformations

    run = observed(kind, name, pair, with_transformations(pair))
    if not transforming_rules(pair):
        # Stages without Spark (log-based capture) may decide simple rule sets over
        # Arrow instead (changeflow.rules.arrow_filter), noting whose counts they are.
        run.rule_sets = pair  # type: ignore[attr-defined]
        run.client = (kind, name)  # type: ignore[attr-defined]
    return run


def check_references(cfg: PipelineConfig) -> None:
    """Refuse, at load time, rule sets that a component names but that are not defined.

    Raises:
        ConfigError: naming the pipeline file and the component's key.
    """
    for kind, section in SECTIONS.items():
        for i, spec in enumerate(getattr(cfg, section)):
            try:
                rule_sets(cfg, kind, spec.name)
            except ConfigError:
                raise
            except ChangeflowError as exc:
                raise ConfigError(str(exc), file=cfg.source_path,
                                  key=f"{section}.{i}.rule_sets") from exc
