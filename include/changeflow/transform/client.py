"""Running a client's rule-based transformations after its rule sets (the stage hook).

:func:`with_transformations` composes a client's rule-set filter with the
transformations of the rules of its positive rule set: each message that passes is
transformed by the first rule (in rule-set order) that is TRUE for it and has
transformations (Oracle leaves the choice among several such rules undefined;
changeflow makes it the first). A client whose rules declare none gets its plain
filter back, at no cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from changeflow.rules import transforms as model
from changeflow.transform import declarative, function

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from changeflow.rules import Rule, RuleSetPair

Filter = Callable[["DataFrame"], "DataFrame"]


def transforming_rules(pair: RuleSetPair) -> list[tuple[Rule, list[model.Step], Any]]:
    """The positive rule set's rules with transformations, in order, with their steps and
    loaded function (imported now: a missing one is refused before any data is read)."""
    out: list[tuple[Rule, list[model.Step], Any]] = []
    if pair.positive is None:
        return out
    for rule in pair.positive.rules:
        steps, fn_path = model.of_rule(rule)
        if steps or fn_path:
            fn = function.load(fn_path, rule=rule.name) if fn_path else None
            out.append((rule, steps, fn))
    return out


def selector(rules: list[tuple[Rule, list[model.Step], Any]]) -> Any:
    """A Spark column: the name of the first transforming rule TRUE for the message."""
    from pyspark.sql import functions as F

    from changeflow.rules.spark_compile import compile_condition

    out = None
    for rule, _, _ in rules:
        cond = compile_condition(rule.tree, guard=True)
        if rule.message_type is not None:
            cond = ((F.col("kind") == "USER")
                    & (F.upper(F.col("msg_type_name")) == rule.message_type.upper()) & cond)
        out = F.when(cond, F.lit(rule.name)) if out is None else out.when(cond,
                                                                          F.lit(rule.name))
    return out


def transform(df: DataFrame, rules: list[tuple[Rule, list[model.Step], Any]]) -> DataFrame:
    """Apply each rule's transformations to the rows it selected (column ``RULE``)."""
    from pyspark.sql import functions as F

    for rule, steps, _ in rules:
        df = declarative.apply_steps(df, rule.name, steps)
    fns = [(r.name, fn) for r, _, fn in rules if fn is not None]
    if not fns:
        return df
    columns = [c for c in df.columns if c != declarative.RULE]
    rest = df.where(~F.col(declarative.RULE).isin(*[n for n, _ in fns])
                    | F.col(declarative.RULE).isNull()).select(*columns)
    for name, fn in fns:
        mine = df.where(F.col(declarative.RULE) == name).select(*columns)
        rest = rest.unionByName(function.apply_function(mine, fn))
    return rest.withColumn(declarative.RULE, F.lit(None).cast("string"))


def with_transformations(pair: RuleSetPair) -> Filter:
    """The client's filter followed by its transformations (just the filter without any)."""
    from pyspark.sql import functions as F

    rules = transforming_rules(pair)
    if not rules:
        return pair.filter
    pick = selector(rules)

    def run(df: DataFrame) -> DataFrame:
        columns = list(df.columns)
        passed = pair.filter(df.withColumn(declarative.RULE, pick))
        return transform(passed, rules).select(*[F.col(f"`{c}`") for c in columns])

    return run
