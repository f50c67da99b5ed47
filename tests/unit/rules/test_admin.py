"""DBMS_STREAMS_ADM mirror: the seed's examples, rule counts, bad calls."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from changeflow.rules import admin
from changeflow.rules.errors import RuleDefinitionError, RuleError
from changeflow.rules.registry import RuleRegistry

SEED = yaml.safe_load((Path(__file__).parent / "fixtures" / "seed_conditions.yaml").read_text())


@pytest.mark.parametrize("case", SEED, ids=[c["id"] for c in SEED])
def test_seed_example_conditions(case: dict) -> None:
    reg = RuleRegistry()
    result = getattr(admin, case["call"])(reg, **case["args"])
    assert [r.condition for r in result.rules] == case["conditions"]
    assert result.positive is not case.get("negative", False)
    client = reg.clients[case["args"]["streams_name"]]
    set_name = client.negative_rule_set if case.get("negative") else client.positive_rule_set
    assert set_name == result.rule_set.name
    assert [r.name for r in reg.rule_sets[set_name].rules] == [r.name for r in result.rules]


def test_message_rules_use_generated_variables() -> None:
    reg = RuleRegistry()
    europe = admin.add_message_rule(
        reg, "strmadmin.region_pri_msg", ":msg.region = 'EUROPE' AND :msg.priority = '1' ",
        "dequeue", "msg_client", "streams_queue",
    )
    americas = admin.add_message_rule(
        reg, "strmadmin.region_pri_msg", ":msg.region = 'AMERICAS' AND :msg.priority = '2' ",
        "apply", "apply_msg", "streams_queue",
    )
    for result, region, prio in ((europe, "EUROPE", 1), (americas, "AMERICAS", 2)):
        (rule,) = result.rules
        assert re.fullmatch(
            rf':"(VAR\$_\d+)"\.region = \'{region}\' AND :"\1"\.priority = \'{prio}\'',
            rule.condition,
        )
        assert rule.message_type == "STRMADMIN.REGION_PRI_MSG"
    assert reg.clients["msg_client"].type == "dequeue"
    msg = {"kind": "USER", "msg_type_name": "strmadmin.region_pri_msg",
           "payload": {"REGION": "EUROPE", "PRIORITY": 1}}
    assert reg.client("msg_client").evaluate(msg)[0] is True
    assert reg.client("apply_msg").evaluate(msg)[0] is False
    other_type = {**msg, "msg_type_name": "strmadmin.other"}
    assert reg.client("msg_client").evaluate(other_type)[0] is False


@pytest.mark.parametrize(
    ("dml", "ddl", "count"),
    [(False, False, 0), (True, False, 1), (False, True, 1), (True, True, 2)],
)
def test_rule_counts(dml: bool, ddl: bool, count: int) -> None:
    reg = RuleRegistry()
    result = admin.add_table_rules(reg, "hr.t", "capture", "cap", "q", include_dml=dml,
                                   include_ddl=ddl)
    assert len(result.rules) == count
    assert reg.clients["cap"].positive_rule_set == result.rule_set.name


def test_subset_rules_are_three_with_row_subset_actions() -> None:
    reg = RuleRegistry()
    result = admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "apply")
    assert [r.subset_action for r in result.rules] == ["INSERT", "UPDATE", "DELETE"]


def test_second_call_reuses_client_and_rule_set() -> None:
    reg = RuleRegistry()
    first = admin.add_table_rules(reg, "hr.a", "apply", "apply", "q")
    second = admin.add_table_rules(reg, "hr.b", "apply", "apply", "q")
    negative = admin.add_table_rules(reg, "hr.c", "apply", "apply", "q", inclusion_rule=False)
    assert first.rule_set is second.rule_set
    assert negative.rule_set is not first.rule_set
    assert len(reg.clients) == 1 and len(reg.rule_sets) == 2


def test_subset_rules_refused_in_negative_rule_set() -> None:
    reg = RuleRegistry()
    admin.add_table_rules(reg, "hr.c", "apply", "apply", "q", inclusion_rule=False)
    negative = reg.clients["apply"].negative_rule_set
    subset = admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "other")
    subset_set = reg.clients["other"].positive_rule_set
    with pytest.raises(RuleDefinitionError, match="positive rule sets only"):
        reg.add_to_rule_set(negative, subset.rules[0].name)
    with pytest.raises(RuleDefinitionError, match="positive rule sets only"):
        reg.attach("apply", subset_set, positive=False)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"and_condition": ":dml.get_tag() IS NULL"}, RuleDefinitionError, "must be :lcr"),
        ({"and_condition": ":lcr.get_tag( = 1"}, RuleError, r"and_condition: .*column 15"),
        ({"and_condition": ":lcr.get_object_type() = 'TABLE'"}, RuleError, "DDL LCRs only"),
        ({"table_name": "locations"}, RuleDefinitionError, "schema.table"),
        ({"streams_type": "propagation"}, RuleDefinitionError, "propagation"),
        ({"streams_type": "bogus"}, RuleDefinitionError, "unknown type"),
    ],
)
def test_bad_calls_are_refused_and_change_nothing(kwargs, error, match) -> None:
    reg = RuleRegistry()
    args = {"table_name": "hr.t", "streams_type": "apply", "streams_name": "apply",
            "queue_name": "q", **kwargs}
    with pytest.raises(error, match=match):
        admin.add_table_rules(reg, **args)
    assert not reg.clients and not reg.rule_sets and not reg.rules


@pytest.mark.parametrize(
    ("condition", "match"),
    [
        ("region_id=", "dml_condition: line 1, column 11"),
        (":dml.get_tag() IS NULL", "without variables"),
        ("2 = 2", "names no column"),
    ],
)
def test_bad_dml_conditions(condition: str, match: str) -> None:
    with pytest.raises((RuleError, RuleDefinitionError), match=match):
        admin.add_subset_rules(RuleRegistry(), "hr.regions", condition, "apply", "apply")


def test_client_type_conflict() -> None:
    reg = RuleRegistry()
    admin.add_table_rules(reg, "hr.t", "apply", "x", "q")
    with pytest.raises(RuleDefinitionError, match="apply client, not a capture"):
        admin.add_table_rules(reg, "hr.t", "capture", "x", "q")


def test_subset_condition_with_string_and_several_columns() -> None:
    reg = RuleRegistry()
    result = admin.add_subset_rules(reg, "hr.locations", "country_id = 'UK' and city <> 'X'",
                                    "apply", "apply")
    insert = result.rules[0].condition
    assert "get_value('NEW','\"COUNTRY_ID\"').AccessVarchar2() = 'UK'" in insert
    assert "NOT EXISTS (SELECT 1 FROM SYS.DUAL WHERE (" in insert
    pair = reg.client("apply")
    moving_in = {"kind": "ROW", "object_owner": "HR", "object_name": "LOCATIONS",
                 "command_type": "UPDATE", "old_values": {"COUNTRY_ID": "US", "CITY": "A"},
                 "new_values": {"COUNTRY_ID": "UK", "CITY": "A"}}
    ok, out = pair.evaluate(moving_in)
    assert ok and out["command_type"] == "INSERT"


def _state(reg: RuleRegistry) -> tuple:
    return (
        list(reg.rules),
        {n: [r.name for r in rs.rules] for n, rs in reg.rule_sets.items()},
        {n: (c.type, c.positive_rule_set, c.negative_rule_set) for n, c in reg.clients.items()},
        reg.sequence,
    )


def test_failure_inside_a_transaction_restores_the_registry() -> None:
    """Rules, rule sets, members, clients and derived indexes all go back."""
    reg = RuleRegistry()
    admin.add_table_rules(reg, "hr.a", "apply", "apply", "q")
    before = _state(reg)
    message = {"kind": "ROW", "object_owner": "HR", "object_name": "B", "command_type": "INSERT"}
    with pytest.raises(RuntimeError, match="boom"), reg.transaction():
        admin.add_table_rules(reg, "hr.b", "apply", "apply", "q")
        admin.add_table_rules(reg, "hr.c", "apply", "other", "q", inclusion_rule=False)
        assert reg.client("apply").positive.code(message) == 0  # type: ignore[union-attr]
        raise RuntimeError("boom")
    assert _state(reg) == before
    assert reg.client("apply").positive.code(message) is None  # type: ignore[union-attr]
    admin.add_table_rules(reg, "hr.b", "apply", "apply", "q")  # and the registry still works
    assert reg.client("apply").positive.code(message) == 0  # type: ignore[union-attr]
