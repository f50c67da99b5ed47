"""The Python evaluator against the golden cases, with plain and typed values."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from changeflow import lcr
from changeflow.rules.evaluate import evaluate
from changeflow.rules.parser import parse

_spec = importlib.util.spec_from_file_location("rules_golden", Path(__file__).parent / "golden.py")
golden = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(golden)  # type: ignore[union-attr]
CASES = golden.golden_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_golden_case(case: dict) -> None:
    assert evaluate(parse(case["condition"]), case["message"]) is case["expected"]


def _decoded(msg: dict) -> dict:
    out = dict(msg)
    for key in ("old_values", "new_values", "payload"):
        if key in out:
            out[key] = {k: lcr.decode_value(v) for k, v in out[key].items()}
    return out


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if "typed_null" not in c["id"] and "present_null" not in c["id"]
     and c["id"] not in ("msg_is_null", "msg_vs_msg")],
    ids=lambda c: c["id"],
)
def test_golden_case_with_decoded_values(case: dict) -> None:
    """Plain Python values give the same answers (typed NULLs excepted: they need a type)."""
    assert evaluate(parse(case["condition"]), _decoded(case["message"])) is case["expected"]


def test_golden_cases_cover_all_three_truth_values() -> None:
    assert {c["expected"] for c in CASES} == {True, False, None}
