"""The Arrow rollup flags what the Spark rollup flags, and GX validates it on pandas."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from changeflow import lcr
from changeflow.quality import arrow_facts, facts, validator

from .conftest import T0, row_lcr

pytestmark = pytest.mark.spark

LATER = T0 + dt.timedelta(seconds=5)
USER = row_lcr(9, kind="USER", command_type=None, transaction_id=None, commit_scn=None,
               msg_type_name="T", enq_time=T0, old_values=None, new_values=None)
KEYS6 = [f"K{i}" for i in range(6)]
FULL6 = {k: lcr.encode_value(1) for k in KEYS6}

CASES: dict[str, list[dict[str, Any]]] = {
    "clean": [row_lcr(1), row_lcr(2, "UPDATE"), row_lcr(3, "DELETE"), USER],
    "fields": [row_lcr(1), row_lcr(2, object_name=None), row_lcr(3, commit_scn=None),
               row_lcr(4, kind="ROWS"), row_lcr(5, origin="ELSEWHERE"),
               row_lcr(6, command_type="MERGE")],
    "images": [row_lcr(1, "INSERT", old_values={"REGION_ID": lcr.encode_value(9)}),
               row_lcr(2, "DELETE", new_values={"REGION_ID": lcr.encode_value(9)}),
               row_lcr(3, "UPDATE", old_values={"REGION_NAME": lcr.encode_value("x")}),
               row_lcr(4, "UPDATE", key_columns=[]), row_lcr(5, "UPDATE", key_columns=None),
               row_lcr(6, "UPDATE", new_values=None), row_lcr(7, "UPDATE"),
               row_lcr(8, "UPDATE", key_columns=KEYS6, old_values=FULL6, new_values=FULL6),
               row_lcr(9, "UPDATE", key_columns=KEYS6, old_values=FULL6,
                       new_values=dict(list(FULL6.items())[:5]))],
    "transactions": [
        row_lcr(1, transaction_id="a", commit_scn=10),
        row_lcr(2, transaction_id="a", commit_scn=11),
        row_lcr(3, transaction_id="b", commit_scn=12, commit_time=LATER),
        row_lcr(4, transaction_id="c", commit_scn=12, commit_time=LATER),
        row_lcr(5, transaction_id="d", commit_scn=5, commit_time=LATER + dt.timedelta(1)),
        row_lcr(6, transaction_id="e", commit_scn=20, commit_time=LATER + dt.timedelta(2)),
        row_lcr(7, transaction_id="e", commit_scn=20, commit_time=LATER + dt.timedelta(3)),
        row_lcr(8, transaction_id="f", source_database_name="OTHER.DB", commit_scn=1)],
    # PostgreSQL: a commit timestamp is taken before the commit record is written, so two
    # transactions committing at once may have times and positions in opposite orders
    "concurrent_commits": [
        row_lcr(1, transaction_id="a", commit_scn=10),
        row_lcr(2, transaction_id="b", commit_scn=30, commit_time=LATER),
        row_lcr(3, transaction_id="c", commit_scn=20,
                commit_time=LATER + dt.timedelta(milliseconds=1)),
        row_lcr(4, transaction_id="d", commit_scn=25,
                commit_time=LATER + dt.timedelta(milliseconds=999)),
        row_lcr(5, transaction_id="e", commit_scn=29,
                commit_time=LATER + dt.timedelta(seconds=1))],  # a second after b: below it
    "duplicate_ids": [row_lcr(1), row_lcr(1), row_lcr(2)],
    "missing_key": [row_lcr(1, "UPDATE"),
                    row_lcr(2, "UPDATE", key_columns=KEYS6, old_values=FULL6,
                            new_values=dict(list(FULL6.items())[1:]))],
}
PRIOR = {"DBS1.EXAMPLE.COM": 11}  # the transactions case goes below it once


def _prior(case: str) -> dict[str, int]:
    return PRIOR if case == "transactions" else {"DBS1.EXAMPLE.COM": 9}


def _arrow(messages: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(messages, schema=lcr.arrow_schema())


def _spark_rollup(spark: Any, messages: list[dict[str, Any]],
                  prior: dict[str, int]) -> dict[Any, dict[str, Any]]:
    rows = [tuple(m[n] for n in lcr.FIELD_NAMES) for m in messages]
    df = spark.createDataFrame(rows, lcr.spark_schema())
    txn = facts.transaction_facts(facts.message_facts(df, keep=["transaction_id"]), prior,
                                  keep=["transaction_id"])
    return {(r.source_database_name, r.transaction_id): r.asDict() for r in txn.collect()}


def _none(v: Any) -> Any:
    import pandas as pd

    return None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v


@pytest.mark.parametrize("case", sorted(CASES))
def test_rollup_matches_spark(spark, case: str) -> None:  # type: ignore[no-untyped-def]
    messages = CASES[case]
    want = _spark_rollup(spark, messages, _prior(case))
    got = arrow_facts.batch_facts(_arrow(messages), _prior(case))
    rows = {(r["source_database_name"], r["transaction_id"]): r
            for r in got.rollup.to_dict("records")}
    assert set(rows) == set(want)
    columns = ["n", "min_scn", "max_scn", "prev_scn", "prior_scn",
               *[f"{c}_violations" for c in facts.MESSAGE_CHECKS], *facts.TRANSACTION_CHECKS]
    for key, w in want.items():
        assert {c: _none(rows[key][c]) for c in columns} == {c: w[c] for c in columns}, key
    ids = [m["msg_id"] for m in messages if m["msg_id"] is not None]
    assert got.ids == (len(ids), len(set(ids)))


def test_watermarks_and_clean_batch_passes_gx_on_pandas() -> None:
    got = arrow_facts.batch_facts(_arrow(CASES["clean"]), {"DBS1.EXAMPLE.COM": 3,
                                                           "ELSE.DB": 7})
    assert got.watermarks == {"DBS1.EXAMPLE.COM": 10, "ELSE.DB": 7}
    run = validator.validate(got.rollup, "lcr_batch")
    assert run.success and len(run.results) == len(validator.suite_definition(
        "lcr_batch")["expectations"])


@pytest.mark.parametrize(("case", "failed"), [
    ("fields", {"required_fields", "kind_allowed", "origin_allowed", "command_type_allowed"}),
    ("images", {"insert_no_old_values", "delete_no_new_values", "update_has_key"}),
    ("transactions", {"transaction_single_commit_scn", "transaction_single_commit_time",
                      "commit_scn_one_transaction", "commit_order_in_batch",
                      "commit_order_across_batches"}),
    ("duplicate_ids", {"unique_msg_id"}),
    ("concurrent_commits", {"commit_order_in_batch"}),
    ("missing_key", {"update_has_key"}),
])
def test_gx_on_pandas_fails_the_defective_checks(case: str, failed: set[str]) -> None:
    run = validator.validate(arrow_facts.batch_facts(_arrow(CASES[case]), _prior(case)).rollup,
                             "lcr_batch")
    assert {r.check for r in run.results if not r.success} == failed


def _key_table() -> pa.Table:
    """Messages whose key names are in their own map, another message's map, or none."""
    vtype = lcr.arrow_schema().field("new_values").type
    v = {"type": "VARCHAR2", "str": "x"}
    rows = [  # (key_columns, new_values, has its keys)
        (["A"], [("A", v)], True),
        (["A", "B"], [("B", v), ("A", v)], True),
        (["B"], [("A", v)], False),          # B is only in the next message's map
        (["C"], [("B", v), ("C", v)], True),
        ([None], [("A", v)], False),         # a NULL name is never a key
        (["Z"], [("A", v)], False),          # a name no map has
        ([], [("A", v)], False),             # no key named
        (None, [("A", v)], False),
        (["A"], None, False),                # no map
        (["A"], [], False),
    ]
    table = pa.table({"key_columns": pa.array([r[0] for r in rows], pa.list_(pa.string())),
                      "new_values": pa.array([r[1] for r in rows], vtype),
                      "want": pa.array([r[2] for r in rows])})
    return pa.concat_tables([table.slice(0, 3), table.slice(3)])  # two chunks


@pytest.mark.parametrize("bitmap", [True, False])
def test_has_keys_matches_names_within_each_message(monkeypatch, bitmap: bool) -> None:  # type: ignore[no-untyped-def]
    if not bitmap:
        monkeypatch.setattr(arrow_facts, "BITMAP_PAIRS", 0)
    table = _key_table()
    got = arrow_facts._has_keys(table, "new_values").to_pylist()
    assert got == table.column("want").to_pylist()
    assert arrow_facts._has_keys(table.slice(0, 0), "new_values").to_pylist() == []
