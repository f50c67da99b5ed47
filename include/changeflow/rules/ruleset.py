"""Rules, rule sets, clients, and Table 5-1 evaluation.

A :class:`Rule` holds a condition, parsed and checked when the rule is created. A
:class:`RuleSet` is a named, ordered set of rules; one rule set may serve several
clients. A client (capture, propagation, apply, messaging client) has at most one
positive and one negative rule set; :class:`RuleSetPair` evaluates a message or a
DataFrame against them as seed 000, Table 5-1 says:

* the negative set is evaluated first; a message for which any negative rule is TRUE
  is discarded (and never migrated);
* no positive set: everything not discarded passes; an empty positive set discards
  everything; otherwise a message passes when any positive rule is TRUE;
* an empty negative set discards nothing, exactly like no negative set.

>>> hr = Rule("HR1", "((:dml.get_object_owner() = 'HR') and :dml.is_null_tag() = 'Y' )")
>>> pair = RuleSetPair(positive=RuleSet("POS", [hr]))
>>> pair.evaluate({"kind": "ROW", "object_owner": "HR", "tag": None})[0]
True
>>> RuleSetPair(positive=RuleSet("EMPTY")).evaluate({"kind": "ROW"})[0]
False
>>> RuleSetPair().evaluate({"kind": "ROW"})[0]
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from changeflow.rules import ast as A
from changeflow.rules.errors import RuleDefinitionError, RuleError
from changeflow.rules.evaluate import evaluate, kinds_of
from changeflow.rules.fastpath import RuleIndex
from changeflow.rules.lookups import LOOKUP_PREFIX, SparkPlan, annotate
from changeflow.rules.migration import CODES, KEEP, ROW_SUBSET_KEY, migrate, migrate_message
from changeflow.rules.parser import parse

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CLIENT_TYPES = ("capture", "sync_capture", "propagation", "apply", "dequeue")
CLIENT_TYPE_ALIASES = {"messaging": "dequeue", "messaging_client": "dequeue"}
_CODE_TARGETS = {v: k for k, v in CODES.items()}


@dataclass
class Rule:
    """A named rule: condition, optional action context and message type.

    Args:
        name: the rule name, unique in its registry.
        condition: the condition text; parsed and checked now.
        action_context: name/value pairs; ``STREAMS$_ROW_SUBSET`` (INSERT, UPDATE or
            DELETE) marks a subset rule and drives row migration.
        message_type: for message rules, the user message type the rule applies to.
        rule_type: what created the rule (GLOBAL, SCHEMA, TABLE, SUBSET, MESSAGE), for
            listings only.

    Raises:
        RuleError: the condition is malformed, naming the rule.
    """

    name: str
    condition: str
    action_context: dict[str, str] = field(default_factory=dict)
    message_type: str | None = None
    rule_type: str | None = None

    def __post_init__(self) -> None:
        try:
            self.tree: A.Node = parse(self.condition)
        except RuleError as exc:
            raise exc.with_context(f"rule {self.name}") from None
        subset = self.action_context.get(ROW_SUBSET_KEY)
        if subset is not None and subset not in ("INSERT", "UPDATE", "DELETE"):
            raise RuleDefinitionError(
                f"rule {self.name}: {ROW_SUBSET_KEY} must be INSERT, UPDATE or DELETE, "
                f"not {subset!r}"
            )
        if self.message_type is not None and kinds_of(self.tree) != {"USER"}:
            raise RuleDefinitionError(
                f"rule {self.name}: a message rule may only use :msg variables"
            )

    @property
    def subset_action(self) -> str | None:
        """INSERT/UPDATE/DELETE for a subset rule, else None."""
        return self.action_context.get(ROW_SUBSET_KEY)

    def guard(self, message: Mapping[str, Any]) -> bool:
        """False when the rule cannot apply to the message (its message type differs)."""
        if self.message_type is None:
            return True
        name = message.get("msg_type_name") or ""
        return message.get("kind") == "USER" and name.upper() == self.message_type.upper()

    def evaluate(self, message: Mapping[str, Any], node: A.Node | None = None) -> bool | None:
        """The rule's truth value for one message (three-valued)."""
        if not self.guard(message):
            return False
        return evaluate(self.tree if node is None else node, message)

    def code(self, message: Mapping[str, Any]) -> int:
        """The migration code when this rule is TRUE for the message."""
        action = self.subset_action
        if action in CODES and message.get("command_type") == "UPDATE":
            return CODES[action]
        return KEEP

    def code_column(self, node: A.Node | None = None, *, guard: bool = True) -> Column:
        """Spark: the migration code when the rule (or ``node`` of it) is TRUE, else NULL.

        ``guard=False`` leaves out the message kind test, for callers that made it.
        """
        from pyspark.sql import functions as F

        from changeflow.rules.spark_compile import compile_condition

        cond = compile_condition(self.tree if node is None else node, guard=guard)
        if self.message_type is not None:
            cond = (
                (F.col("kind") == "USER")
                & (F.upper(F.col("msg_type_name")) == self.message_type.upper())
                & cond
            )
        code = F.lit(KEEP)
        if self.subset_action in CODES:
            code = F.when(F.col("command_type") == "UPDATE", F.lit(CODES[self.subset_action]))
            code = code.otherwise(F.lit(KEEP))
        return F.when(cond, code)


