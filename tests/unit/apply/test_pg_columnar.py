"""Column-wise netting (changeflow.apply.pg_columnar) runs the statements, with the same
rows and parameters, that the change-by-change netting (pg_bulk.net) runs; or declines."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pytest

from changeflow import lcr
from changeflow.apply import pg_bulk, pg_columnar
from changeflow.apply.pg_statements import StatementBuilder
from changeflow.apply.pg_txns import source_transactions

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TYPES = {int: "INTEGER", str: "VARCHAR2", decimal.Decimal: "NUMBER", float: "BINARY_DOUBLE",
         dt.datetime: "TIMESTAMP WITH TIME ZONE"}


def _values(values: dict[str, Any] | None) -> Any:
    if values is None:
        return None
    # a NULL is given as (None, its column's type)
    return [(k, lcr.encode_value(*v) if isinstance(v, tuple) else
             lcr.encode_value(v, TYPES[type(v)])) for k, v in values.items()]


def _table(*txns: list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]],
           keys: tuple[str, ...] = ("ID",)) -> pa.Table:
    rows = []
    for scn, changes in enumerate(txns, 1):
        for pos, (table, cmd, new, old) in enumerate(changes, 1):
            rows.append({
                "msg_id": f"m{scn}.{pos}", "kind": "ROW", "command_type": cmd,
                "source_database_name": "DB1", "transaction_id": f"x{scn}", "commit_scn": scn,
                "commit_time": T0, "position": pos, "object_owner": "HR", "object_name": table,
                "key_columns": list(keys), "new_values": _values(new), "old_values": _values(old)})
    return pa.Table.from_pylist(rows, schema=lcr.arrow_schema())


class Recorder(pg_bulk.BulkApplier):
    """Records the statements instead of running them."""

    def __init__(self) -> None:  # no connection
        self.log: list[Any] = []

    def _eligible(self, t: Any) -> Any:
        return None

    def run_columns(self, t: Any, info: Any, op: str, cols: tuple[str, ...],
                    checked: tuple[str, ...], params: list[Any], n_rows: int) -> None:
        self.log.append((t.owner, t.name, op, cols, checked,
                         [bytes(p) if isinstance(p, pg_bulk.Int8Array) else p for p in params],
                         n_rows))

    def record(self, txns: list[Any], apply_name: str) -> None:
        self.log.append(("done", [t.id for t in txns]))


def _both(table: pa.Table, builder: StatementBuilder | None = None, skip: int = 0
          ) -> list[Any] | None:
    """The statements of the column-wise netting (None if it declines), after checking
    they are those of pg_bulk.net; of a group without the first ``skip`` transactions."""
    builder = builder or StatementBuilder(None, {}, {})  # type: ignore[arg-type]
    txns, _ = source_transactions(table)
    txns = txns[skip:]
    plan = pg_columnar.net(builder, txns)
    if plan is None:
        return None
    columnar = Recorder()
    pg_columnar.apply(columnar, plan, txns, "a")
    python = Recorder()
    python.apply(pg_bulk.net(builder, txns), txns, "a")
    assert columnar.log == python.log
    return columnar.log


def test_inserts_updates_deletes_and_update_chains_of_two_tables() -> None:
    log = _both(_table(
        [("T", "INSERT", {"ID": 1, "V": "a", "N": decimal.Decimal("1.5")}, None),
         ("U", "UPDATE", {"ID": 7, "W": 1}, {"ID": 7})],
        [("T", "UPDATE", {"ID": 2, "V": "b", "N": (None, "NUMBER")}, {"ID": 2}),
         ("U", "UPDATE", {"ID": 7, "W": 2}, {"ID": 7}),
         ("T", "DELETE", None, {"ID": 3})],
        [("T", "UPDATE", {"ID": 2, "V": "c", "N": decimal.Decimal("2")}, {"ID": 2}),
         ("U", "UPDATE", {"ID": 8, "W": 3}, {"ID": 8}),
         ("T", "INSERT", {"ID": 4, "V": (None, "VARCHAR2"), "N": (None, "NUMBER")},
              None)]))
    assert log is not None
    ops = [(e[1], e[2], e[6]) for e in log[:-1]]
    assert ops == [("T", "delete", 1), ("T", "update", 1), ("T", "insert", 2),
                   ("U", "update", 2)]
    t_update = log[1][5]
    assert t_update[1:3] == [["c"], [decimal.Decimal("2")]]  # the chain's last values
    assert log[-1][0] == "done" and len(log[-1][1]) == 3
    # a later group of the round: its rows start inside the table's value maps
    assert _both(_table(
        [("T", "INSERT", {"ID": 9, "V": "z", "N": decimal.Decimal("0")}, None)],
        [("T", "UPDATE", {"ID": 2, "V": "b", "N": decimal.Decimal("1")}, {"ID": 2})],
        [("T", "UPDATE", {"ID": 2, "V": "c", "N": decimal.Decimal("2")}, {"ID": 2})]),
        skip=1) is not None


def test_a_composite_key_and_values_of_every_logical_type() -> None:
    new = {"A": 1, "B": "k", "S": "x", "D": decimal.Decimal("-0.25"), "F": 0.5,
           "TS": T0 + dt.timedelta(microseconds=1)}
    assert _both(_table([("T", "INSERT", new, None)],
                        [("T", "UPDATE", {**new, "S": "y"}, {"A": 1, "B": "k"})],
                        [("T", "UPDATE", {**new, "A": 2, "S": "z"}, {"A": 2, "B": "k"})],
                        keys=("A", "B"))) is None  # inserted, then updated: declined
    log = _both(_table([("T", "UPDATE", {**new, "S": "y"}, {"A": 1, "B": "k"})],
                       [("T", "UPDATE", {**new, "A": 2, "S": "z"}, {"A": 2, "B": "k"})],
                       [("T", "UPDATE", {**new, "S": "w"}, {"A": 1, "B": "k"})],
                       keys=("A", "B")))
    assert log is not None and log[0][6] == 2


@pytest.mark.parametrize("txns", [
    # a key inserted then updated, updated then deleted, deleted then inserted
    [[("T", "INSERT", {"ID": 1, "V": "a"}, None)], [("T", "UPDATE", {"ID": 1, "V": "b"},
                                                    {"ID": 1})]],
    [[("T", "UPDATE", {"ID": 1, "V": "a"}, {"ID": 1})], [("T", "DELETE", None, {"ID": 1})]],
    [[("T", "DELETE", None, {"ID": 1})], [("T", "INSERT", {"ID": 1, "V": "a"}, None)]],
    # an UPDATE of the key; old values besides the key (compared); columns left out
    [[("T", "UPDATE", {"ID": 2, "V": "a"}, {"ID": 1})]],
    [[("T", "UPDATE", {"ID": 1, "V": "b"}, {"ID": 1, "V": "a"})]],
    [[("T", "UPDATE", {"ID": 1, "V": "a"}, {"ID": 1})], [("T", "UPDATE", {"ID": 2},
                                                          {"ID": 2})]],
    # a column of two logical types; a floating-point key
    [[("T", "INSERT", {"ID": 1, "V": "a"}, None)], [("T", "INSERT", {"ID": 2, "V": 3}, None)]],
    [[("T", "INSERT", {"ID": 1.5, "V": "a"}, None)]],
])
def test_what_it_cannot_net_column_wise_is_left_to_pg_bulk_net(txns: Any) -> None:
    assert _both(_table(*txns)) is None


def test_import_tables_and_redelivered_messages_are_declined() -> None:
    table = _table([("T", "INSERT", {"ID": 1, "V": "a"}, None),
                    ("T", "INSERT", {"ID": 2, "V": "b"}, None)])
    importing = StatementBuilder(None, {}, {"HR.T": "hr.t_import"})  # type: ignore[arg-type]
    assert _both(table, importing) is None
    # the first message again: the transaction's rows are no longer one run of the table
    assert _both(pa.concat_tables([table, table.slice(0, 1)])) is None
    assert _both(table) is not None
