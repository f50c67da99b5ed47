"""Rule sets over Arrow tables, for stages that run without Spark (log-based capture).

When every rule of a client's rule sets is *simple* (its condition is only equalities
on message dimensions: every system-created global, schema and table rule, see
:mod:`.fastpath`), a message's verdict depends only on its dimensions. So the rule
sets are decided once per distinct combination of dimensions in the table, in Python
with :meth:`RuleSetPair.evaluate` (the same evaluator as everywhere else), and the rows
are kept with one vectorised ``is_in``: a batch of 50,000 changes to a few tables costs a
few evaluations, and no JVM round trip. Rule sets with complex or subset rules (values,
row migration) return ``None``: the caller uses the Spark backend.

>>> import pyarrow as pa
>>> from changeflow.rules.ruleset import Rule, RuleSet, RuleSetPair
>>> pair = RuleSetPair(positive=RuleSet("S", [Rule("R", ":dml.get_object_owner() = 'HR'")]))
>>> t = pa.table({"kind": ["ROW", "ROW"], "object_owner": ["HR", "OE"],
...               "tag": pa.array([None, None], pa.binary())})
>>> filter_table(pair, t).column("object_owner").to_pylist()
['HR']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from changeflow.rules.fastpath import DIMS

if TYPE_CHECKING:
    import pyarrow as pa

    from changeflow.rules.ruleset import RuleSet, RuleSetPair

_SEP = "\x1f"


def _simple(rule_set: RuleSet | None) -> bool:
    if rule_set is None:
        return True
    index = rule_set.index
    return not index.indexed and not index.residual and not rule_set.has_subset_rules


def supported(pair: RuleSetPair) -> bool:
    """Whether every rule of the pair can be decided from message dimensions alone."""
    return _simple(pair.positive) and _simple(pair.negative)


def filter_table(pair: RuleSetPair, table: pa.Table, *,
                 counts: list[tuple[dict[str, Any], int]] | None = None) -> pa.Table | None:
    """The rows of ``table`` that satisfy the rule sets, or ``None`` if Spark is needed.

    Args:
        counts: when given, each distinct message (its dimensions) and how many rows
            have it are appended to it.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not supported(pair):
        return None
    if table.num_rows == 0:
        return table
    columns = [d for d in DIMS if d != "is_null_tag" and d in table.column_names]
    parts: list[Any] = [pc.fill_null(pc.cast(table.column(c), pa.string()), "\x00")
                        for c in columns]
    tag_null = (pc.is_null(table.column("tag")) if "tag" in table.column_names
                else pa.array([True] * table.num_rows))
    parts.append(pc.if_else(tag_null, "Y", "N"))
    keys = pc.binary_join_element_wise(*parts, _SEP)
    kept = []
    distinct = pc.value_counts(keys)
    for key, n in zip(distinct.field("values").to_pylist(), distinct.field("counts").to_pylist(),
                      strict=True):
        values = key.split(_SEP)
        message: dict[str, Any] = {c: (None if v == "\x00" else v)
                                   for c, v in zip(columns, values[:-1], strict=True)}
        message["tag"] = None if values[-1] == "Y" else b"\x01"
        if pair.evaluate(message)[0]:
            kept.append(key)
        if counts is not None:
            counts.append((message, int(n)))
    if len(kept) == len(distinct):
        return table
    return table.filter(pc.is_in(keys, value_set=pa.array(kept, pa.string())))


def filter_for_client(rule_filter: Any, table: pa.Table) -> pa.Table | None:
    """``table`` filtered by a client's rule filter over Arrow, or ``None`` when its rule
    sets are not simple enough (the caller runs them in Spark then).

    In a recorded run, the per-rule match counts are noted as the Spark filter's
    observation notes them (:mod:`changeflow.rules.stats`).
    """
    from changeflow.rules import stats as rulestats

    pair = getattr(rule_filter, "rule_sets", None)
    if pair is None:
        return None
    who = getattr(rule_filter, "client", None)
    counts: list[tuple[dict[str, Any], int]] | None = [] if (
        who is not None and rulestats.recording()) else None
    out = filter_table(pair, table, counts=counts)
    if out is not None and counts is not None and who is not None:
        rulestats.note(who[0], who[1], pair, counts)
    return out

