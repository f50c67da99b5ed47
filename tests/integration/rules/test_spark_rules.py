"""The Spark backend agrees with the Python evaluator; filters and row migration in Spark."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from changeflow import lcr
from changeflow.rules import admin
from changeflow.rules.parser import parse
from changeflow.rules.registry import RuleRegistry
from changeflow.rules.ruleset import Rule, RuleSet, RuleSetPair
from changeflow.rules.spark_compile import compile_condition

_path = Path(__file__).parents[2] / "unit" / "rules" / "golden.py"
_spec = importlib.util.spec_from_file_location("rules_golden_spark", _path)
golden = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(golden)  # type: ignore[union-attr]
CASES = golden.golden_cases()

pytestmark = pytest.mark.spark


def _frame(spark, messages: list[dict]):
    rows = [golden.spark_row(m, f"m{i}") for i, m in enumerate(messages)]
    return spark.createDataFrame(rows, lcr.spark_schema())


def test_golden_cases_agree_with_python(spark) -> None:
    df = _frame(spark, [c["message"] for c in CASES])
    cols = [compile_condition(parse(c["condition"])).alias(f"c{i}") for i, c in enumerate(CASES)]
    rows = {r["msg_id"]: r for r in df.select("msg_id", *cols).collect()}
    actual = {c["id"]: rows[f"m{i}"][f"c{i}"] for i, c in enumerate(CASES)}
    expected = {c["id"]: c["expected"] for c in CASES}
    assert actual == expected


def _regions(cmd: str, old: int | None, new: int | None, **extra) -> dict:
    msg = {"kind": "ROW", "object_owner": "HR", "object_name": "REGIONS", "command_type": cmd,
           "source_database_name": "DBS1.EXAMPLE.COM"}
    if old is not None:
        msg["old_values"] = {"REGION_ID": lcr.encode_value(old), "NAME": lcr.encode_value("n")}
    if new is not None:
        msg["new_values"] = {"REGION_ID": lcr.encode_value(new)}
    msg.update(extra)
    return msg


def test_subset_rules_migrate_rows_in_spark(spark) -> None:
    reg = RuleRegistry()
    admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "apply", "q",
                           source_database="dbs1.example.com")
    messages = [
        _regions("INSERT", None, 2), _regions("INSERT", None, 3),
        _regions("UPDATE", 4, 2), _regions("UPDATE", 2, 1), _regions("UPDATE", 2, 2),
        _regions("UPDATE", 1, 1), _regions("DELETE", 2, None), _regions("DELETE", 5, None),
        _regions("UPDATE", 2, 2, tag=b"\x01"),
    ]
    out = reg.client("apply").filter(_frame(spark, messages))
    got = sorted(
        (r["msg_id"], r["command_type"], r["old_values"] is None, r["new_values"] is None)
        for r in out.collect()
    )
    assert got == [
        ("m0", "INSERT", True, False), ("m2", "INSERT", True, False),
        ("m3", "DELETE", False, True), ("m4", "UPDATE", False, False),
        ("m6", "DELETE", False, True),
    ]
    merged = {r["msg_id"]: r for r in out.collect()}["m2"]["new_values"]
    assert set(merged) == {"REGION_ID", "NAME"} and merged["REGION_ID"]["int"] == 2
    assert out.columns == lcr.spark_schema().fieldNames()


def _random_message(rng: random.Random, i: int) -> dict:
    kind = rng.choice(["ROW", "ROW", "ROW", "DDL", "USER"])
    msg = {"kind": kind, "object_owner": rng.choice(["HR", "OE", None]),
           "object_name": rng.choice(["T1", "T2", "REGIONS", "LOCATIONS"]),
           "command_type": rng.choice(["INSERT", "UPDATE", "DELETE"]),
           "source_database_name": rng.choice(["DBS1.EXAMPLE.COM", "DBS2.EXAMPLE.COM"]),
           "tag": rng.choice([None, None, b"\x02"])}
    if kind == "DDL":
        msg["base_table_owner"] = rng.choice(["HR", None])
        msg["base_table_name"] = rng.choice(["T1", "REGIONS", None])
    if kind == "ROW":
        msg["old_values"] = {"REGION_ID": lcr.encode_value(rng.choice([1, 2, None]), "INTEGER")}
        msg["new_values"] = {"REGION_ID": lcr.encode_value(rng.choice([1, 2, 3]))}
    if kind == "USER":
        msg["msg_type_name"] = "STRMADMIN.REGION_PRI_MSG"
        msg["payload"] = {"REGION": lcr.encode_value(rng.choice(["EUROPE", "ASIA"])),
                          "PRIORITY": lcr.encode_value(rng.choice([1, 2]))}
    return msg


def _registry() -> RuleRegistry:
    reg = RuleRegistry()
    for table in ("hr.t1", "oe.t2", "hr.locations"):
        admin.add_table_rules(reg, table, "apply", "apply", "q", include_ddl=True)
    admin.add_schema_rules(reg, "oe", "apply", "apply", "q", source_database="dbs2.example.com")
    admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "apply", "q")
    admin.add_message_rule(reg, "strmadmin.region_pri_msg", ":msg.region = 'EUROPE'",
                           "apply", "apply", "q")
    admin.add_table_rules(reg, "hr.t1", "apply", "apply", "q", include_tagged_lcr=True,
                          inclusion_rule=False, and_condition=":lcr.get_tag() IS NOT NULL")
    admin.add_global_rules(reg, "apply", "apply", "q", include_dml=False, include_ddl=True,
                           include_tagged_lcr=True, inclusion_rule=False,
                           and_condition=":lcr.get_object_name() = 'T2'")
    return reg


def test_fast_path_filter_agrees_with_python_evaluation(spark) -> None:
    rng = random.Random(7)
    messages = [_random_message(rng, i) for i in range(300)]
    pair = _registry().client("apply")
    expected = {}
    for i, m in enumerate(messages):
        ok, out = pair.evaluate(m)
        if ok:
            expected[f"m{i}"] = out["command_type"]
    got = {r["msg_id"]: r["command_type"] for r in pair.filter(_frame(spark, messages)).collect()}
    assert got == expected
    assert 0 < len(got) < len(messages)


@pytest.mark.parametrize(
    ("negative", "positive", "expected"),
    [
        (None, None, ["m0", "m1"]),
        (None, "rules", ["m0"]),
        ("rules", None, ["m1"]),
        ("rules", "rules", []),
        ("empty", None, ["m0", "m1"]),
        ("empty", "rules", ["m0"]),
        (None, "empty", []),
        ("empty", "empty", []),
        ("rules", "empty", []),
    ],
)
def test_table_5_1_in_spark(spark, negative, positive, expected) -> None:
    hr = Rule("HR", "((:dml.get_object_owner() = 'HR') )")
    sets = {None: None, "empty": RuleSet("E"), "rules": RuleSet("R", [hr])}
    pair = RuleSetPair(positive=sets[positive], negative=sets[negative])
    df = _frame(spark, [{"kind": "ROW", "object_owner": "HR"}, {"kind": "ROW",
                                                                "object_owner": "OE"}])
    assert sorted(r["msg_id"] for r in pair.filter(df).collect()) == expected


def test_ten_thousand_rules_compile_and_run(spark) -> None:
    rules = [Rule(f"T{i}", f"((:dml.get_object_owner() = 'S{i % 10}' and "
                  f":dml.get_object_name() = 'T{i}')) and :dml.is_null_tag() = 'Y'")
             for i in range(10_000)]
    pair = RuleSetPair(positive=RuleSet("BIG", rules))
    df = _frame(spark, [{"kind": "ROW", "object_owner": "S7", "object_name": "T9997"},
                        {"kind": "ROW", "object_owner": "S7", "object_name": "T9996"}])
    assert [r["msg_id"] for r in pair.filter(df).collect()] == ["m0"]


def test_many_subset_tables_share_one_compiled_form(spark) -> None:
    reg = RuleRegistry()
    for t in range(30):
        admin.add_subset_rules(reg, f"hr.t{t}", f"region_id={t % 3}", "apply", "apply")
    admin.add_subset_rules(reg, "hr.t1", "region_id=2", "apply", "apply")  # same key twice
    rng = random.Random(11)
    messages = []
    for _ in range(400):
        old, new = rng.choice([0, 1, 2, None]), rng.choice([0, 1, 2])
        messages.append({
            "kind": "ROW", "object_owner": "HR", "object_name": f"T{rng.randrange(32)}",
            "command_type": rng.choice(["INSERT", "UPDATE", "DELETE"]),
            "old_values": {"REGION_ID": lcr.encode_value(old, "INTEGER")},
            "new_values": {"REGION_ID": lcr.encode_value(new)},
        })  # fmt: skip
    pair = reg.client("apply")
    expected = {}
    for i, m in enumerate(messages):
        ok, out = pair.evaluate(m)
        if ok:
            expected[f"m{i}"] = out["command_type"]
    got = {r["msg_id"]: r["command_type"] for r in pair.filter(_frame(spark, messages)).collect()}
    assert got == expected and len(got) > 50


def _mixed_messages(rng: random.Random, n: int) -> list[dict]:
    messages = []
    for _ in range(n):
        cmd = rng.choice(["INSERT", "UPDATE", "DELETE"])
        old = {"REGION_ID": lcr.encode_value(rng.choice([0, 1, 2, None]), "INTEGER"),
               "NAME": lcr.encode_value("old")}
        new = {"REGION_ID": lcr.encode_value(rng.choice([0, 1, 2]))}
        messages.append({
            "kind": "ROW", "object_owner": rng.choice(["HR", "OE", None]),
            "object_name": f"T{rng.randrange(24)}", "command_type": cmd,
            "tag": rng.choice([None, None, b"\x01"]),
            "old_values": old if cmd != "INSERT" else None,
            "new_values": new if cmd != "DELETE" else None,
        })  # fmt: skip
    return messages


def test_table_and_subset_rules_share_one_lookup_join(spark) -> None:
    """Subset rules keyed finer than the table rules (command type) ride on their join."""
    reg = RuleRegistry()
    for t in range(0, 12):
        admin.add_table_rules(reg, f"hr.t{t}", "apply", "apply")
    for t in range(12, 20):
        admin.add_subset_rules(reg, f"hr.t{t}", f"region_id={t % 3}", "apply", "apply")
    admin.add_subset_rules(reg, "hr.t3", "region_id=1", "apply", "apply")  # both kinds
    pair = reg.client("apply")
    plan = pair.positive.spark_plan  # type: ignore[union-attr]
    assert len(plan.lookups) == 1 and len(plan.lookups[0].groups) >= 3
    messages = _mixed_messages(random.Random(5), 500)
    expected = {}
    for i, m in enumerate(messages):
        ok, out = pair.evaluate(m)
        if ok:
            expected[f"m{i}"] = (out["command_type"], sorted(out["new_values"] or {}))
    got = {r["msg_id"]: (r["command_type"], sorted(r["new_values"] or {}))
           for r in pair.filter(_frame(spark, messages)).collect()}  # fmt: skip
    assert got == expected
    assert ("INSERT", ["NAME", "REGION_ID"]) in got.values()  # migrated: old overlaid


@pytest.mark.parametrize("policy", ["LAST_WIN", "EXCEPTION"])
def test_row_migration_overlay_under_either_map_key_policy(spark, policy) -> None:
    reg = RuleRegistry()
    admin.add_subset_rules(reg, "hr.regions", "region_id=2", "apply", "apply")
    before = spark.conf.get("spark.sql.mapKeyDedupPolicy")
    spark.conf.set("spark.sql.mapKeyDedupPolicy", policy)
    try:
        msg = _regions("UPDATE", 4, 2)
        out = reg.client("apply").filter(_frame(spark, [msg])).collect()
    finally:
        spark.conf.set("spark.sql.mapKeyDedupPolicy", before)
    assert [r["command_type"] for r in out] == ["INSERT"]
    assert out[0]["new_values"]["REGION_ID"]["int"] == 2  # the new value wins
    assert out[0]["new_values"]["NAME"]["str"] == "n"


def test_lookup_tables_keep_typed_literals(spark) -> None:
    """Same-shape rules compiled once read their literals from the join, typed."""
    rules = [
        Rule(f"D{i}", f":dml.get_object_owner() = 'HR' and :dml.get_object_name() = 'T{i}' "
             f"and :dml.get_value('NEW', 'AMOUNT').AccessNumber() > {i}.5 "
             f"and :dml.get_value('NEW', 'RAW').AccessRaw() = HEXTORAW('0{i}')")
        for i in range(4)
    ]  # fmt: skip
    pair = RuleSetPair(positive=RuleSet("TYPED", rules))
    assert [len(g.members) for lk in pair.positive.spark_plan.lookups  # type: ignore[union-attr]
            for g in lk.groups] == [4]
    messages = [
        {"kind": "ROW", "object_owner": "HR", "object_name": f"T{i}", "command_type": "INSERT",
         "new_values": {"AMOUNT": lcr.encode_value(amount), "RAW": lcr.encode_value(raw)}}
        for i in range(4) for amount in (i, i + 1) for raw in (bytes([i]), b"\x09")
    ]  # fmt: skip
    expected = sorted(f"m{i}" for i, m in enumerate(messages) if pair.evaluate(m)[0])
    got = sorted(r["msg_id"] for r in pair.filter(_frame(spark, messages)).collect())
    assert got == expected and len(got) == 4


def _agree(spark, pair: RuleSetPair, messages: list[dict]) -> dict:
    expected = {}
    for i, m in enumerate(messages):
        ok, out = pair.evaluate(m)
        if ok:
            expected[f"m{i}"] = (out["command_type"], sorted(out.get("new_values") or {}))
    got = {r["msg_id"]: (r["command_type"], sorted(r["new_values"] or {}))
           for r in pair.filter(_frame(spark, messages)).collect()}  # fmt: skip
    assert got == expected
    return got


def test_single_key_lookups_need_no_join(spark) -> None:
    """One table's subset rules: every key dimension is a constant, no lookup table."""
    reg = RuleRegistry()
    admin.add_subset_rules(reg, "hr.t3", "region_id=1", "apply", "apply")
    pair = reg.client("apply")
    plan = pair.positive.spark_plan  # type: ignore[union-attr]
    assert [lk.joined for lk in plan.lookups] == [[]]
    assert plan.frames(spark) == [None]
    messages = [m for m in _mixed_messages(random.Random(8), 600) if m["object_owner"] == "HR"]
    got = _agree(spark, pair, [{**m, "object_name": f"T{i % 4}"} for i, m in enumerate(messages)])
    assert {c for c, _ in got.values()} == {"INSERT", "UPDATE", "DELETE"}


