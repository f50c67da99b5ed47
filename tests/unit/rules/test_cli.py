"""``changeflow rules``: the commands print the rules they create."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from changeflow.cli import main

PIPELINE = """version: 1
rules: rules.yaml
sites:
  s: {staging_root: s, target_root: t, state_url: "sqlite:///st.db", database: DBS1.EXAMPLE.COM}
"""


def pipeline(tmp_path: Path) -> str:
    """A pipeline file whose ``rules:`` key names ``rules.yaml`` beside it."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE)
    return str(path)


def test_add_table_rules_prints_the_seed_condition(tmp_path: Path) -> None:
    cfg = pipeline(tmp_path)
    result = CliRunner().invoke(main, [
        "rules", "add-table-rules", "--table", "hr.locations", "--streams-type", "apply",
        "--streams-name", "apply", "--queue", "strmadmin.streams_queue",
        "--source-database", "dbs1.example.com", "--config", cfg,
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "apply process apply: positive rule set RULESET$_1, 1 rule(s) created" in result.output
    assert (
        "(((:dml.get_object_owner() = 'HR' and :dml.get_object_name() = 'LOCATIONS')) and "
        ":dml.is_null_tag() = 'Y' and :dml.get_source_database_name() = 'DBS1.EXAMPLE.COM' )"
    ) in result.output
    listed = CliRunner().invoke(main, ["rules", "list", "--config", cfg])
    assert "LOCATIONS" in listed.output and "RULESET$_1" in listed.output


def test_subset_and_propagation_commands(tmp_path: Path) -> None:
    cfg = pipeline(tmp_path)
    runner = CliRunner()
    subset = runner.invoke(main, [
        "rules", "add-subset-rules", "--table", "hr.regions", "--dml-condition", "region_id=2",
        "--streams-type", "apply", "--streams-name", "apply", "--config", cfg,
    ])  # fmt: skip
    assert subset.exit_code == 0, subset.output
    assert subset.output.count("STREAMS$_ROW_SUBSET=") == 3
    prop = runner.invoke(main, [
        "rules", "add-schema-propagation-rules", "--schema", "hr", "--streams-name",
        "dbs1_to_dbs2", "--source-queue", "streams_queue", "--destination-queue",
        "streams_queue@dbs2.example.com", "--include-ddl", "--source-database",
        "dbs1.example.com", "--config", cfg,
    ])  # fmt: skip
    assert prop.exit_code == 0, prop.output
    assert "propagation dbs1_to_dbs2" in prop.output
    assert ":ddl.get_base_table_owner()" in prop.output


def test_bad_input_exits_non_zero_with_position(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(main, ["rules", "check", ":dml.get_object_owner() = 'HR' AND"])
    assert bad.exit_code == 1 and "line 1, column 35" in bad.output
    assert runner.invoke(main, ["rules", "check", ":msg.region = 'EUROPE'"]).exit_code == 0
    refused = runner.invoke(main, [
        "rules", "add-table-rules", "--table", "hr.t", "--streams-type", "apply",
        "--streams-name", "a", "--and-condition", ":dml.get_tag() IS NULL",
        "--config", pipeline(tmp_path),
    ])  # fmt: skip
    assert refused.exit_code == 1 and "must be :lcr" in refused.output
    assert not (tmp_path / "rules.yaml").exists()
