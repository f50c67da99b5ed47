"""The rule index: simple rules become hash lookups, complex rules are gated by key.

Oracle's rules engine evaluates simple rules through an index and only the rest one
by one. This module does the same. Each rule's condition is analysed into
*alternatives*: assignments of message dimensions (kind, owner, name, base table,
command type, is_null_tag, source database, object type) that the condition
requires by equality. A condition made only of such equalities (every
system-created global, schema and table rule) is *simple*: it is TRUE exactly when
the message's dimensions equal one of its alternatives, so a rule set of 10,000 of
them is a handful of hash-set lookups (one per distinct set of dimensions, its
*pattern*). A complex rule with a single alternative is *indexed*: only messages
whose key matches evaluate the rest of it. Other rules are *residual* and are
evaluated for every message.

>>> from changeflow.rules.parser import parse
>>> tree = parse("((:dml.get_object_owner() = 'HR') and :dml.is_null_tag() = 'Y' )")
>>> alts, rest = analyze(tree)
>>> alts
[{'kind': 'ROW', 'object_owner': 'HR', 'is_null_tag': 'Y'}]
>>> rest
[]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow.rules import ast as A
from changeflow.rules.evaluate import kinds_of

if TYPE_CHECKING:
    from changeflow.rules.ruleset import Rule

# Message dimensions usable as index keys, in key order.
DIMS = (
    "kind", "object_owner", "object_name", "base_table_owner", "base_table_name",
    "command_type", "is_null_tag", "source_database_name", "object_type",
)  # fmt: skip
_MEMBER_DIMS = {
    "get_object_owner": "object_owner",
    "get_object_name": "object_name",
    "get_base_table_owner": "base_table_owner",
    "get_base_table_name": "base_table_name",
    "get_command_type": "command_type",
    "is_null_tag": "is_null_tag",
    "get_source_database_name": "source_database_name",
    "get_object_type": "object_type",
}
_DIM_MEMBER = {v: k for k, v in _MEMBER_DIMS.items()}
MAX_ALTERNATIVES = 64
SEP, NULL_MARK = "\x1f", "\x00"

Alternative = dict[str, str]


def analyze(tree: A.Node) -> tuple[list[Alternative], list[A.Node]]:
    """Split a condition into key alternatives and the conjuncts left to evaluate.

    Returns:
        ``(alternatives, rest)``: the condition is TRUE iff the message matches one
        alternative AND every node of ``rest`` is TRUE. ``alternatives`` is empty when
        no alternative can ever match.
    """
    conjuncts = list(tree.items) if isinstance(tree, A.And) else [tree]
    alts: list[Alternative] = [{"kind": k} for k in sorted(kinds_of(tree))]
    rest: list[A.Node] = []
    for conjunct in conjuncts:
        options = _alternatives(conjunct)
        if options is None:
            rest.append(conjunct)
            continue
        combined = _cross(alts, options)
        if len(combined) > MAX_ALTERNATIVES:
            rest.append(conjunct)
            continue
        alts = combined
    return [a for a in alts if _valid(a)], rest


def _alternatives(node: A.Node) -> list[Alternative] | None:
    if isinstance(node, A.Compare) and node.op == "=":
        pair = _member_literal(node.left, node.right) or _member_literal(node.right, node.left)
        return [pair] if pair else None
    if isinstance(node, A.In) and not node.negated:
        options = [_member_literal(node.expr, item) for item in node.items]
        return None if any(o is None for o in options) else options  # type: ignore[return-value]
    if isinstance(node, A.Or):
        out: list[Alternative] = []
        for item in node.items:
            sub = _alternatives(item)
            if sub is None:
                return None
            out.extend(sub)
        return out if len(out) <= MAX_ALTERNATIVES else None
    if isinstance(node, A.And):
        acc: list[Alternative] = [{}]
        for item in node.items:
            sub = _alternatives(item)
            if sub is None:
                return None
            acc = _cross(acc, sub)
            if len(acc) > MAX_ALTERNATIVES:
                return None
        return acc
    return None


def _member_literal(member: A.Node, literal: A.Node) -> Alternative | None:
    if not (isinstance(member, A.Member) and isinstance(literal, A.Literal)):
        return None
    dim = _MEMBER_DIMS.get(member.name)
    if dim is None or literal.type != A.VARCHAR2:
        return None
    return {dim: str(literal.value)}


def _cross(left: list[Alternative], right: list[Alternative]) -> list[Alternative]:
    out = []
    for a, b in itertools.product(left, right):
        if all(a.get(k, v) == v for k, v in b.items()):
            merged = {**a, **b}
            if merged not in out:
                out.append(merged)
    return out


def _valid(alt: Alternative) -> bool:
    """Drop alternatives reading a member that is NULL for their kind (never TRUE)."""
    kind = alt.get("kind")
    for dim in alt:
        member = _DIM_MEMBER.get(dim)
        if member and kind not in A.MEMBER_FUNCTIONS[member].kinds:
            return False
    return True


def pattern_of(alt: Alternative) -> tuple[str, ...]:
    """The dimensions an alternative fixes, in key order."""
    return tuple(d for d in DIMS if d in alt)


def key_of(alt: Alternative, pattern: tuple[str, ...]) -> str:
    """The lookup key of an alternative (or of a message's dimensions) for a pattern.

    >>> key_of({"kind": "ROW", "object_owner": "HR"}, ("kind", "object_owner"))
    'ROW\\x1fHR'
    """
    return SEP.join(NULL_MARK if alt.get(d) is None else str(alt[d]) for d in pattern)


def message_dims(message: Mapping[str, Any]) -> dict[str, Any]:
    """The index dimensions of one message dict."""
    dims = {d: message.get(d) for d in DIMS if d != "is_null_tag"}
    dims["is_null_tag"] = "Y" if message.get("tag") is None else "N"
    return dims


@dataclass
class IndexedRule:
    """A complex rule with one alternative: its key and the conjuncts left to evaluate."""

    rule: Rule
    rest: A.Node


@dataclass
class RuleIndex:
    """The analysed form of a list of rules (see the module docstring)."""

    simple: dict[tuple[str, ...], set[str]] = field(default_factory=dict)
    indexed: dict[tuple[str, ...], dict[str, list[IndexedRule]]] = field(default_factory=dict)
    residual: list[Rule] = field(default_factory=list)
    size: int = 0

    @classmethod
    def build(cls, rules: Iterable[Rule]) -> RuleIndex:
        """Analyse every rule once."""
        index = cls()
        for rule in rules:
            index.size += 1
            index._add(rule)
        return index

    def _add(self, rule: Rule) -> None:
        if rule.message_type is not None:
            self.residual.append(rule)
            return
        alts, rest = analyze(rule.tree)
        if not alts:
            return  # can never be TRUE
        if not rest and rule.subset_action is None:
            for alt in alts:
                pattern = pattern_of(alt)
                self.simple.setdefault(pattern, set()).add(key_of(alt, pattern))
        else:
            # Key on the dimensions every alternative fixes; whatever is left is evaluated.
            common = {d: v for d, v in alts[0].items() if all(a.get(d) == v for a in alts)}
            if len(common) < 2:  # only the kind: an index would not narrow anything
                self.residual.append(rule)
                return
            if len(alts) == 1:
                node = rest[0] if len(rest) == 1 else A.And(tuple(rest))
            else:
                node = rule.tree
            pattern = pattern_of(common)
            keyed = self.indexed.setdefault(pattern, {})
            keyed.setdefault(key_of(common, pattern), []).append(IndexedRule(rule, node))

    def simple_match(self, message: Mapping[str, Any]) -> bool:
        """True when a simple rule is TRUE for the message (Python backend)."""
        dims = message_dims(message)
        return any(key_of(dims, p) in keys for p, keys in self.simple.items())

    def candidates(self, message: Mapping[str, Any]) -> list[tuple[Rule, A.Node]]:
        """The complex rules worth evaluating for a message, with what is left of them."""
        dims = message_dims(message)
        out: list[tuple[Rule, A.Node]] = []
        for pattern, keyed in self.indexed.items():
            out.extend((ir.rule, ir.rest) for ir in keyed.get(key_of(dims, pattern), ()))
        out.extend((rule, rule.tree) for rule in self.residual)
        return out


# -- Spark backend ---------------------------------------------------------------------
def _dim_column(dim: str) -> Any:
    from pyspark.sql import functions as F

    if dim == "is_null_tag":
        return F.when(F.col("tag").isNull(), F.lit("Y")).otherwise(F.lit("N"))
    return F.coalesce(F.col(dim), F.lit(NULL_MARK))


def key_column(pattern: tuple[str, ...]) -> Any:
    """The message's lookup key for a pattern, as a Spark string column."""
    from pyspark.sql import functions as F

    cols = [_dim_column(d) for d in pattern]
    return cols[0] if len(cols) == 1 else F.concat_ws(SEP, *cols)


def _least(codes: list[Any]) -> Any:
    from pyspark.sql import functions as F

    return codes[0] if len(codes) == 1 else F.least(*codes)


def code_column(index: RuleIndex) -> Any:
    """The migration code of the first-ranked TRUE rule, NULL when no rule is TRUE.

    Codes: 0 keep the message, 1 migrate an UPDATE to INSERT, 2 to DELETE. Simple rules
    are ``isin`` lookups, which Spark turns into a hash-set membership test. Indexed
    complex rules are evaluated only when their key matches; those that differ only in
    their literals (the subset rules of many tables) are compiled once, their literals
    looked up by key, so the generated code does not grow with the number of tables.
    """
    from pyspark.sql import functions as F

    codes: list[Any] = []
    for pattern, keyed in sorted(index.indexed.items()):
        key = key_column(pattern)
        gated = [_shape_code(key, group) for group in _shape_groups(keyed).values()]
        codes.append(F.when(key.isin(sorted(keyed)), _least(gated)))
    codes.extend(rule.code_column(rule.tree) for rule in index.residual)
    simple = [key_column(p).isin(sorted(keys)) for p, keys in sorted(index.simple.items())]
    complex_code = _least(codes) if codes else F.lit(None).cast("int")
    if not simple:
        return complex_code
    matched = simple[0] if len(simple) == 1 else F.greatest(*simple)
    return F.when(matched, F.lit(0)).otherwise(complex_code)


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


def _shape_groups(keyed: dict[str, list[IndexedRule]]) -> dict[Any, list[tuple[str, IndexedRule]]]:
    """Indexed rules grouped by (shape, action, message type); one compiled form each."""
    groups: dict[Any, list[tuple[str, IndexedRule]]] = {}
    for value, rules in sorted(keyed.items()):
        for ir in rules:
            msg = any(isinstance(n, A.MsgField) for n in ir.rest.walk())
            shape = (id(ir) if msg else _shape(ir.rest), ir.rule.subset_action,
                     ir.rule.message_type)  # fmt: skip
            # A key appears once per group (map keys are unique): repeat -> next group.
            n = 0
            while any(v == value for v, _ in groups.get((shape, n), ())):
                n += 1
            groups.setdefault((shape, n), []).append((value, ir))
    return groups


def _shape_code(key: Any, group: list[tuple[str, IndexedRule]]) -> Any:
    """One compiled rule for a group of same-shape rules, literals looked up by key."""
    from pyspark.sql import functions as F

    from changeflow.rules.spark_compile import PARAMETERS, literal_column

    first = group[0][1]
    if len(group) == 1:
        return F.when(key == group[0][0], first.rule.code_column(first.rest))
    slots = _literals(first.rest)
    entries: list[Any] = []
    for value, ir in group:
        lits = _literals(ir.rest)
        entries += [F.lit(value), F.struct(*[literal_column(n).alias(f"p{i}")
                                            for i, n in enumerate(lits)])]  # fmt: skip
    params = F.element_at(F.create_map(*entries), key) if slots else None
    mapping = {id(n): params[f"p{i}"] for i, n in enumerate(slots)} if params is not None else {}
    token = PARAMETERS.set(mapping)
    try:
        code = first.rule.code_column(first.rest)
    finally:
        PARAMETERS.reset(token)
    if params is None:
        return F.when(key.isin([v for v, _ in group]), code)
    return F.when(params.isNotNull(), code)
