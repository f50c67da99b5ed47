"""Each check's fact column flags exactly the defective messages."""

from __future__ import annotations

import datetime as dt

import pytest

from changeflow import lcr
from changeflow.quality import facts

from .conftest import T0, row_lcr

pytestmark = pytest.mark.spark


def _flags(df, check: str) -> dict[int, bool | None]:  # type: ignore[no-untyped-def]
    out = facts.message_facts(df, keep=["position"]).select("position", check).collect()
    return {r.position: r[check] for r in out}


def test_clean_messages_satisfy_every_check(lcr_frame) -> None:  # type: ignore[no-untyped-def]
    df = lcr_frame([row_lcr(1), row_lcr(2, "UPDATE"), row_lcr(3, "DELETE")])
    rows = facts.message_facts(df).collect()
    for r in rows:
        assert all(r[c] in (True, None) for c in facts.MESSAGE_CHECKS), r


@pytest.mark.parametrize(
    ("check", "defect"),
    [
        ("required_fields", {"object_name": None}),
        ("required_fields", {"commit_scn": None}),
        ("kind_allowed", {"kind": "ROWS"}),
        ("origin_allowed", {"origin": "ELSEWHERE"}),
        ("command_type_allowed", {"command_type": "MERGE"}),
    ],
)
def test_field_defects_are_flagged(lcr_frame, check: str, defect: dict) -> None:  # type: ignore[no-untyped-def]
    df = lcr_frame([row_lcr(1), row_lcr(2, **defect)])
    assert _flags(df, check) == {1: True, 2: False}


def test_values_must_match_command_type(lcr_frame) -> None:  # type: ignore[no-untyped-def]
    image = {"REGION_ID": lcr.encode_value(9)}
    df = lcr_frame([
        row_lcr(1, "INSERT", old_values=image),
        row_lcr(2, "DELETE", new_values=image),
        row_lcr(3, "UPDATE", old_values={"REGION_NAME": lcr.encode_value("x")}),
        row_lcr(4, "UPDATE", key_columns=[]),
        row_lcr(5, "UPDATE"),
    ])
    assert _flags(df, "insert_no_old_values") == {1: False, 2: None, 3: None, 4: None, 5: None}
    assert _flags(df, "delete_no_new_values") == {1: None, 2: False, 3: None, 4: None, 5: None}
    assert _flags(df, "update_has_key") == {1: None, 2: None, 3: False, 4: False, 5: True}


def test_composite_keys_beyond_the_fast_path(lcr_frame) -> None:  # type: ignore[no-untyped-def]
    keys = [f"K{i}" for i in range(6)]
    full = {k: lcr.encode_value(1) for k in keys}
    part = {k: lcr.encode_value(1) for k in keys[:5]}
    df = lcr_frame([row_lcr(1, "UPDATE", key_columns=keys, old_values=full, new_values=full),
                    row_lcr(2, "UPDATE", key_columns=keys, old_values=full, new_values=part)])
    assert _flags(df, "update_has_key") == {1: True, 2: False}


def test_transaction_checks(lcr_frame) -> None:  # type: ignore[no-untyped-def]
    later = T0 + dt.timedelta(seconds=5)
    df = lcr_frame([
        row_lcr(1, transaction_id="a", commit_scn=10),
        row_lcr(2, transaction_id="a", commit_scn=11),              # two commit positions
        row_lcr(3, transaction_id="b", commit_scn=12, commit_time=later),
        row_lcr(4, transaction_id="c", commit_scn=12, commit_time=later),  # shares scn 12
        row_lcr(5, transaction_id="d", commit_scn=5, commit_time=later + dt.timedelta(1)),
        # a commit time taken before a concurrent commit's, its position after it
        row_lcr(6, transaction_id="e", commit_scn=40, commit_time=later + dt.timedelta(2)),
        row_lcr(7, transaction_id="f", commit_scn=39,
                commit_time=later + dt.timedelta(2, milliseconds=3)),
    ])
    named = facts.message_facts(df, keep=["transaction_id"])
    txn = facts.transaction_facts(named, {"DBS1.EXAMPLE.COM": 11}, keep=["transaction_id"])
    got = {r.transaction_id: r.asDict() for r in txn.collect()}
    assert got["a"]["single_commit_scn"] is False
    assert got["b"]["single_commit_scn"] is True
    assert got["b"]["commit_scn_one_transaction"] is False
    assert got["c"]["commit_scn_one_transaction"] is False
    assert got["d"]["commit_order_in_batch"] is False  # committed last, lowest position
    assert got["d"]["prev_scn"] == 12
    assert got["f"]["commit_order_in_batch"] is True  # 3 ms after 40: within the skew
    assert got["f"]["prev_scn"] == 12  # the highest position a second or more before
    assert got["e"]["commit_order_in_batch"] is True
    assert got["a"]["commit_order_across_batches"] is False  # below the prior mark 11
    assert got["b"]["commit_order_across_batches"] is True


def test_read_schema_prunes_value_maps() -> None:
    schema = facts.read_schema()
    assert "payload" not in schema.fieldNames()
    assert schema["old_values"].dataType.valueType.fieldNames() == ["type"]


def test_rollup_counts_violations_per_transaction(lcr_frame) -> None:  # type: ignore[no-untyped-def]
    user = row_lcr(9, kind="USER", command_type=None, transaction_id=None, commit_scn=None,
                   msg_type_name="T", enq_time=T0, old_values=None, new_values=None)
    df = lcr_frame([row_lcr(1), row_lcr(2, object_name=None), row_lcr(3, command_type="MERGE"),
                    user])
    rows = facts.transaction_facts(facts.message_facts(df)).collect()
    by_key = {r.txn_key is None: r for r in rows}
    txn, loose = by_key[False], by_key[True]
    assert txn.n == 3 and txn.required_fields_violations == 1
    assert txn.command_type_allowed_violations == 1 and txn.single_commit_scn is True
    assert loose.n == 1 and loose.required_fields_violations == 0
    assert loose.single_commit_scn is None  # no transaction: not applicable
