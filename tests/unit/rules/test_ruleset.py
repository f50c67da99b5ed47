"""Table 5-1, the seed's examples of applied/ignored changes, row migration in Python."""

from __future__ import annotations

from decimal import Decimal

import pytest

from changeflow.rules import admin
from changeflow.rules.errors import RuleDefinitionError
from changeflow.rules.fastpath import RuleIndex
from changeflow.rules.registry import RuleRegistry
from changeflow.rules.ruleset import Rule, RuleSet, RuleSetPair

HR = Rule("HR", "((:dml.get_object_owner() = 'HR') )")
SETS = {None: None, "empty": lambda: RuleSet("E"), "rules": lambda: RuleSet("R", [HR])}
HR_ROW = {"kind": "ROW", "object_owner": "HR"}
OE_ROW = {"kind": "ROW", "object_owner": "OE"}


@pytest.mark.parametrize(
    ("negative", "positive", "hr_passes", "oe_passes"),
    [
        (None, None, True, True),  # performs its task for all messages
        (None, "rules", True, False),
        ("rules", None, False, True),
        ("rules", "rules", False, False),  # negative evaluated first
        ("empty", None, True, True),
        ("empty", "rules", True, False),
        (None, "empty", False, False),  # an empty positive set discards all
        ("empty", "empty", False, False),
        ("rules", "empty", False, False),
    ],
)
def test_table_5_1(negative, positive, hr_passes, oe_passes) -> None:
    def make(kind):
        return SETS[kind]() if kind else None

    pair = RuleSetPair(positive=make(positive), negative=make(negative))
    assert pair.evaluate(HR_ROW)[0] is hr_passes
    assert pair.evaluate(OE_ROW)[0] is oe_passes


def _lcr(kind="ROW", owner="HR", name="T", **extra):
    return {"kind": kind, "object_owner": owner, "object_name": name,
            "source_database_name": "DBS1.EXAMPLE.COM", "tag": None, **extra}


def test_seed_table_rules_applied_and_ignored() -> None:
    reg = RuleRegistry()
    admin.add_table_rules(reg, "hr.locations", "apply", "apply", "q", include_dml=True,
                          include_ddl=False, source_database="dbs1.example.com")
    admin.add_table_rules(reg, "hr.countries", "apply", "apply", "q", include_dml=False,
                          include_ddl=True, source_database="dbs1.example.com")
    pair = reg.client("apply")
    applied = [_lcr(name="LOCATIONS", command_type="INSERT"),
               _lcr(name="LOCATIONS", command_type="DELETE"),
               _lcr("DDL", name="COUNTRIES", command_type="ALTER TABLE"),
               _lcr("DDL", owner=None, name=None, base_table_owner="HR",
                    base_table_name="COUNTRIES", object_type="INDEX")]
    ignored = [_lcr(name="EMPLOYEES"), _lcr(name="COUNTRIES", command_type="UPDATE"),
               _lcr("DDL", name="LOCATIONS"), _lcr(name="LOCATIONS", tag=b"\x01"),
               _lcr(name="LOCATIONS", source_database_name="DBS2.EXAMPLE.COM")]
    assert [pair.evaluate(m)[0] for m in applied] == [True] * len(applied)
    assert [pair.evaluate(m)[0] for m in ignored] == [False] * len(ignored)


def test_seed_schema_rule_with_negative_table_rule() -> None:
    reg = RuleRegistry()
    admin.add_schema_rules(reg, "hr", "apply", "apply", "q", source_database="dbs1.example.com")
    admin.add_table_rules(reg, "hr.job_history", "apply", "apply", "q", include_tagged_lcr=True,
                          source_database="dbs1.example.com", inclusion_rule=False)
    pair = reg.client("apply")
    for name in ("DEPARTMENTS", "EMPLOYEES", "COUNTRIES"):
        assert pair.evaluate(_lcr(name=name))[0] is True
    for cmd in ("INSERT", "UPDATE", "DELETE"):
        assert pair.evaluate(_lcr(name="JOB_HISTORY", command_type=cmd))[0] is False
    assert pair.evaluate(_lcr(owner="OE", name="INVENTORIES"))[0] is False


