"""Tokenizer, parser and type checker: round trips, precise errors, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changeflow.rules import ast as A
from changeflow.rules.errors import RuleError
from changeflow.rules.parser import parse

ROUND_TRIP = [
    ":dml.get_object_owner() = 'HR'",
    "(:dml.is_null_tag() = 'Y' )",
    ":ddl.get_object_owner() = 'HR' or :ddl.get_base_table_owner() = 'HR'",
    ":dml.get_command_type() NOT IN ('UPDATE', 'INSERT')",
    ":dml.get_value('NEW','\"REGION_ID\"').AccessNumber() >= -2.5",
    "NOT EXISTS (SELECT 1 FROM SYS.DUAL WHERE :dml.get_tag() = HEXTORAW('0a'))",
    ":msg.region LIKE 'EU%' AND :msg.\"MixedCase\" IS NOT NULL",
    "UPPER(:dml.get_object_name()) != 'X' -- trailing comment",
    ":dml.get_value('OLD','\"HIRED\"').AccessDate() < DATE '2020-01-02'",
    "(:a = 1 OR :b = 2) AND :c = 3".replace(":a", ":msg.a").replace(":b", ":msg.b")
    .replace(":c", ":msg.c"),
]


@pytest.mark.parametrize("condition", ROUND_TRIP)
def test_round_trip(condition: str) -> None:
    tree = parse(condition)
    assert parse(A.to_sql(tree)) == tree


def test_precedence_and_flattening() -> None:
    tree = parse(":msg.a = 1 OR :msg.b = 2 AND NOT :msg.c = 3 AND :msg.d = 4")
    assert isinstance(tree, A.Or)
    assert isinstance(tree.items[1], A.And) and len(tree.items[1].items) == 3
    assert isinstance(tree.items[1].items[1], A.Not)


def test_string_escape_and_coercions() -> None:
    tree = parse(":dml.get_value('NEW','\"X\"').AccessNumber() = '2'")
    assert tree.right == A.Literal(__import__("decimal").Decimal("2"), A.NUMBER)
    assert parse(":msg.name = 'O''Hare'").right.value == "O'Hare"


ERRORS = [
    (":dml.get_object_owner( = 'HR'", 1, 24, "expected ')'"),
    (":dml.get_object_owner() = 'HR' AND", 1, 35, "expected a value or a condition"),
    (":dml.get_object_owner() = 'HR", 1, 27, "unterminated string literal"),
    (":foo.get_object_owner() = 'HR'", 1, 1, "unknown variable :foo"),
    (":dml.get_owner() = 'HR'", 1, 6, "unknown LCR member function get_owner"),
    ("SYSDATE() > 1", 1, 1, "unknown function SYSDATE"),
    ("owner = 'HR'", 1, 1, "unknown identifier 'owner'"),
    (":dml.get_object_owner() = 2", 1, 25, "cannot compare VARCHAR2 with NUMBER"),
    (":dml.get_value('NEW','\"A\"') = 2", 1, 1, "returns ANYDATA"),
    (":dml.get_value('MID','\"A\"') IS NULL", 1, 16, "'OLD' or 'NEW'"),
    (":dml.get_value('NEW','\"A\"').AccessFoo() = 1", 1, 29, "unknown accessor AccessFoo"),
    (":dml.get_object_type() = 'TABLE'", 1, 1, "DDL LCRs only"),
    (":ddl.get_value('NEW','\"A\"') IS NULL", 1, 1, "row LCRs only"),
    (":dml.is_null_tag() = 'Y' AND :msg.a = 1", 1, 30, "cannot be used with :dml"),
    (":dml.get_object_owner()", 1, 1, "expected a condition, found a value"),
    (":msg.a = 1 AND 'x'", 1, 16, "expected a condition"),
    (":dml.get_tag() = HEXTORAW('XY')", 1, 27, "hexadecimal"),
    (":dml.get_tag() = 5", 1, 16, "cannot compare RAW with NUMBER"),
    ("EXISTS (SELECT 2 FROM EMP WHERE :msg.a = 1)", 1, 23, "SYS.DUAL"),
    (":msg.a(1) = 2", 1, 7, "without '()'"),
    (":msg.a = 1\n  AND :msg.b ! 2", 2, 14, "unexpected character '!'"),
    ("", 1, 1, "empty"),
    (":msg.a = 1 :msg.b = 2", 1, 12, "after a complete condition"),
    ("(" * 100 + ":msg.a = 1" + ")" * 100, 1, 62, "nested more than"),
    (":msg.a = 1e999999", 1, 10, "out of range"),
    (":dml.get_value('NEW','\"A\"').AccessNumber() LIKE 'x%'", 1, 44, "LIKE needs a VARCHAR2"),
]


@pytest.mark.parametrize(("condition", "line", "column", "message"), ERRORS)
def test_errors_have_positions(condition: str, line: int, column: int, message: str) -> None:
    with pytest.raises(RuleError) as info:
        parse(condition)
    err = info.value
    assert message in str(err)
    assert (err.line, err.column) == (line, column)
    assert err.excerpt.splitlines()[-1].endswith("^")


def test_excerpt_points_at_the_error() -> None:
    with pytest.raises(RuleError) as info:
        parse(":dml.get_object_owner() = 'HR' and :dml.bogus() = 1")
    shown, caret = info.value.excerpt.splitlines()
    assert shown[caret.index("^")] == "b"


TOKENS = st.sampled_from([
    ":dml", ":ddl", ":lcr", ":msg", ':"VAR$_1"', ".", "get_object_owner", "get_value",
    "AccessNumber", "(", ")", ",", "'NEW'", "'\"X\"'", "'HR'", "2", "-", "=", "<>", "<=",
    "AND", "OR", "NOT", "IN", "IS", "NULL", "LIKE", "EXISTS", "SELECT", "1", "FROM", "SYS",
    "DUAL", "WHERE", "HEXTORAW", "'02'", "UPPER", "region", "DATE", "'2020-01-01'", "'",
    '"', "is_null_tag", "'Y'", " ",
])  # fmt: skip


def _only_rule_errors(text: str) -> None:
    try:
        tree = parse(text)
    except RuleError:
        return
    assert parse(A.to_sql(tree)) == tree


@settings(max_examples=400, deadline=2000)
@given(st.text(max_size=200))
def test_fuzz_arbitrary_text(text: str) -> None:
    _only_rule_errors(text)


@settings(max_examples=600, deadline=2000)
@given(st.lists(TOKENS, max_size=40).map(" ".join))
def test_fuzz_token_soup(text: str) -> None:
    _only_rule_errors(text)


def test_huge_inputs_are_refused_quickly() -> None:
    with pytest.raises(RuleError, match="nested"):
        parse("NOT " * 5000 + ":msg.a = 1")
    with pytest.raises(RuleError, match="too long"):
        parse(":msg.a = '" + "x" * 200_000 + "'")
    wide = " OR ".join(f":msg.a = {i}" for i in range(3000))
    assert len(parse(wide).items) == 3000
