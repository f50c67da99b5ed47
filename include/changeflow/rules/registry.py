"""The registry of rules, rule sets and clients: what a rules file declares.

>>> reg = RuleRegistry()
>>> _ = reg.add_rule(Rule("HR1", "((:dml.get_object_owner() = 'HR') )"))
>>> _ = reg.create_rule_set("POS")
>>> reg.add_to_rule_set("POS", "HR1")
>>> _ = reg.ensure_client("apply", "apply", queue="strmadmin.streams_queue")
>>> reg.attach("apply", "POS", positive=True)
>>> reg.client("apply").evaluate({"kind": "ROW", "object_owner": "HR"})[0]
True
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from changeflow.rules.errors import RuleDefinitionError
from changeflow.rules.ruleset import Client, Rule, RuleSet, RuleSetPair


@dataclass
class RuleRegistry:
    """Rules, rule sets and clients by name, with the checks that keep them consistent."""

    rules: dict[str, Rule] = field(default_factory=dict)
    rule_sets: dict[str, RuleSet] = field(default_factory=dict)
    clients: dict[str, Client] = field(default_factory=dict)
    sequence: int = 0

    @contextmanager
    def transaction(self) -> Iterator[RuleRegistry]:
        """Undo every change made inside the block if it raises: all or nothing.

        Admin calls only add rules, rule sets and rule set members, and change clients,
        so the undo record is the sizes before the block (and the clients): the cost of
        a call does not grow with the number of rules already defined.
        """
        n_rules = len(self.rules)
        set_sizes = {n: len(rs.rules) for n, rs in self.rule_sets.items()}
        saved_clients = {n: copy.copy(c) for n, c in self.clients.items()}
        saved_sequence = self.sequence
        try:
            yield self
        except BaseException:
            for name in list(self.rules)[n_rules:]:
                del self.rules[name]
            self.rule_sets = {n: rs for n, rs in self.rule_sets.items() if n in set_sizes}
            for name, size in set_sizes.items():
                rule_set = self.rule_sets[name]
                if len(rule_set.rules) != size:
                    del rule_set.rules[size:]
                    rule_set.changed()
            self.clients = saved_clients
            self.sequence = saved_sequence
            raise

    def next_id(self) -> int:
        """A number for generated names (rules, rule sets, message variables)."""
        self.sequence += 1
        return self.sequence

    def unique_rule_name(self, base: str) -> str:
        """``base`` followed by the next free number, e.g. ``LOCATIONS12``."""
        while True:
            name = f"{base}{self.next_id()}"
            if name not in self.rules:
                return name

    def add_rule(self, rule: Rule) -> Rule:
        """Register a rule; its name must be new."""
        if rule.name in self.rules:
            raise RuleDefinitionError(f"rule {rule.name} already exists")
        self.rules[rule.name] = rule
        return rule

    def create_rule_set(self, name: str | None = None) -> RuleSet:
        """Create an empty rule set (named ``RULESET$_n`` when no name is given)."""
        if name is None:
            name = f"RULESET$_{self.next_id()}"
            while name in self.rule_sets:
                name = f"RULESET$_{self.next_id()}"
        if name in self.rule_sets:
            raise RuleDefinitionError(f"rule set {name} already exists")
        self.rule_sets[name] = RuleSet(name)
        return self.rule_sets[name]

    def rule_set(self, name: str) -> RuleSet:
        """The rule set of that name.

        Raises:
            RuleDefinitionError: it is not defined.
        """
        try:
            return self.rule_sets[name]
        except KeyError:
            raise RuleDefinitionError(f"rule set {name} is referenced but not defined") from None

    def negative_users(self, set_name: str) -> list[str]:
        """The clients using a rule set as their negative rule set."""
        return [c.name for c in self.clients.values() if c.negative_rule_set == set_name]

    def add_to_rule_set(self, set_name: str, rule_name: str) -> None:
        """Add a registered rule to a rule set, refusing subset rules in negative sets."""
        rule_set = self.rule_set(set_name)
        if rule_name not in self.rules:
            raise RuleDefinitionError(f"rule {rule_name} is referenced but not defined")
        rule = self.rules[rule_name]
        users = self.negative_users(set_name)
        if rule.subset_action is not None and users:
            raise RuleDefinitionError(
                f"subset rule {rule_name} cannot be added to rule set {set_name}: it is the "
                f"negative rule set of {', '.join(users)}, and subset rules go in positive "
                "rule sets only"
            )
        rule_set.add(rule)

    def ensure_client(
        self,
        name: str,
        type: str,
        *,
        queue: str | None = None,
        destination_queue: str | None = None,
    ) -> Client:
        """Return the client, creating it when missing; refuse a type change."""
        wanted = Client(name, type, queue, destination_queue)
        existing = self.clients.get(name)
        if existing is None:
            self.clients[name] = wanted
            return wanted
        if existing.type != wanted.type:
            raise RuleDefinitionError(
                f"client {name} is a {existing.type} client, not a {wanted.type} client"
            )
        for attr in ("queue", "destination_queue"):
            have, want = getattr(existing, attr), getattr(wanted, attr)
            if have is None:
                setattr(existing, attr, want)
            elif want is not None and have != want:
                raise RuleDefinitionError(f"client {name} uses {attr} {have}, not {want}")
        return existing

    def attach(self, client_name: str, set_name: str, *, positive: bool) -> None:
        """Make a rule set the positive or negative rule set of a client."""
        client = self.clients.get(client_name)
        if client is None:
            raise RuleDefinitionError(f"client {client_name} is not defined")
        rule_set = self.rule_set(set_name)
        if not positive:
            if client.type == "sync_capture":
                raise RuleDefinitionError(
                    f"client {client_name}: a synchronous capture cannot have a negative rule set"
                )
            if rule_set.has_subset_rules:
                raise RuleDefinitionError(
                    f"rule set {set_name} holds subset rules and cannot be the negative rule "
                    f"set of {client_name}: subset rules go in positive rule sets only"
                )
        if positive:
            client.positive_rule_set = set_name
        else:
            client.negative_rule_set = set_name

    def client(self, name: str) -> RuleSetPair:
        """The rule sets of a client, ready to evaluate messages or filter DataFrames.

        Raises:
            RuleDefinitionError: the client, or a rule set it names, is not defined.
        """
        client = self.clients.get(name)
        if client is None:
            known = ", ".join(sorted(self.clients)) or "none"
            raise RuleDefinitionError(f"client {name} is not defined (defined: {known})")
        positive = self.rule_set(client.positive_rule_set) if client.positive_rule_set else None
        negative = self.rule_set(client.negative_rule_set) if client.negative_rule_set else None
        return RuleSetPair(positive=positive, negative=negative)