@dataclass
class RuleSet:
    """A named, ordered set of rules."""

    name: str
    rules: list[Rule] = field(default_factory=list)

    @cached_property
    def index(self) -> RuleIndex:
        """The analysed form used by both backends (built once)."""
        return RuleIndex.build(self.rules)

    def add(self, rule: Rule) -> None:
        """Add a rule (once); resets the index."""
        if rule.name not in self._names:
            self.rules.append(rule)
            self._names.add(rule.name)
            self.__dict__.pop("index", None)
            self.__dict__.pop("spark_plan", None)

    def changed(self) -> None:
        """Forget what was derived from :attr:`rules` (call after changing the list)."""
        for derived in ("index", "spark_plan", "_names"):
            self.__dict__.pop(derived, None)

    @cached_property
    def _names(self) -> set[str]:
        return {r.name for r in self.rules}

    @property
    def has_subset_rules(self) -> bool:
        """True when a rule of the set carries row migration."""
        return any(r.subset_action is not None for r in self.rules)

    def code(self, message: Mapping[str, Any]) -> int | None:
        """Python backend: the migration code, or None when no rule is TRUE."""
        index = self.index
        if index.simple_match(message):
            return KEEP
        codes = [
            rule.code(message)
            for rule, node in index.candidates(message)
            if rule.evaluate(message, node) is True
        ]
        return min(codes) if codes else None

    @cached_property
    def spark_plan(self) -> SparkPlan:
        """The Spark form of the index: lookup tables and residual rules (built once)."""
        return SparkPlan.build(self.index)

    def annotate(self, df: DataFrame, tag: str = "") -> tuple[DataFrame, Column]:
        """Spark backend: ``df`` joined with the lookup tables, and the migration code
        column (NULL when no rule is TRUE); see :func:`changeflow.rules.lookups.annotate`.
        """
        return annotate(df, self.spark_plan, tag)


@dataclass
class Client:
    """A capture, propagation, apply or messaging client, and its rule set names."""

    name: str
    type: str
    queue: str | None = None
    destination_queue: str | None = None
    positive_rule_set: str | None = None
    negative_rule_set: str | None = None

    def __post_init__(self) -> None:
        self.type = CLIENT_TYPE_ALIASES.get(self.type.lower(), self.type.lower())
        if self.type not in CLIENT_TYPES:
            raise RuleDefinitionError(
                f"client {self.name}: unknown type {self.type!r}; use one of "
                + ", ".join(CLIENT_TYPES)
            )


@dataclass
class RuleSetPair:
    """The positive and negative rule sets of one client: what pipeline jobs call.

    ``None`` means *no* rule set; an empty :class:`RuleSet` is an *empty* one.
    """

    positive: RuleSet | None = None
    negative: RuleSet | None = None

    def __post_init__(self) -> None:
        if self.negative is not None and self.negative.has_subset_rules:
            raise RuleDefinitionError(
                f"rule set {self.negative.name} holds subset rules and cannot be a negative "
                "rule set: subset rules go in positive rule sets only"
            )

    def evaluate(self, message: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Decide one message in plain Python.

        Returns:
            ``(passes, message)``: whether the client performs its task for the
            message, and the message to use (row-migrated when a subset rule says so).
        """
        if self.negative is not None and self.negative.code(message) is not None:
            return False, dict(message)
        if self.positive is None:
            return True, dict(message)
        code = self.positive.code(message)
        if code is None:
            return False, dict(message)
        return True, migrate_message(message, _CODE_TARGETS.get(code))

    def filter(self, df: DataFrame) -> DataFrame:
        """The messages of ``df`` that satisfy the rule sets, row migration applied.

        A pure ``DataFrame -> DataFrame`` transform with the same columns. Simple rules
        are broadcast hash-join lookups; complex rules are native Spark expressions,
        evaluated only for the messages whose key they are indexed under.
        """
        from pyspark.sql import functions as F

        if self.positive is None and self.negative is None:
            return df
        columns = [F.col(f"`{c}`") for c in df.columns]
        out, keep = df, F.lit(True)
        negative = self.negative if self.negative is not None and self.negative.rules else None
        if negative is not None:
            out, negative_code = negative.annotate(out, "n")
            keep = negative_code.isNull()
        if self.positive is None:
            return df if negative is None else _once(out, keep, None).select(*columns)
        out, code = self.positive.annotate(out, "p")
        out = _once(out, keep, code)
        if not self.positive.has_subset_rules:
            return out.select(*columns)
        return migrate(out, F.col(CODE)).select(*columns)


CODE = f"{LOOKUP_PREFIX}code"


def _once(df: DataFrame, keep: Column, code: Column | None) -> DataFrame:
    """``df`` filtered on ``keep`` and a non-NULL ``code``, the code as column ``CODE``.

    The code is computed in a projection that also holds a non-deterministic column
    (the partition id, which costs nothing), and the filter reads both. Without it,
    Spark pushes the filter below the projection, inlining the code: the whole rule
    set would be compiled and evaluated twice (in the filter and for row migration),
    and the column values the lookups share (see :mod:`~changeflow.rules.lookups`)
    would be read again at every reference.
    """
    from pyspark.sql import functions as F

    ok = f"{LOOKUP_PREFIX}ok"
    pid = F.spark_partition_id()
    if code is None:
        return df.select("*", (pid >= 0).alias(ok)).filter(keep & F.col(ok))
    passes = F.coalesce(code, F.lit(-1) - pid) >= 0
    return df.select("*", code.alias(CODE), passes.alias(ok)).filter(keep & F.col(ok))
