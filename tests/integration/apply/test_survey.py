"""The pass's look at its messages (``apply.survey``): per transaction, what the apply
needs before it plans the tables, from real LCRs in a real SparkSession."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from changeflow import lcr
from changeflow.apply import survey

from .conftest import ddl, row, user_msg, vals

pytestmark = pytest.mark.spark


def _frame(spark: Any, messages: list[dict[str, Any]]) -> Any:
    return spark.createDataFrame(messages, lcr.spark_schema())


def test_a_transaction_over_several_tables_is_one_transaction(spark) -> None:  # type: ignore[no-untyped-def]
    late = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    messages = [
        row("INSERT", new=vals(id=1), txn="a", scn=10, pos=1),
        row("INSERT", new=vals(id=2), txn="a", scn=10, pos=2, table="HR.DEPT"),
        row("INSERT", new=vals(id=3), txn="a", scn=10, pos=3, table="HR.DEPT",
            commit_time=late),
        # two unknown command types, on two tables: the first by position is named
        row("MERGE", new=vals(id=4), txn="a", scn=10, pos=7),
        row("UPSERT", new=vals(id=5), txn="a", scn=10, pos=5, table="HR.DEPT"),
        row("UPDATE", new=vals(id=1), old=vals(id=1), txn="b", scn=20, pos=1,
            table="Hr.Emp"),
        ddl("ALTER TABLE HR.EMP ADD (X NUMBER)", "ALTER TABLE", txn="b", scn=20, pos=2),
        user_msg(1), user_msg(2),
    ]
    txns, users = survey.transactions(_frame(spark, messages))
    assert users == 2
    assert [t.id.txn for t in txns] == ["a", "b"]  # in commit order
    a, b = txns
    assert (a.n, a.tables, a.has_ddl) == (5, {"hr.emp", "hr.dept"}, False)
    assert a.commit_time.replace(tzinfo=None) == late.replace(tzinfo=None)  # the latest
    assert a.bad_command is not None
    assert (a.bad_command[0], a.bad_command[2]) == (5, "UPSERT")
    assert (b.n, b.tables, b.has_ddl, b.bad_command) == (2, {"hr.emp"}, True, None)
