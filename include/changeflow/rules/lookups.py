"""The Spark backend of the rule index: broadcast lookup joins.

Each key pattern of a :class:`~changeflow.rules.fastpath.RuleIndex` becomes one small
lookup table (:class:`SparkPlan`), joined to the messages with a broadcast hash join
(:func:`annotate`). Complex rules of one shape are compiled once and read their
literals from the joined row, so the plan and the generated code do not grow with
the rule count. See ``docs/rules.md`` (Fast path) for what keeps the per-message work
and the generated code small.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow.rules import ast as A
from changeflow.rules.fastpath import DIM_MEMBER, NULL_MARK, Key, RuleIndex

if TYPE_CHECKING:
    from changeflow.rules.ruleset import Rule

# Columns the lookup joins add while a rule set is evaluated; dropped before returning.
LOOKUP_PREFIX = "__cf_rules_"


@dataclass
class _Member:
    """A complex rule evaluated for the messages of one key: the rule and what is left."""

    rule: Rule
    node: A.Node


@dataclass
class _Group:
    """Complex rules of one shape under one pattern, at most one per key.

    With several members the rule is compiled once; its literals become columns of the
    lookup table (``slots``: how each is stored and cast), so each key brings its own.
    """

    shape: Any
    members: dict[tuple[str, ...], _Member] = field(default_factory=dict)

    @property
    def first(self) -> _Member:
        return next(iter(self.members.values()))

    def parameters(self) -> tuple[list[A.Literal], list[int], dict[Key, list[Any]]]:
        """The literals read from the lookup table, and what it holds for them.

        Literals every member shares stay inline (constants Spark can fold), as do all
        those of a single-member group; literals holding the same value in every member
        (``region_id = 2`` tested three times) share one column.

        Returns:
            ``(slots, columns, values)``: the first member's literals read from the
            table, the table column of each, and per key the values of the columns.
        """
        from changeflow.rules.spark_compile import literal_parameter

        firsts = _literals(self.first.node)
        if len(self.members) < 2:
            return [], [], {}
        per_key = {k: [_parameter_value(n) for n in _literals(m.node)]
                   for k, m in self.members.items()}  # fmt: skip
        vectors: dict[tuple[Any, ...], int] = {}
        slots: list[A.Literal] = []
        columns: list[int] = []
        for i, node in enumerate(firsts):
            vector = tuple(values[i] for values in per_key.values())
            if len(set(vector)) == 1:
                continue  # the same in every member: inline
            slots.append(node)
            typed = (literal_parameter(node)[0], *vector)
            columns.append(vectors.setdefault(typed, len(vectors)))
        values = {k: [None] * len(vectors) for k in per_key}
        for typed, column in vectors.items():
            for key, value in zip(per_key, typed[1:], strict=True):
                values[key][column] = value
        return slots, columns, values


@dataclass
class _Lookup:
    """One broadcast lookup table: the keys of one pattern.

    Columns: the key dimensions ``k<i>``; ``hit``, TRUE when a simple rule matches the
    key; per complex group ``j``, ``g<j>`` (TRUE when the group has a rule for the key)
    and its literal parameters ``g<j>_p<i>``.
    """

    pattern: tuple[str, ...]
    hits: set[tuple[str, ...]] = field(default_factory=set)
    groups: list[_Group] = field(default_factory=list)

    def add(self, key: tuple[str, ...], member: _Member) -> None:
        """Put a complex rule in the first group of its shape not holding its key yet."""
        shape = _member_shape(member)
        for group in self.groups:
            if key not in group.members and group.shape == shape:
                group.members[key] = member
                return
        self.groups.append(_Group(shape, {key: member}))

    @functools.cached_property
    def keys(self) -> list[Key]:
        """Every key of the lookup, sorted (set once the plan is built)."""
        return sorted(set(self.hits).union(*(g.members for g in self.groups)))

    @functools.cached_property
    def fixed(self) -> dict[int, str]:
        """The key positions that hold the same value in every key, and that value.

        Those dimensions (the message kind, usually the tag test) are compared with a
        constant instead of being part of the join key: a shorter key to build and hash
        per message. With a single key the lookup needs no join at all.
        """
        first = self.keys[0]
        same = [all(k[i] == first[i] for k in self.keys) for i in range(len(self.pattern))]
        return {i: first[i] for i, fixed in enumerate(same) if fixed}

    @property
    def joined(self) -> list[int]:
        """The key positions the lookup joins on."""
        return [i for i in range(len(self.pattern)) if i not in self.fixed]

    def table(self, name: str) -> Any:
        """The lookup table as a pyarrow Table (keys sorted), column names prefixed."""
        import pyarrow as pa

        from changeflow.rules.spark_compile import literal_parameter

        keys = self.keys
        columns: dict[str, tuple[Any, list[Any]]] = {}
        for i in self.joined:
            columns[f"{name}k{i}"] = (pa.string(), [k[i] for k in keys])
        columns[f"{name}hit"] = (pa.bool_(), [k in self.hits for k in keys])
        for j, group in enumerate(self.groups):
            columns[f"{name}g{j}"] = (pa.bool_(), [k in group.members for k in keys])
            slots, slot_columns, params = group.parameters()
            stored = {c: literal_parameter(n)[0] for n, c in zip(slots, slot_columns, strict=True)}
            for i, kind in sorted(stored.items()):
                values = [params[k][i] if k in params else None for k in keys]
                columns[f"{name}g{j}_p{i}"] = (_arrow_type(kind), values)
        return pa.table({c: pa.array(v, type=t) for c, (t, v) in columns.items()})


def _arrow_type(stored: str) -> Any:
    import pyarrow as pa

    return {"string": pa.string, "binary": pa.binary}.get(stored, lambda: pa.decimal128(38, 10))()


def _parameter_value(node: A.Literal) -> Any:
    from changeflow.rules.spark_compile import literal_parameter

    return literal_parameter(node)[1]


def _member_shape(member: _Member) -> Any:
    # Rules reading :msg payload fields are never shared (their literals compare by
    # the field's runtime type): each is its own shape.
    msg = any(isinstance(n, A.MsgField) for n in member.node.walk())
    return (id(member) if msg else _shape(member.node), member.rule.subset_action)


@dataclass
class SparkPlan:
    """How a :class:`RuleIndex` is evaluated in Spark: lookup joins plus residual rules."""

    lookups: list[_Lookup]
    residual: list[Rule]
    _frames: dict[int, tuple[Any, list[Any]]] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, index: RuleIndex) -> SparkPlan:
        """Group the index by pattern, one lookup table each.

        A complex rule whose key fixes more dimensions than another pattern (simple or
        complex) is keyed on that pattern instead, its extra dimensions tested with the
        rest of it, so one join serves both.
        """
        lookups = {p: _Lookup(p, set(keys)) for p, keys in index.simple.items()}
        patterns = [*index.simple, *index.indexed]
        minimal = [p for p in index.indexed if not any(set(q) < set(p) for q in patterns)]
        coarse = sorted({*lookups, *minimal}, key=lambda p: (-len(p), p))
        for pattern, keyed in sorted(index.indexed.items()):
            target = next((p for p in coarse if set(p) <= set(pattern)), pattern)
            lookup = lookups.setdefault(target, _Lookup(target))
            for value, rules in sorted(keyed.items()):
                fixed = dict(zip(pattern, value, strict=True))
                key = tuple(fixed[d] for d in target)
                extra = [_dim_test(d, fixed[d]) for d in pattern if d not in target]
                for ir in rules:
                    node = ir.rest if not extra else A.And((*extra, ir.rest))
                    lookup.add(key, _Member(ir.rule, node))
        return cls([lookups[p] for p in sorted(lookups)], list(index.residual))

    def frames(self, spark: Any) -> list[Any]:
        """The lookup tables as small DataFrames of ``spark`` (local relations), built once."""
        cached = self._frames.get(id(spark))
        if cached is not None and cached[0] is spark:
            return cached[1]
        frames = [
            spark.createDataFrame(lookup.table(f"{LOOKUP_PREFIX}{n}_")) if lookup.joined else None
            for n, lookup in enumerate(self.lookups)
        ]
        self._frames[id(spark)] = (spark, frames)
        return frames


def _dim_test(dim: str, value: str) -> A.Node:
    """The condition ``<member of dim> = value`` (what a key dimension stands for)."""
    literal = A.Literal(None if value == NULL_MARK else value, A.VARCHAR2)
    return A.Compare("=", A.Member("lcr", DIM_MEMBER[dim]), literal)


def _dim_column(dim: str) -> Any:
    from pyspark.sql import functions as F

    if dim == "is_null_tag":
        return F.when(F.col("tag").isNull(), F.lit("Y")).otherwise(F.lit("N"))
    return F.coalesce(F.col(dim), F.lit(NULL_MARK))


def _dim_match(dim: str, value: str) -> Any:
    """The message's ``dim`` equals ``value`` (a key value: NULL_MARK for NULL)."""
    from pyspark.sql import functions as F

    if dim == "is_null_tag":
        return F.col("tag").isNull() if value == "Y" else F.col("tag").isNotNull()
    return F.col(dim).isNull() if value == NULL_MARK else F.col(dim) == F.lit(value)


