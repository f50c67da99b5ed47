"""Rules files: load, save, round trip, and errors naming the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.errors import ConfigError
from changeflow.rules import admin
from changeflow.rules.config import load_rules, registry_to_dict, save_rules
from changeflow.rules.registry import RuleRegistry


def test_admin_writes_what_the_loader_reads(tmp_path: Path) -> None:
    reg = RuleRegistry()
    admin.add_table_rules(reg, "hr.locations", "apply", "apply", "strmadmin.streams_queue")
    admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "apply")
    admin.add_message_rule(reg, "strmadmin.region_pri_msg", ":msg.region = 'EUROPE'",
                           "dequeue", "msg_client")
    path = tmp_path / "rules.yaml"
    save_rules(reg, path)
    loaded = load_rules(path)
    assert registry_to_dict(loaded) == registry_to_dict(reg)
    admin.add_table_rules(loaded, "hr.x", "apply", "apply")
    assert len({r.name for r in loaded.rules.values()}) == len(loaded.rules)


def test_missing_file_is_an_empty_registry(tmp_path: Path) -> None:
    assert not load_rules(tmp_path / "none.yaml").rules


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("rules: {R: {condition: ':dml.get_owner() = 1'}}", "rules.R.condition",
         "line 1, column 6: unknown LCR member function"),
        ("rules: {R: {condition: 'x', colour: red}}", "rules.R.colour", "Extra inputs"),
        ("rules: {R: {}}", "rules.R.condition", "Field required"),
        ("rule_sets: {S: {rules: [NOPE]}}", "rule_sets.S.rules[0]", "rule NOPE is referenced"),
        ("clients: {a: {type: apply, positive_rule_set: S}}", "clients.a.positive_rule_set",
         "rule set S is referenced but not defined"),
        ("clients: {a: {type: capturer}}", "clients.a.type", "unknown type"),
        ("rules: {S1: {condition: \":dml.get_object_owner() = 'HR'\", action_context: "
         "{STREAMS$_ROW_SUBSET: INSERT}}}\nrule_sets: {N: {rules: [S1]}}\n"
         "clients: {a: {type: apply, negative_rule_set: N}}",
         "clients.a.negative_rule_set", "positive rule sets only"),
        ("[1, 2]", None, "must be a mapping"),
        ("rules: {R: {condition: 'a'", None, "not valid YAML"),
    ],
)
def test_config_errors_name_file_and_key(tmp_path: Path, text: str, key, message: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_rules(path)
    assert info.value.file == str(path)
    assert info.value.key == key
    assert message in str(info.value)
