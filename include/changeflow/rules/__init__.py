"""The rules engine: conditions, rule sets, clients, Table 5-1, DBMS_STREAMS_ADM.

Pipeline jobs need three names (see ``docs/rules.md``):

>>> from changeflow.rules import RuleSetPair, load_rules
>>> RuleSetPair().evaluate({"kind": "ROW"})
(True, {'kind': 'ROW'})

``load_rules(path).client(name)`` returns a :class:`RuleSetPair`, whose ``filter(df)``
and ``evaluate(message)`` decide which messages a client takes.
"""

from __future__ import annotations

from changeflow.rules.config import load_rules, save_rules
from changeflow.rules.errors import RuleDefinitionError, RuleError
from changeflow.rules.registry import RuleRegistry
from changeflow.rules.ruleset import Client, Rule, RuleSet, RuleSetPair

__all__ = [
    "Client", "Rule", "RuleDefinitionError", "RuleError", "RuleRegistry", "RuleSet",
    "RuleSetPair", "load_rules", "save_rules",
]  # fmt: skip
