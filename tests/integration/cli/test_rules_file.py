"""``changeflow rules`` edits the rules file the pipeline names, keeping what people wrote.

The README's example runs against a copy of the real ``config/demo.yaml`` and
``config/demo-rules.yaml``: the add writes exactly the new rule, its rule-set membership
and the counter; every comment stays; ``remove-rule`` undoes it; ``--dry-run`` writes
nothing; refusals leave the file byte for byte as it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from changeflow.cli import main
from changeflow.rules.config import load_rules, registry_to_dict
from changeflow.rules.yamledit import edit

ADD = ["rules", "add-table-rules", "--config", "config/demo.yaml", "--table", "hr.locations",
       "--streams-type", "apply", "--streams-name", "apply_dbs2",
       "--source-database", "dbs1.example.com"]
SEED_CONDITION = ("(((:dml.get_object_owner() = 'HR' and :dml.get_object_name() = 'LOCATIONS')) "
                  "and :dml.is_null_tag() = 'Y' and :dml.get_source_database_name() = "
                  "'DBS1.EXAMPLE.COM' )")


def invoke(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def comments(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("#")]


def test_add_writes_the_rule_into_the_pipelines_rules_file_keeping_comments(
        project: Path) -> None:
    rules_file = project / "config" / "demo-rules.yaml"
    before = rules_file.read_text()
    before_decl = registry_to_dict(load_rules(rules_file))
    code, out, _ = invoke(*ADD)
    assert code == 0, out
    after = rules_file.read_text()
    reg = load_rules(rules_file)
    assert reg.rules["LOCATIONS9"].condition == SEED_CONDITION
    assert [r.name for r in reg.rule_sets["RULESET$_7"].rules] == ["HR8", "LOCATIONS9"]
    assert reg.sequence == 9
    # nothing else changed in meaning, and the file is an edit of the old one
    decl = registry_to_dict(reg)
    del decl["rules"]["LOCATIONS9"]
    decl["rule_sets"]["RULESET$_7"]["rules"].remove("LOCATIONS9")
    decl["sequence"] = 8
    assert decl == before_decl
    assert comments(after) == comments(before) and len(comments(before)) >= 5
    old_lines, new_lines = before.splitlines(), after.splitlines()
    added = [ln for ln in new_lines if ln not in old_lines]
    removed = [ln for ln in old_lines if ln not in new_lines]
    assert removed == ["sequence: 8"]
    assert added == ["  LOCATIONS9:", f"    condition: {SEED_CONDITION}",
                     "    rule_type: TABLE", "    - LOCATIONS9", "sequence: 9"]
    assert "remove-rule LOCATIONS9 --streams-type apply --streams-name apply_dbs2" in out


def test_remove_rule_undoes_the_add(project: Path) -> None:
    rules_file = project / "config" / "demo-rules.yaml"
    before = rules_file.read_text()
    assert invoke(*ADD)[0] == 0
    code, out, _ = invoke("rules", "remove-rule", "LOCATIONS9", "--config", "config/demo.yaml",
                          "--streams-type", "apply", "--streams-name", "apply_dbs2")
    assert code == 0, out
    assert rules_file.read_text() == before.replace("sequence: 8", "sequence: 9")
    assert "LOCATIONS9" not in load_rules(rules_file).rules


def test_dry_run_prints_the_edit_and_writes_nothing(project: Path) -> None:
    rules_file = project / "config" / "demo-rules.yaml"
    before = rules_file.read_bytes()
    code, out, _ = invoke(*ADD, "--dry-run")
    assert code == 0, out
    assert rules_file.read_bytes() == before
    assert f"+    condition: {SEED_CONDITION}" in out and "+sequence: 9" in out


def test_json_output_reports_what_was_created(project: Path) -> None:
    code, out, _ = invoke(*ADD, "-o", "json")
    assert code == 0, out
    report = json.loads(out)
    assert report["written"] is True and report["rule_set"] == "RULESET$_7"
    assert [r["name"] for r in report["created"]] == ["LOCATIONS9"]
    assert load_rules(report["file"]).rules["LOCATIONS9"].condition == SEED_CONDITION


def test_remove_the_only_rule_warns_that_the_set_now_discards_everything(
        project: Path) -> None:
    code, out, err = invoke("rules", "remove-rule", "HR8", "--config", "config/demo.yaml",
                            "--streams-type", "apply", "--streams-name", "apply_dbs2")
    assert code == 0, out
    assert "RULESET$_7 is now empty" in err and "discards every message" in err
    reg = load_rules(project / "config" / "demo-rules.yaml")
    assert "HR8" not in reg.rules and reg.rule_sets["RULESET$_7"].rules == []
    assert reg.client("apply_dbs2").evaluate({"kind": "ROW", "object_owner": "HR"})[0] is False


@pytest.mark.parametrize(("args", "message"), [
    (["remove-rule", "HR2", "--streams-type", "apply", "--streams-name", "apply_dbs2"],
     "rule HR2 is not in the positive rule set RULESET$_7 of apply_dbs2 (it holds: HR8)"),
    (["remove-rule", "HR8", "--streams-type", "capture", "--streams-name", "apply_dbs2"],
     "client apply_dbs2 is a apply client, not a capture client"),
    (["remove-rule", "HR8", "--streams-type", "apply", "--streams-name", "nobody"],
     "client nobody is not defined"),
    (["remove-rule", "HR8", "--streams-type", "apply", "--streams-name", "apply_dbs2",
      "--no-inclusion-rule"], "client apply_dbs2 has no negative rule set"),
    (["add-table-rules", "--table", "hr.t", "--streams-type", "apply", "--streams-name",
      "apply_dbs2", "--and-condition", ":dml.get_tag() IS NULL"], "must be :lcr"),
    (["add-table-rules", "--table", "hr.t", "--streams-type", "capture", "--streams-name",
      "apply_dbs2"], "client apply_dbs2 is a apply client, not a capture client"),
    (["add-subset-rules", "--table", "hr.regions", "--dml-condition", "region_id = = 2",
      "--streams-type", "apply", "--streams-name", "apply_dbs2"], "line 1"),
])
def test_refused_changes_leave_the_rules_file_untouched(
        project: Path, tree: Callable[[Path], dict[str, str]], args: list[str],
        message: str) -> None:
    before = tree(project)
    code, out, err = invoke("rules", *args, "--config", "config/demo.yaml")
    assert code == 1, out + err
    assert message in err and "nothing was changed in config/demo-rules.yaml" in err
    assert tree(project) == before


def test_the_rules_file_itself_is_refused_as_config(
        project: Path, tree: Callable[[Path], dict[str, str]]) -> None:
    before = tree(project)
    code, _, err = invoke(*[a if a != "config/demo.yaml" else "config/demo-rules.yaml"
                            for a in ADD])
    assert code == 1
    assert "config/demo-rules.yaml is a rules file: --config takes the pipeline file" in err
    assert tree(project) == before


def test_a_pipeline_without_rules_key_says_what_to_add(
        project: Path, tree: Callable[[Path], dict[str, str]]) -> None:
    pipeline = project / "config" / "demo.yaml"
    pipeline.write_text(pipeline.read_text().replace("rules: demo-rules.yaml\n", ""))
    before = tree(project)
    code, _, err = invoke(*ADD)
    assert code == 1
    assert "config/demo.yaml has no `rules:` key naming its rules file" in err
    assert tree(project) == before


def test_list_and_show_read_the_pipelines_rules(project: Path) -> None:
    code, out, _ = invoke("rules", "list", "--config", "config/demo.yaml", "-o", "json")
    assert code == 0, out
    rows = json.loads(out)
    assert [(r["client"], r["rule"]) for r in rows] == [
        ("capture_hr", "HR2"), ("capture_hr", "HR3"), ("dbs1_to_dbs2", "HR5"),
        ("dbs1_to_dbs2", "HR6"), ("apply_dbs2", "HR8")]
    code, out, _ = invoke("rules", "show", "HR8", "--config", "config/demo.yaml", "-o", "yaml")
    assert code == 0 and "clients:\n- apply_dbs2 (positive)" in out and "- RULESET$_7" in out
    code, out, _ = invoke("rules", "list", "--config", "config/demo.yaml", "--client",
                          "apply_dbs2")
    lines = out.splitlines()
    assert lines[0].split() == ["CLIENT", "TYPE", "SIDE", "RULE", "SET", "RULE", "RULE", "TYPE",
                                "CONDITION"]
    assert len(lines) == 2 and lines[1].split()[:6] == [
        "apply_dbs2", "apply", "positive", "RULESET$_7", "HR8", "SCHEMA"]


# ------------------------------------------------------------- editing YAML in place


def test_edit_keeps_comments_between_entries_and_at_the_end() -> None:
    old = ("rules:\n  A1: {condition: a}   # first\n  # about B2\n  B2: {condition: b}\n"
           "# the sets follow\nrule_sets:\n  S:\n    rules:\n      - A1   # one\n"
           "      - B2\n    # end of S\n")
    new = edit(old, {"rules": {"A1": {"condition": "a"}, "B2": {"condition": "b"},
                               "C3": {"condition": "c"}},
                     "rule_sets": {"S": {"rules": ["A1", "B2", "C3"]}}})
    assert new == ("rules:\n  A1: {condition: a}   # first\n  # about B2\n  B2: {condition: b}\n"
                   "  C3:\n    condition: c\n# the sets follow\nrule_sets:\n  S:\n    rules:\n"
                   "      - A1   # one\n      - B2\n      - C3\n    # end of S\n")


def test_edit_removing_an_entry_keeps_the_comment_of_the_next() -> None:
    old = ("rules:\n  A1: x   # a\n  # about B2\n  B2: y\n  # about C3\n  C3: z\n"
           "# trailer\n")
    assert edit(old, {"rules": {"A1": "x", "C3": "z"}}) == (
        "rules:\n  A1: x   # a\n  # about B2\n  # about C3\n  C3: z\n# trailer\n")
    assert edit(old, {"rules": {"A1": "x", "B2": "y"}}) == (
        "rules:\n  A1: x   # a\n  # about B2\n  B2: y\n  # about C3\n# trailer\n")


def test_edit_keeps_quoting_and_defaults_people_wrote() -> None:
    old = "clients:\n  a:\n    type: 'apply'\n    negative_rule_set: null\n"
    new = edit(old, {"clients": {"a": {"type": "apply", "positive_rule_set": "S"}}})
    assert new == ("clients:\n  a:\n    type: 'apply'\n    negative_rule_set: null\n"
                   "    positive_rule_set: S\n")


def test_edit_of_an_empty_file_is_a_fresh_file() -> None:
    assert edit("", {"rules": {"R": {"condition": "c"}}, "sequence": 1}) == (
        "rules:\n  R:\n    condition: c\nsequence: 1\n")
