"""The survey of a pass's messages: per transaction, and per table from the same job."""

from __future__ import annotations

from typing import Any

import pytest

from changeflow import lcr
from changeflow.apply import survey
from changeflow.apply.positions import TxnId

from .conftest import T0, ddl, row, user_msg, vals

pytestmark = pytest.mark.spark

SRC = "DBS1.EXAMPLE.COM"


def _frame(spark: Any, messages: list[dict[str, Any]]) -> Any:
    """Messages as a frame typed as the queue's (through Arrow, as the queue reads them)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    table = pa.Table.from_pylist([{n: m[n] for n in lcr.FIELD_NAMES} for m in messages],
                                 schema=lcr.arrow_schema())
    return spark.createDataFrame(table).select(
        *[F.col(f.name).cast(f.dataType) for f in lcr.spark_schema().fields])


def _messages() -> list[dict[str, Any]]:
    return [
        row("INSERT", new=vals(id=1, name="a", sal=1), txn="t1", scn=10, pos=1),
        row("UPDATE", old=vals(id=1, name="a"), new=vals(id=1, name="b"), txn="t1", scn=10,
            pos=2),
        row("DELETE", old=vals(dept=7, dname="x"), table="HR.DEPT", key=("DEPT",),
            txn="t1", scn=10, pos=3),
        row("INSERT", new=vals(id=2, name="c", sal=2), txn="t2", scn=20, pos=1),
        row("LOB_TRIM", new=vals(id=2, name="c"), txn="t2", scn=20, pos=5),
        row("FOO", new=vals(dept=8), table="HR.DEPT", key=("DEPT",), txn="t2", scn=20,
            pos=3),
        row("UPDATE", old=vals(id=2, name="c"), new=vals(id=2, name="d"), txn="t2", scn=20,
            pos=4),
        ddl("ALTER TABLE hr.emp ADD (x NUMBER)", "ALTER TABLE", txn="d1", scn=30),
        user_msg(1, order=5), user_msg(2, order=6),
    ]


def _shape(s: survey.TableShape) -> tuple[Any, ...]:
    # update_sets may repeat a set (one per transaction): only which sets occur counts
    return (s.key_columns, s.columns, sorted({tuple(sorted(u)) for u in s.update_sets}),
            sorted(s.old_columns), s.n)


def test_one_job_gives_the_transactions_and_the_table_shapes(spark: Any) -> None:
    from pyspark.sql import functions as F

    df = _frame(spark, _messages())
    txns, users = survey.transactions(df)
    assert users == 2
    assert [(t.id, t.n, t.tables, t.has_ddl) for t in txns] == [
        (TxnId(SRC, 10, "t1"), 3, {"hr.emp", "hr.dept"}, False),
        (TxnId(SRC, 20, "t2"), 4, {"hr.emp", "hr.dept"}, False),
        (TxnId(SRC, 30, "d1"), 1, set(), True)]
    assert [t.commit_time for t in txns] == [T0.replace(second=s, tzinfo=None)  # UTC session
                                             for s in (10, 20, 30)]
    # The first LCR (by position) whose command type is not one the contract allows.
    bad = txns[1].bad_command
    assert bad is not None and (bad[0], bad[2], bad[3]) == (3, "FOO", "ROW")
    assert txns[0].bad_command is None and txns[2].bad_command is None
    # The shapes of the surveyed transactions are what a look at their rows gives.
    every = survey.tables(df)
    assert {n: _shape(s) for n, s in survey.shapes_of(txns).items()} == {
        n: _shape(s) for n, s in every.items()}
    assert _shape(every["hr.emp"]) == (
        ["id"], [("id", "INTEGER"), ("name", "VARCHAR2"), ("sal", "INTEGER")],
        [("id", "name")], ["id", "name"], 5)
    first = survey.tables(df.where(F.col("transaction_id") == "t1"))
    assert {n: _shape(s) for n, s in survey.shapes_of(txns[:1]).items()} == {
        n: _shape(s) for n, s in first.items()}
    assert survey.shapes_of(txns[2:]) == {}
