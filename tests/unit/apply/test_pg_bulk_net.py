"""Netting a group of source transactions per key (changeflow.apply.pg_bulk.net)."""

from __future__ import annotations

from typing import Any

import pytest

from changeflow.apply.pg_bulk import NotBulk, net
from changeflow.apply.pg_statements import StatementBuilder
from changeflow.apply.pg_txns import SourceTxn

# net() never touches the connection: it only reads the builder's settings
BUILDER = StatementBuilder(None, {}, {})  # type: ignore[arg-type]


def _lcr(cmd: str, new: dict[str, Any] | None = None, old: dict[str, Any] | None = None,
         table: str = "T") -> dict[str, Any]:
    return {"kind": "ROW", "command_type": cmd, "object_owner": "HR", "object_name": table,
            "key_columns": ["ID"], "new_values": new, "old_values": old, "msg_id": "m",
            "position": 0}


def _txns(*groups: list[dict[str, Any]]) -> list[SourceTxn]:
    return [SourceTxn("DB", i, f"t{i}", None, given=list(g)) for i, g in enumerate(groups)]


def _rows(*groups: list[dict[str, Any]], builder: StatementBuilder = BUILDER
          ) -> dict[tuple[Any, ...], Any]:
    return net(builder, _txns(*groups))[("HR", "T")].rows


def test_insert_then_updates_is_one_insert_of_the_final_values() -> None:
    rows = _rows([_lcr("INSERT", {"ID": 1, "V": 1, "W": "a"})],
                 [_lcr("UPDATE", {"ID": 1, "V": 2}, {"ID": 1, "V": 1})],
                 [_lcr("UPDATE", {"ID": 1, "W": "b"}, {"ID": 1, "W": "a"})])
    r = rows[(1,)]
    assert (r.base, r.row, r.inserted) == (None, {"ID": 1, "V": 2, "W": "b"}, True)


def test_update_chain_checks_the_first_old_values_and_sets_the_merged_columns() -> None:
    rows = _rows([_lcr("UPDATE", {"ID": 1, "V": 2}, {"ID": 1, "V": 1})],
                 [_lcr("UPDATE", {"ID": 1, "V": 3, "W": "x"}, {"ID": 1, "V": 2, "W": "w"})])
    r = rows[(1,)]
    # W was not changed by the first UPDATE: its old value is checked against the target
    assert r.base == {"V": 1, "W": "w"}
    assert (r.cols, r.inserted) == ({"ID": 1, "V": 3, "W": "x"}, False)


def test_update_then_delete_is_a_delete_checking_the_first_old_values() -> None:
    r = _rows([_lcr("UPDATE", {"ID": 1, "V": 2}, {"ID": 1, "V": 1})],
              [_lcr("DELETE", None, {"ID": 1, "V": 2})])[(1,)]
    assert (r.base, r.row) == ({"V": 1}, None)


def test_insert_then_delete_leaves_a_key_that_must_be_absent() -> None:
    r = _rows([_lcr("INSERT", {"ID": 1, "V": 1})], [_lcr("DELETE", None, {"ID": 1, "V": 1})]
              )[(1,)]
    assert (r.base, r.row) == (None, None)


def test_delete_then_insert_replaces_the_row() -> None:
    r = _rows([_lcr("DELETE", None, {"ID": 1, "V": 1})], [_lcr("INSERT", {"ID": 1, "V": 5})]
              )[(1,)]
    assert (r.base, r.row, r.inserted) == ({"V": 1}, {"ID": 1, "V": 5}, True)


@pytest.mark.parametrize(("groups", "why"), [
    ([[_lcr("DELETE", None, {"ID": 1})], [_lcr("UPDATE", {"ID": 1, "V": 1}, {"ID": 1})]],
     "deleted"),
    ([[_lcr("INSERT", {"ID": 1, "V": 1})], [_lcr("INSERT", {"ID": 1, "V": 2})]],
     "already has"),
    ([[_lcr("UPDATE", {"ID": 1, "V": 2}, {"ID": 1, "V": 1})],
      [_lcr("UPDATE", {"ID": 1, "V": 3}, {"ID": 1, "V": 7})]], "old value of V"),
    ([[_lcr("UPDATE", {"ID": 2, "V": 2}, {"ID": 1, "V": 1})]], "key column"),
    ([[{**_lcr("CREATE TABLE"), "kind": "DDL"}]], "DDL"),
])
def test_what_only_the_one_by_one_apply_handles_is_refused(groups: Any, why: str) -> None:
    with pytest.raises(NotBulk, match=why):
        _rows(*groups)


def test_compared_columns_follow_the_apply_setting() -> None:
    builder = StatementBuilder(None, {}, {}, compare={"hr.t": ["W"]})  # type: ignore[arg-type]
    r = _rows([_lcr("UPDATE", {"ID": 1, "V": 2}, {"ID": 1, "V": 1, "W": "a"})],
              builder=builder)[(1,)]
    assert r.base == {"W": "a"}
    with pytest.raises(NotBulk, match="detection is off"):
        net(StatementBuilder(None, {}, {}, detect=False),  # type: ignore[arg-type]
            _txns([_lcr("INSERT", {"ID": 1})]))