def _least(codes: list[Any]) -> Any:
    from pyspark.sql import functions as F

    return codes[0] if len(codes) == 1 else F.least(*codes)


def annotate(df: Any, plan: SparkPlan, tag: str) -> tuple[Any, Any]:
    """Join ``df`` with the plan's lookup tables and compute the rule set's code.

    The code is the migration code of the first-ranked TRUE rule (0 keep the message,
    1 migrate an UPDATE to INSERT, 2 to DELETE), NULL when no rule is TRUE. Simple rules
    are one broadcast hash join per key pattern, whatever their number; a complex rule
    is evaluated only for messages whose key it is indexed under, and rules that differ
    only in their literals are compiled once, each key's literals coming from the join.
    Neither the plan nor the generated code grows with the number of rules.

    Args:
        df: LCR-contract messages.
        plan: the rule set's :class:`SparkPlan`.
        tag: makes the added column names unique when several rule sets annotate one
            DataFrame.

    Returns:
        ``(joined, code)``: the joined DataFrame (with columns named ``LOOKUP_PREFIX``...,
        to drop when done) and the code column.
    """
    from pyspark.sql import functions as F

    lookups: list[tuple[Any, Any, list[tuple[Any, _Group, str, bool]]]] = []
    frames = plan.frames(df.sparkSession)
    for n, (lookup, frame) in enumerate(zip(plan.lookups, frames, strict=True)):
        name = f"{LOOKUP_PREFIX}{tag}{n}_"
        fixed = [_dim_match(lookup.pattern[i], v) for i, v in sorted(lookup.fixed.items())]
        match = functools.reduce(lambda a, b: a & b, fixed) if fixed else None
        if frame is not None:
            frame = frame.toDF(*[name + c[len(f"{LOOKUP_PREFIX}{n}_") :] for c in frame.columns])
            on = [_dim_column(lookup.pattern[i]) == F.col(f"{name}k{i}") for i in lookup.joined]
            df = df.join(F.broadcast(frame), functools.reduce(lambda a, b: a & b, on), "left")
        joined = frame is not None
        hit = _flag(joined, f"{name}hit") if lookup.hits else None
        groups = [
            (_flag(joined, f"{name}g{j}"), group, f"{name}g{j}_p", "kind" not in lookup.pattern)
            for j, group in enumerate(lookup.groups)
        ]
        lookups.append((match, hit, groups))
    every_group = [g for _, _, groups in lookups for g in groups]
    df, shared = _shared_values(df, every_group, f"{LOOKUP_PREFIX}{tag}v")
    values = {k: c for k, (_, c) in shared.items()}
    # Per lookup: 0 when a simple rule matches, else the least code of its complex rules.
    # KEEP (0) is the least code, so the least over lookups gives the same answer.
    codes = []
    for match, hit, groups in lookups:
        complex_codes = [
            F.when(present, _group_code(group, prefix, values, guard))
            for present, group, prefix, guard in groups
        ]
        code = _least(complex_codes) if complex_codes else None
        if hit is not None:
            code = F.when(hit, F.lit(0)) if code is None else F.when(hit, F.lit(0)).otherwise(code)
        assert code is not None
        codes.append(code if match is None else F.when(match, code))
    codes.extend(rule.code_column(rule.tree) for rule in plan.residual)
    return df, _least(codes) if codes else F.lit(None).cast("int")