def test_shared_value_reads_in_both_rule_sets(spark) -> None:
    """Complex rules reading one column many ways, in a positive and a negative set.

    Each distinct column read is one shared column per rule set; the tagged and
    untagged rules make the tag test a join key rather than a constant.
    """
    def rule(name: str, table: str, tagged: bool, extra: str) -> Rule:
        return Rule(name, f":lcr.get_object_owner() = 'HR' and :lcr.get_object_name() = "
                          f"'{table}' and :lcr.is_null_tag() = '{'N' if tagged else 'Y'}' "
                          f"and {extra}")  # fmt: skip

    amount = ":dml.get_value('NEW', 'REGION_ID')"
    positive = RuleSet("P", [
        rule("P1", "T1", False, f"{amount}.AccessNumber() >= 1 and {amount} IS NOT NULL"),
        rule("P2", "T2", True, f"({amount}.AccessNumber() = 2 or {amount}.AccessVarchar2() = 'x')"),
        rule("P3", "T3", False, f":lcr.get_value('OLD', 'NAME').AccessVarchar2() = 'old' "
                                f"and {amount}.AccessNumber() IN (0, 2)"),
        Rule("P4", ":dml.get_object_owner() = 'OE' and :dml.get_object_name() = 'T5' "
                   "and :dml.is_null_tag() = 'N'"),
    ])  # fmt: skip
    negative = RuleSet("N", [
        rule("N1", "T1", False, f"{amount}.AccessNumber() = 2"),
        rule("N2", "T4", False, f"{amount} IS NULL"),
    ])
    pair = RuleSetPair(positive=positive, negative=negative)
    (lookup,) = positive.spark_plan.lookups
    assert lookup.fixed == {0: "ROW"} and lookup.joined == [1, 2, 3]  # owner, name, tag
    mixed = _mixed_messages(random.Random(9), 800)
    messages = [{**m, "object_name": f"T{i % 6}"} for i, m in enumerate(mixed)]
    got = _agree(spark, pair, messages)
    assert 25 < len(got) < len(messages)


def test_constant_key_dimensions_match_like_the_rules(spark) -> None:
    """Tagged-only DDL and DML rules: kind and tag are constants tested, not joined."""
    rules = [
        Rule(f"{kind}{t}", f":{kind}.get_object_owner() = 'HR' and :{kind}.get_object_name() = "
                           f"'T{t}' and :{kind}.is_null_tag() = 'N'")
        for kind in ("dml", "ddl") for t in range(3)
    ]  # fmt: skip
    pair = RuleSetPair(positive=RuleSet("TAGGED", rules))
    lookups = pair.positive.spark_plan.lookups  # type: ignore[union-attr]
    assert [lk.fixed for lk in lookups] == [{1: "HR", 3: "N"}]  # kind and name are joined
    rng = random.Random(4)
    messages = [{**m, "object_name": f"T{rng.randrange(4)}"}
                for m in (_random_message(rng, i) for i in range(400))]  # fmt: skip
    got = _agree(spark, pair, messages)
    assert 10 < len(got) < len(messages)
