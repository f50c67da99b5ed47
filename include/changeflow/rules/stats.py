"""Which rules matched how many messages in a client's last run (``DBA_STREAMS_RULES``).

A client's filter (:func:`observed`) counts, during the stage's own Spark action (a
``DataFrame.observe``, no extra pass), the messages it evaluated and, per rule of its
positive and negative rule sets, those for which the rule was TRUE. The run recorder
(:mod:`changeflow.obs.runs`) stores them once the run is over. Clients with more than
:data:`MAX_RULES` rules count messages in and out only (each counted rule is one
more expression per message).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow import logs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from changeflow.rules import RuleSetPair

MAX_RULES = 64
Filter = Callable[["DataFrame"], "DataFrame"]


@dataclass
class Pending:
    """An observation of one client's filter, waiting for the stage's action."""

    kind: str
    client: str
    observation: Any
    rules: list[tuple[str, str, str]]  # (alias, rule set, rule, polarity) without alias
    polarity: dict[str, str] = field(default_factory=dict)


# keyed by (kind, client, run id): only a recorded run (one with a run id in its log
# context, see :mod:`changeflow.obs.runs`) collects its counts, and never another run's
_PENDING: dict[tuple[str, str, str], list[Pending]] = {}
_LOCK = threading.Lock()


def observed(kind: str, client: str, pair: RuleSetPair, inner: Filter) -> Filter:
    """``inner`` (the client's filter) with per-rule match counts observed on its input."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from changeflow.rules.spark_compile import compile_condition

    sets = [(rs, pol) for rs, pol in ((pair.positive, "positive"), (pair.negative, "negative"))
            if rs is not None]
    rules = [(rs.name, r, pol) for rs, pol in sets for r in rs.rules]
    counted = rules if len(rules) <= MAX_RULES else []

    def run(df: DataFrame) -> DataFrame:
        run_id = logs.current().get("run_id")
        if run_id is None:  # not a recorded run: nobody would collect the counts
            return inner(df)
        obs = Observation(f"rules_{uuid.uuid4().hex}")
        exprs = [F.count(F.lit(1)).alias("evaluated")]
        names = []
        for i, (set_name, rule, pol) in enumerate(counted):
            cond = compile_condition(rule.tree, guard=True)
            if rule.message_type is not None:
                cond = (F.col("kind") == "USER") & (
                    F.upper(F.col("msg_type_name")) == rule.message_type.upper()) & cond
            exprs.append(F.sum(F.when(cond, 1).otherwise(0)).alias(f"r{i}"))
            names.append((set_name, rule.name, pol))
        with _LOCK:
            _PENDING.setdefault((kind, client, str(run_id)), []).append(
                Pending(kind, client, obs, names))  # type: ignore[arg-type]
        return inner(df.observe(obs, *exprs))

    return run


def recording() -> bool:
    """Whether this is a recorded run (one whose filters' counts are collected)."""
    return logs.current().get("run_id") is not None


@dataclass
class _Made:
    """An observation made without Spark: its values, as ``Observation.get`` gives them."""

    get: dict[str, Any]


def note(kind: str, client: str, pair: RuleSetPair,
         messages: list[tuple[dict[str, Any], int]]) -> None:
    """Note counts made without Spark (rule sets decided per distinct message, see
    :mod:`changeflow.rules.arrow_filter`): ``messages`` holds each distinct message and
    how many rows have it. Counted as :func:`observed` counts: a rule matches a message
    when its condition is TRUE for it."""
    run_id = logs.current().get("run_id")
    if run_id is None:
        return
    sets = [(rs, pol) for rs, pol in ((pair.positive, "positive"), (pair.negative, "negative"))
            if rs is not None]
    rules = [(rs.name, r, pol) for rs, pol in sets for r in rs.rules]
    counted = rules if len(rules) <= MAX_RULES else []
    values: dict[str, Any] = {"evaluated": sum(n for _, n in messages)}
    for i, (_, rule, _) in enumerate(counted):
        values[f"r{i}"] = sum(n for m, n in messages if rule.evaluate(m) is True)
    names = [(set_name, rule.name, pol) for set_name, rule, pol in counted]
    with _LOCK:
        _PENDING.setdefault((kind, client, str(run_id)), []).append(
            Pending(kind, client, _Made(values), names))  # type: ignore[arg-type]


def collect(kind: str, client: str, run_id: str,
            timeout: float = 3.0) -> list[dict[str, Any]] | None:
    """The counts of the client's observed filters in run ``run_id`` (None: none ran).

    An observation whose action never ran (the run failed first) is dropped after
    ``timeout`` seconds.
    """
    with _LOCK:
        pending = _PENDING.pop((kind, client, run_id), [])
    if not pending:
        return None
    totals: dict[tuple[str, str, str], int] = {}
    evaluated = 0
    for p in pending:
        got: dict[str, Any] = {}

        def wait(p: Pending = p, got: dict[str, Any] = got) -> None:
            got.update(p.observation.get)

        t = threading.Thread(target=wait, daemon=True)
        t.start()
        t.join(timeout)
        if not got:
            continue
        evaluated += int(got.get("evaluated") or 0)
        for i, key in enumerate(p.rules):
            totals[key] = totals.get(key, 0) + int(got.get(f"r{i}") or 0)  # type: ignore[index]
    return [{"rule_set": k[0], "rule": k[1], "polarity": k[2], "matched": v,
             "evaluated": evaluated} for k, v in totals.items()] or \
        [{"rule_set": None, "rule": None, "polarity": None, "matched": None,
          "evaluated": evaluated}]
