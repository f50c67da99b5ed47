"""The rule index: simple rules become hash lookups, complex rules are gated by key.

Oracle's rules engine evaluates simple rules through an index and only the rest one
by one. This module does the same. Each rule's condition is analysed into
*alternatives*: assignments of message dimensions (kind, owner, name, base table,
command type, is_null_tag, source database, object type) that the condition
requires by equality. A condition made only of such equalities (every
system-created global, schema and table rule) is *simple*: it is TRUE exactly when
the message's dimensions equal one of its alternatives, so a rule set of 10,000 of
them is a handful of hash lookups (one per distinct set of dimensions, its
*pattern*). A complex rule with a single alternative is *indexed*: only messages
whose key matches evaluate the rest of it. Other rules are *residual* and are
evaluated for every message.

The Python backend probes dictionaries (:class:`RuleIndex`). The Spark backend
(:mod:`changeflow.rules.lookups`) turns each pattern into a small lookup table joined
with a broadcast hash join.

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
DIM_MEMBER = {v: k for k, v in _MEMBER_DIMS.items()}
MAX_ALTERNATIVES = 64
NULL_MARK = "\x00"  # a NULL dimension, in keys

Alternative = dict[str, str]
Key = tuple[str, ...]  # a pattern (dimension names) or a key (their values)


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


def _beyond(tree: A.Node, fixed: Alternative) -> A.Node:
    """What is left of a condition for messages whose dimensions include ``fixed``.

    Drops the conjuncts that such a message makes TRUE (one of their alternatives is
    part of ``fixed``), e.g. the owner and name tests of a subset rule keyed on them.
    """
    conjuncts = list(tree.items) if isinstance(tree, A.And) else [tree]
    kept = [c for c in conjuncts if not _implied(c, fixed)]
    if not kept:
        return tree
    return kept[0] if len(kept) == 1 else A.And(tuple(kept))


def _implied(conjunct: A.Node, fixed: Alternative) -> bool:
    options = _alternatives(conjunct)
    return options is not None and any(
        all(fixed.get(d) == v for d, v in option.items()) for option in options
    )


def _valid(alt: Alternative) -> bool:
    """Drop alternatives reading a member that is NULL for their kind (never TRUE)."""
    kind = alt.get("kind")
    for dim in alt:
        member = DIM_MEMBER.get(dim)
        if member and kind not in A.MEMBER_FUNCTIONS[member].kinds:
            return False
    return True


def pattern_of(alt: Alternative) -> tuple[str, ...]:
    """The dimensions an alternative fixes, in key order."""
    return tuple(d for d in DIMS if d in alt)


def key_of(alt: Alternative, pattern: tuple[str, ...]) -> tuple[str, ...]:
    """The lookup key of an alternative (or of a message's dimensions) for a pattern.

    >>> key_of({"kind": "ROW", "object_owner": None}, ("kind", "object_owner"))
    ('ROW', '\\x00')
    """
    return tuple(NULL_MARK if alt.get(d) is None else str(alt[d]) for d in pattern)


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

    simple: dict[Key, set[Key]] = field(default_factory=dict)
    indexed: dict[Key, dict[Key, list[IndexedRule]]] = field(default_factory=dict)
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
                node = _beyond(rule.tree, common)
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
