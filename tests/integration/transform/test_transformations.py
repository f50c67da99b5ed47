"""Rule-based transformations in Spark: each declarative kind, a user function, bad input,
and transformations attached to capture, propagation and apply rules of a pipeline."""

from __future__ import annotations

import datetime as dt
import decimal
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
from changeflow.rules import Rule, RuleSet, RuleSetPair
from changeflow.transform import admin
from changeflow.transform.client import with_transformations

pytestmark = pytest.mark.spark

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _msg(i: int, table: str, cmd: str, new: dict[str, Any] | None,
         old: dict[str, Any] | None = None) -> dict[str, Any]:
    owner, name = table.split(".")
    row = {f: None for f in lcr.FIELD_NAMES}
    row.update(schema_version=1, msg_id=f"m{i}", kind="ROW", origin="CAPTURED",
               source_database_name="DBS1", command_type=cmd, object_owner=owner,
               object_name=name, transaction_id="t1", commit_scn=10, commit_time=T0,
               position=i, key_columns=["ID"])
    row["new_values"] = {k: lcr.encode_value(v) for k, v in new.items()} if new else None
    row["old_values"] = {k: lcr.encode_value(v) for k, v in old.items()} if old else None
    return row


def _df(spark: Any, rows: list[dict[str, Any]]) -> Any:
    return spark.createDataFrame(rows, lcr.spark_schema())


def _plain(values: Any) -> dict[str, Any] | None:
    return None if values is None else {k: lcr.decode_value(v) for k, v in values.items()}


def _rule(reg_rules: list[Rule]) -> RuleSetPair:
    return RuleSetPair(positive=RuleSet("POS", reg_rules))


def test_declarative_kinds(spark: Any) -> None:
    from changeflow.rules import RuleRegistry

    reg = RuleRegistry()
    emp = reg.add_rule(Rule("EMP", ":dml.get_object_name() = 'EMPLOYEES'"))
    reg.add_rule(Rule("DEP", ":dml.get_object_name() = 'DEPARTMENTS'"))
    admin.delete_column(reg, "EMP", "hr.employees", "ssn")
    admin.rename_column(reg, "EMP", "hr.employees", "id", "emp_id")
    admin.add_column(reg, "EMP", "hr.employees", "region", "EUROPE")
    admin.add_column(reg, "EMP", "hr.employees", "yearly", expression=
                     "new_values['SALARY'].dec * 12", logical_type="NUMBER")
    admin.rename_table(reg, "EMP", "hr.employees", "hr.staff")
    admin.rename_schema(reg, "DEP", "hr", "hr2")
    pair = _rule([emp, reg.rules["DEP"]])
    rows = [
        _msg(1, "HR.EMPLOYEES", "INSERT", {"ID": 1, "SSN": "x", "SALARY": decimal.Decimal(10)}),
        _msg(2, "HR.EMPLOYEES", "DELETE", None, {"ID": 1, "SSN": "x"}),
        _msg(3, "HR.DEPARTMENTS", "INSERT", {"ID": 5, "SSN": "kept"}),
        _msg(4, "HR.JOBS", "INSERT", {"ID": 9}),  # no rule TRUE: discarded by the rule set
    ]
    out = {r["msg_id"]: r for r in with_transformations(pair)(_df(spark, rows)).collect()}
    assert set(out) == {"m1", "m2", "m3"}
    m1 = out["m1"]
    assert (m1.object_owner, m1.object_name, m1.key_columns) == ("HR", "STAFF", ["EMP_ID"])
    assert _plain(m1.new_values) == {"EMP_ID": 1, "SALARY": decimal.Decimal(10),
                                     "REGION": "EUROPE", "YEARLY": decimal.Decimal(120)}
    assert m1.new_values["YEARLY"]["type"] == "NUMBER"
    # add_column touches NEW images only (its default); delete and rename touch both
    assert _plain(out["m2"].old_values) == {"EMP_ID": 1} and out["m2"].new_values is None
    assert (out["m3"].object_owner, out["m3"].object_name) == ("HR2", "DEPARTMENTS")
    assert _plain(out["m3"].new_values) == {"ID": 5, "SSN": "kept"}
    # without transformations a client gets its plain filter back
    plain = RuleSetPair(positive=RuleSet("P", [Rule("X", ":dml.get_object_owner() = 'HR'")]))
    assert with_transformations(plain) == plain.filter