def _flag(joined: bool, column: str) -> Any:
    """A lookup-table flag of the message's key: FALSE without one (always TRUE unjoined)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col(column), F.lit(False)) if joined else F.lit(True)


def _shared_values(
    df: Any, groups: list[tuple[Any, _Group, str, bool]], prefix: str
) -> tuple[Any, dict[tuple[str, ...], tuple[str, Any]]]:
    """Read each LCR column value the groups' rules use once per message, as a column.

    Rules compile every ``get_value()`` (and accessor) they contain to its own map
    lookup, and Spark does not share them: the subset rules of one table read the same
    value a dozen times. Each distinct value read becomes one column, computed only for
    messages some group reading it applies to (NULL for the others), and the compiled
    rules refer to it. That keeps the generated code of the whole filter small enough
    for the JIT compiler.

    Returns:
        ``(df, shared)``: ``df`` with the value columns added, and per value key its
        column name and the column to compile references to.
    """
    from pyspark.sql import functions as F

    from changeflow.rules.spark_compile import VALUES, value, value_key, value_read

    reads: dict[tuple[str, ...], tuple[A.GetValue, list[Any]]] = {}
    accesses: dict[tuple[str, ...], A.Node] = {}
    for present, group, *_ in groups:
        for node in _value_reads(group.first.node):
            if isinstance(node, A.Access):
                accesses[value_key(node)] = node  # type: ignore[index]
                node = node.arg
            reads.setdefault(value_key(node), (node, []))[1].append(present)  # type: ignore[arg-type]
    if not reads:
        return df, {}
    # Two projections: the values (one map lookup each), then their accessors, which
    # read the value's fields from the first projection's column.
    shared: dict[tuple[str, ...], tuple[str, Any]] = {}
    columns = []
    for key, (node, gates) in sorted(reads.items()):
        name = f"{prefix}{len(shared)}"
        gate = functools.reduce(lambda a, b: a | b, gates)
        columns.append(F.when(gate, value_read(node)).alias(name))
        shared[key] = (name, F.col(name))
    df = df.select("*", *columns)
    if not accesses:
        return df, shared
    token = VALUES.set({k: c for k, (_, c) in shared.items()})
    try:
        columns = []
        for key, node in sorted(accesses.items()):
            name = f"{prefix}{len(shared)}"
            columns.append(value(node).alias(name))
            shared[key] = (name, F.col(name))
    finally:
        VALUES.reset(token)
    return df.select("*", *columns), shared


def _value_reads(node: A.Node) -> Iterable[A.Node]:
    """The column value reads of a condition: accessors of ``get_value()``, and bare ones."""
    if isinstance(node, A.Access) and isinstance(node.arg, A.GetValue):
        yield node
        return
    if isinstance(node, A.GetValue):
        yield node
        return
    for child in node.children():
        yield from _value_reads(child)


def _group_code(
    group: _Group, prefix: str, values: dict[tuple[str, ...], Any], guard: bool
) -> Any:
    """One compiled rule for a group of same-shape rules, literals read from the join.

    ``values`` are the shared column value reads; ``guard=False`` when the lookup key
    already fixed the message kind.
    """
    from pyspark.sql import functions as F

    from changeflow.rules.spark_compile import PARAMETERS, VALUES, literal_parameter

    first = group.first
    mapping = {}
    slots, slot_columns, _ = group.parameters()
    for slot, i in zip(slots, slot_columns, strict=True):
        cast = literal_parameter(slot)[2]
        column = F.col(f"{prefix}{i}")
        mapping[id(slot)] = column.cast(cast) if cast else column
    token = PARAMETERS.set(mapping)
    shared = VALUES.set(values)
    try:
        return first.rule.code_column(first.node, guard=guard)
    finally:
        VALUES.reset(shared)
        PARAMETERS.reset(token)


def _shape(node: Any) -> Any:
    """A node's structure with literal values left out (literal types kept)."""
    if isinstance(node, A.Literal):
        return ("?", node.type)
    if isinstance(node, A.Node):
        items = sorted((k, v) for k, v in node.__dict__.items() if k != "pos")
        return (type(node).__name__, tuple((k, _shape(v)) for k, v in items))
    if isinstance(node, tuple):
        return tuple(_shape(v) for v in node)
    return node


def _literals(node: A.Node) -> list[A.Literal]:
    return [n for n in node.walk() if isinstance(n, A.Literal)]