def test_global_rules_with_and_without_tags() -> None:
    reg = RuleRegistry()
    admin.add_global_rules(reg, "capture", "capture", "q", include_dml=True, include_ddl=True)
    admin.add_global_rules(reg, "capture", "capture_002", "q", include_dml=True,
                           include_ddl=True, include_tagged_lcr=True)
    tagged = _lcr(tag=b"\x02")
    assert reg.client("capture").evaluate(_lcr())[0] is True
    assert reg.client("capture").evaluate(tagged)[0] is False
    assert reg.client("capture_002").evaluate(tagged)[0] is True
    assert reg.client("capture_002").evaluate(_lcr("DDL"))[0] is True
    assert reg.client("capture_002").evaluate({"kind": "USER"})[0] is False


def test_and_condition_tag_02() -> None:
    reg = RuleRegistry()
    admin.add_table_rules(reg, "hr.departments", "apply", "apply_02", "q", include_ddl=True,
                          include_tagged_lcr=True, source_database="dbs1.example.com",
                          and_condition=":lcr.get_tag() = HEXTORAW('02')")
    pair = reg.client("apply_02")
    assert pair.evaluate(_lcr(name="DEPARTMENTS", tag=b"\x02"))[0] is True
    assert pair.evaluate(_lcr("DDL", name="DEPARTMENTS", tag=b"\x02"))[0] is True
    assert pair.evaluate(_lcr(name="DEPARTMENTS", tag=b"\x03"))[0] is False
    assert pair.evaluate(_lcr(name="DEPARTMENTS"))[0] is False


def _regions(cmd, old=None, new=None, **extra):
    msg = _lcr(name="REGIONS", command_type=cmd, **extra)
    if old is not None or cmd != "INSERT":
        msg["old_values"] = {"REGION_ID": old, "REGION_NAME": "r"}
    if new is not None or cmd != "DELETE":
        msg["new_values"] = {"REGION_ID": new}
    return msg


@pytest.mark.parametrize(
    ("message", "passes", "command"),
    [
        (_regions("INSERT", new=2), True, "INSERT"),
        (_regions("INSERT", new=3), False, None),
        (_regions("INSERT", new=None), False, None),
        (_regions("UPDATE", 4, 2), True, "INSERT"),  # moves into the subset
        (_regions("UPDATE", None, 2), True, "INSERT"),  # old NULL counts as outside
        (_regions("UPDATE", 2, 1), True, "DELETE"),  # moves out of the subset
        (_regions("UPDATE", 2, None), True, "DELETE"),
        (_regions("UPDATE", 2, 2), True, "UPDATE"),
        (_regions("UPDATE", 1, 1), False, None),
        (_regions("DELETE", old=2), True, "DELETE"),
        (_regions("DELETE", old=5), False, None),
        (_regions("UPDATE", 4, 2, tag=b"\x01"), False, None),
        ({**_regions("INSERT", new=2), "object_name": "EMPLOYEES"}, False, None),
    ],
)
def test_subset_rules_and_row_migration(message, passes, command) -> None:
    reg = RuleRegistry()
    admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "apply", "q",
                           source_database="dbs1.example.com")
    ok, out = reg.client("apply").evaluate(message)
    assert ok is passes
    if passes:
        assert out["command_type"] == command
    if command == "INSERT" and message["command_type"] == "UPDATE":
        assert out["old_values"] is None
        assert out["new_values"] == {"REGION_ID": 2, "REGION_NAME": "r"}
    if command == "DELETE" and message["command_type"] == "UPDATE":
        assert out["new_values"] is None and out["old_values"]["REGION_ID"] == 2


def test_no_migration_when_discarded_by_negative_set() -> None:
    reg = RuleRegistry()
    admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "apply", "q")
    admin.add_table_rules(reg, "hr.regions", "apply", "apply", "q", inclusion_rule=False,
                          include_tagged_lcr=True)
    assert reg.client("apply").evaluate(_regions("UPDATE", 4, 2))[0] is False


