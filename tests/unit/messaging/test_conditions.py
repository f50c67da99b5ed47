"""AQ-style conditions on the rules engine: rewriting, positions, evaluation."""

from __future__ import annotations

import datetime as dt

import pytest

from changeflow.lcr import encode_value
from changeflow.messaging.conditions import compile_condition, matches
from changeflow.messaging.errors import SelectorError

PROPS = {"AQ$PRIORITY": 1, "AQ$CORRID": "job-7", "AQ$RETRY_COUNT": 0,
         "AQ$ENQ_TIME": dt.datetime(2024, 2, 1, 12)}


@pytest.mark.parametrize("text, fields, expected", [
    ("priority = 1", {}, True),
    ("JMSPriority > 1", {}, False),
    ("corrid LIKE 'job-%'", {}, True),
    ("tab.user_data.region = 'WEST'", {"REGION": "WEST"}, True),
    ("user_data.region = 'EAST'", {"REGION": "WEST"}, False),
    (":msg.region = 'WEST' AND priority < 3", {"REGION": "WEST"}, True),
    ("Region = 'Western'", {"REGION": "Western"}, True),  # JMS property (seed 002)
    ("tab.user_data.amount > 10.5", {"AMOUNT": encode_value(11, "NUMBER")}, True),
    ("tab.user_data.amount > 10.5", {"AMOUNT": None}, False),  # NULL is not TRUE
    ("enq_time < TIMESTAMP '2024-03-01 00:00:00'", {}, True),
    ("tab.priority IN (1, 2) AND NOT (tab.user_data.region IS NULL)", {"REGION": "X"}, True),
    ("UPPER(tab.user_data.region) = 'WEST'", {"REGION": "west"}, True),
])
def test_conditions_evaluate_like_aq(text: str, fields: dict, expected: bool) -> None:
    assert matches(compile_condition(text), fields, PROPS) is expected


@pytest.mark.parametrize("text, column, message", [
    ("priority = = 1", 12, "expected a value"),
    ("tab.user_data.region = 'WEST", 24, "unterminated string"),
    ("tab.nothing = 1", 5, "unknown column 'nothing'"),
    (":dml.get_object_owner() = 'HR'", 1, ":dml is not available here"),
    ("priority = 1 AND tab.user_data.", 32, "field name"),
    ("", 1, "empty"),
])
def test_errors_point_into_the_text_as_written(text: str, column: int, message: str) -> None:
    with pytest.raises(SelectorError, match=message) as info:
        compile_condition(text)
    assert (info.value.line, info.value.column) == (1, column)


def test_fields_of_an_object_type_are_checked() -> None:
    compile_condition("tab.user_data.region = 'W'", ("id", "region"))
    with pytest.raises(SelectorError, match="column 15: the payload type has no field 'regio'"):
        compile_condition("tab.user_data.regio = 'W'", ("id", "region"))


def test_multi_line_condition_positions() -> None:
    with pytest.raises(SelectorError) as info:
        compile_condition("priority = 1\n  AND tab.user_data.x ==")
    assert info.value.line == 2


def test_too_long() -> None:
    with pytest.raises(SelectorError, match="at most 4000"):
        compile_condition("priority = 1 OR " * 300 + "priority = 2")