def test_user_function_per_message(spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    mod = tmp_path / "my_transforms.py"
    mod.write_text(textwrap.dedent('''
        def mask(message):
            if message["new_values"].get("ID") == 99:
                return None
            message["new_values"]["EMAIL"] = "***@" + message["new_values"]["EMAIL"].split("@")[1]
            message["new_values"]["SEEN"] = message["commit_time"].replace(tzinfo=None)
            return message
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    rule = Rule("CUST", ":dml.get_object_name() = 'CUSTOMERS'",
                {"STREAMS$_TRANSFORM_FUNCTION": "my_transforms:mask"})
    rows = [_msg(1, "S.CUSTOMERS", "INSERT", {"ID": 1, "EMAIL": "ann@example.com"}),
            _msg(2, "S.CUSTOMERS", "INSERT", {"ID": 99, "EMAIL": "x@y"})]
    out = with_transformations(_rule([rule]))(_df(spark, rows)).collect()
    sys.modules.pop("my_transforms", None)
    assert [r.msg_id for r in out] == ["m1"]
    assert _plain(out[0].new_values) == {"ID": 1, "EMAIL": "***@example.com",
                                         "SEEN": dt.datetime(2024, 1, 1)}
    assert out[0].new_values["ID"]["type"] == "INTEGER"
    assert out[0].new_values["SEEN"]["type"] == "TIMESTAMP"


def test_bad_transformations(spark: Any) -> None:
    from changeflow.rules.transforms import TransformDefinitionError

    rule = Rule("EMP", ":dml.get_object_name() = 'EMPLOYEES'", {
        "STREAMS$_INTERNAL_TRANS": '[{"type":"rename_column","table":"hr.employees",'
                                   '"from":"nickname","to":"alias"}]'})
    rows = [_msg(1, "HR.EMPLOYEES", "INSERT", {"ID": 1})]
    with pytest.raises(Exception, match="rename column HR.EMPLOYEES.NICKNAME to ALIAS: the "
                                        "row has no column NICKNAME"):
        with_transformations(_rule([rule]))(_df(spark, rows)).collect()
    added = Rule("EMP2", ":dml.get_object_name() = 'EMPLOYEES'", {
        "STREAMS$_INTERNAL_TRANS": '[{"type":"add_column","table":"hr.employees",'
                                   '"column":"id","value":1}]'})
    with pytest.raises(Exception, match="the row already has column ID"):
        with_transformations(_rule([added]))(_df(spark, rows)).collect()
    missing = Rule("EMP3", ":dml.get_object_name() = 'EMPLOYEES'",
                   {"STREAMS$_TRANSFORM_FUNCTION": "no_such_module:fn"})
    with pytest.raises(TransformDefinitionError, match="rule EMP3: transform function "
                                                       "'no_such_module:fn' cannot be imported"):
        with_transformations(_rule([missing]))


def _regions_pipeline(spark: Any, tmp_path: Path, rows: list[tuple[Any, ...]], schema: str,
                      rules: str, *, propagated: bool) -> Any:
    """A snapshot capture of hr.regions (``rows``) into queue strm.a, applied by ``app``
    (through propagation ``prop`` into strm.b when ``propagated``); the loaded config."""
    from changeflow.config import load_config

    src = tmp_path / "source" / "hr.regions" / "snap=1"
    spark.createDataFrame(rows, schema).write.parquet(str(src))
    (tmp_path / "rules.yaml").write_text(textwrap.dedent(rules))
    queues = "[{name: strm.a, site: s1}, {name: strm.b, site: s1}]" if propagated \
        else "[{name: strm.a, site: s1}]"
    moves = ("propagations: [{name: prop, source_queue: strm.a, destination_queue: strm.b}]\n"
             "applies: [{name: app, queue: strm.b}]") if propagated \
        else "applies: [{name: app, queue: strm.a}]"
    (tmp_path / "p.yaml").write_text(textwrap.dedent(f"""
        version: 1
        rules: rules.yaml
        sites:
          s1: {{staging_root: s1/staging, target_root: s1/targets,
               state_url: "sqlite:///s1/state.db", database: DBS1}}
        queues: {queues}
        captures:
          - name: cap
            queue: strm.a
            source: {{type: snapshot, database: DBS1, root: {tmp_path / 'source'},
                      tables: [{{name: hr.regions, key: [region_id]}}]}}
    """) + moves + "\n")
    return load_config(tmp_path / "p.yaml")


def test_transformations_at_capture_propagation_and_apply(spark: Any, tmp_path: Path) -> None:
    from changeflow.apply.engine import apply_once, targets_of
    from changeflow.capture.snapshot import run_capture
    from changeflow.clients import rule_filter
    from changeflow.propagation import propagate_once
    from changeflow.targets.read import read_table

    cfg = _regions_pipeline(spark, tmp_path, [(1, "Europe", "x"), (2, "Asia", "y")],
                            "region_id int, region_name string, secret string", """
        rules:
          CAP:
            condition: ":dml.get_object_owner() = 'HR'"
            transformations: [{type: delete_column, table: hr.regions, column: secret}]
          PROP:
            condition: ":dml.get_object_name() = 'REGIONS'"
            transformations: [{type: rename_table, from: hr.regions, to: hr.areas}]
          APP:
            condition: ":dml.get_object_name() = 'AREAS'"
            transformations:
              - {type: add_column, table: hr.areas, column: source, value: "DBS1"}
              - {type: rename_column, table: hr.areas, from: region_name, to: name}
        rule_sets:
          S1: {rules: [CAP]}
          S2: {rules: [PROP]}
          S3: {rules: [APP]}
        clients:
          cap: {type: capture, positive_rule_set: S1}
          prop: {type: propagation, positive_rule_set: S2}
          app: {type: apply, positive_rule_set: S3}
    """, propagated=True)
    run_capture(spark, cfg, "cap", rule_filter(cfg, "capture", "cap"))
    propagate_once(spark, cfg, "prop", rule_filter=rule_filter(cfg, "propagation", "prop"))
    apply_once(spark, cfg, "app", rule_filter=rule_filter(cfg, "apply", "app"))
    catalog = targets_of(cfg, cfg.component("apply", "app"))
    assert catalog.names(spark) == ["hr.areas"]
    got = sorted(tuple(r) for r in read_table(spark, catalog, "hr.areas").collect())
    assert got == [(1, "Europe", "DBS1"), (2, "Asia", "DBS1")]
    assert read_table(spark, catalog, "hr.areas").columns == ["region_id", "name", "source"]


def test_an_apply_calls_a_transform_function_once_per_message(
        spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """An apply pass reads its batches three times (survey, tables, effects); with a
    rule's Python function in the plan it caches them (``worth_caching``): the function
    runs once per message (its effects are the user's)."""
    from changeflow.apply.engine import apply_once, targets_of
    from changeflow.capture.snapshot import run_capture
    from changeflow.clients import rule_filter
    from changeflow.targets.read import read_table

    calls = tmp_path / "calls.txt"
    module = tmp_path / "noting_transforms.py"
    module.write_text(textwrap.dedent(f'''
        def note(message):
            with open({str(calls)!r}, "a") as f:
                f.write(message["msg_id"] + "\\n")
            message["new_values"]["REGION_NAME"] = message["new_values"]["REGION_NAME"].upper()
            return message
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = _regions_pipeline(spark, tmp_path, [(i, f"r{i}") for i in range(1, 6)],
                            "region_id int, region_name string", """
        rules:
          APP:
            condition: ":dml.get_object_name() = 'REGIONS'"
            action_context: {STREAMS$_TRANSFORM_FUNCTION: "noting_transforms:note"}
        rule_sets:
          S3: {rules: [APP]}
        clients:
          app: {type: apply, positive_rule_set: S3}
    """, propagated=False)
    try:
        run_capture(spark, cfg, "cap", None)
        apply_once(spark, cfg, "app", rule_filter=rule_filter(cfg, "apply", "app"))
    finally:
        sys.modules.pop("noting_transforms", None)
    catalog = targets_of(cfg, cfg.component("apply", "app"))
    got = sorted(tuple(r) for r in read_table(spark, catalog, "hr.regions").collect())
    assert got == [(i, f"R{i}") for i in range(1, 6)]
    noted = calls.read_text().split()
    assert len(noted) == 5
    assert sorted(set(noted)) == sorted(noted)