def test_negative_rule_set_with_subset_rules_is_refused() -> None:
    subset = Rule("S", ":dml.get_object_owner() = 'HR'", {"STREAMS$_ROW_SUBSET": "INSERT"})
    with pytest.raises(RuleDefinitionError, match="positive rule sets only"):
        RuleSetPair(negative=RuleSet("N", [subset]))


def test_index_classifies_rules() -> None:
    reg = RuleRegistry()
    admin.add_table_rules(reg, "hr.t", "apply", "a", "q", include_ddl=True)
    admin.add_schema_rules(reg, "oe", "apply", "a", "q")
    admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "a", "q")
    admin.add_global_rules(reg, "apply", "a", "q", include_tagged_lcr=True)
    index = RuleIndex.build(reg.rule_sets[reg.clients["a"].positive_rule_set].rules)
    assert sum(len(k) for k in index.simple.values()) == 4  # dml, ddl x2 (object/base), schema
    assert sum(len(v) for keyed in index.indexed.values() for v in keyed.values()) == 3
    assert [r.rule_type for r in index.residual] == ["GLOBAL"]  # the source-name tautology


def test_python_index_and_naive_evaluation_agree() -> None:
    import random

    rng = random.Random(3)
    rules = [Rule(f"R{i}", f"((:dml.get_object_owner() = 'S{i % 7}' and "
                  f":dml.get_object_name() = 'T{i}')) and :dml.is_null_tag() = 'Y'")
             for i in range(500)]
    rules.append(Rule("C", ":dml.get_object_name() LIKE 'T1%' AND :dml.get_object_owner() = 'S1'"))
    rule_set = RuleSet("R", rules)
    for _ in range(500):
        msg = {"kind": rng.choice(["ROW", "DDL"]), "object_owner": f"S{rng.randrange(8)}",
               "object_name": f"T{rng.randrange(600)}", "tag": rng.choice([None, b"\x01"])}
        naive = any(r.evaluate(msg) is True for r in rules)
        assert (rule_set.code(msg) is not None) is naive


def test_indexed_subset_rules_drop_what_their_key_implies() -> None:
    """INSERT/DELETE subset rules are keyed on owner, name and tag: those tests go."""
    from changeflow.rules import ast as A

    reg = RuleRegistry()
    admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "a", "q")
    index = RuleIndex.build(reg.rule_sets[reg.clients["a"].positive_rule_set].rules)
    rules = [ir for keyed in index.indexed.values() for irs in keyed.values() for ir in irs]
    assert len(rules) == 3
    for ir in rules:
        members = {n.name for n in ir.rest.walk() if isinstance(n, A.Member)}
        assert members <= {"get_command_type"}, ir.rule.name  # no owner/name/tag test left
        message = {"kind": "ROW", "object_owner": "HR", "object_name": "REGIONS",
                   "command_type": "INSERT",
                   "new_values": {"REGION_ID": {"type": "INTEGER", "int": 2}}}  # fmt: skip
        assert ir.rule.evaluate(message, ir.rest) == ir.rule.evaluate(message)


def test_same_shape_rules_share_parameter_columns() -> None:
    """Literals equal in every member stay inline; equal value vectors share a column."""
    from changeflow.rules.lookups import SparkPlan

    reg = RuleRegistry()
    for t in range(6):
        admin.add_subset_rules(reg, f"hr.t{t}", f"region_id={t % 3}", "apply", "a", "q")
    index = RuleIndex.build(reg.rule_sets[reg.clients["a"].positive_rule_set].rules)
    (lookup,) = SparkPlan.build(index).lookups
    for group in lookup.groups:
        slots, columns, values = group.parameters()
        assert len(slots) >= 2 and set(columns) == {0}  # region_id: one column per group
        assert sorted(v[0] for v in values.values()) == sorted(Decimal(t % 3) for t in range(6))
    assert lookup.fixed == {0: "ROW", 1: "HR", 3: "Y"}  # the same in every key: constants
    assert lookup.joined == [2]  # the join is on the table name only
