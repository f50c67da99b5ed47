"""Simple rule sets over Arrow agree with the Python evaluator, row by row."""

from __future__ import annotations

import random

import pyarrow as pa

from changeflow.rules import templates as tpl
from changeflow.rules.arrow_filter import filter_table, supported
from changeflow.rules.ruleset import Rule, RuleSet, RuleSetPair


def _table(n: int = 400) -> pa.Table:
    rng = random.Random(3)
    rows = []
    for i in range(n):
        owner = rng.choice(["HR", "OE", "SH", None])
        rows.append({"msg_id": str(i), "kind": rng.choice(["ROW", "ROW", "DDL"]),
                     "object_owner": owner, "object_name": rng.choice(["EMPLOYEES", "ORDERS",
                                                                       "JOBS"]),
                     "command_type": rng.choice(["INSERT", "UPDATE", "DELETE"]),
                     "source_database_name": rng.choice(["DBS1.EXAMPLE.COM", "DBS2.EXAMPLE.COM"]),
                     "tag": rng.choice([None, b"\x11"])})
    return pa.Table.from_pylist(rows, pa.schema([
        ("msg_id", pa.string()), ("kind", pa.string()), ("object_owner", pa.string()),
        ("object_name", pa.string()), ("command_type", pa.string()),
        ("source_database_name", pa.string()), ("tag", pa.binary())]))


def _rule(name: str, var: str, level: str, owner: str | None, table: str | None,
          tagged: bool = False, db: str | None = None) -> Rule:
    return Rule(name, tpl.system_condition(var, level, owner, table, tagged, db),
                rule_type=level)


PAIRS = {
    "table rules": RuleSetPair(positive=RuleSet("P", [
        _rule("T1", "dml", "TABLE", "HR", "EMPLOYEES"), _rule("T2", "dml", "TABLE", "OE", "ORDERS",
                                                              db="DBS1.EXAMPLE.COM")])),
    "schema + negative": RuleSetPair(
        positive=RuleSet("P", [_rule("S1", "dml", "SCHEMA", "HR", None, tagged=True),
                               _rule("S2", "ddl", "SCHEMA", "SH", None)]),
        negative=RuleSet("N", [_rule("X1", "dml", "TABLE", "HR", "JOBS", tagged=True)])),
    "empty positive": RuleSetPair(positive=RuleSet("P", [])),
    "negative only": RuleSetPair(negative=RuleSet("N", [_rule("G", "dml", "GLOBAL", None, None)])),
}


def test_arrow_filter_matches_the_python_evaluator_row_by_row() -> None:
    table = _table()
    for label, pair in PAIRS.items():
        assert supported(pair), label
        got = filter_table(pair, table)
        assert got is not None
        expected = [r["msg_id"] for r in table.to_pylist() if pair.evaluate(r)[0]]
        assert got.column("msg_id").to_pylist() == expected, label
    kept = filter_table(PAIRS["table rules"], table)
    assert kept is not None and 0 < kept.num_rows < table.num_rows


def test_rules_on_values_or_subsets_go_to_spark() -> None:
    value_rule = Rule("V", ":dml.get_object_owner() = 'HR' and "
                           ":dml.get_value('NEW','SALARY').AccessNumber() > 10")
    pair = RuleSetPair(positive=RuleSet("P", [value_rule]))
    assert not supported(pair) and filter_table(pair, _table(10)) is None
