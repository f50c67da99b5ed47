"""Pure-Python parts of the apply: command types, configuration, DDL parsing, positions,
the conflict fold, handler records and the error queue's records."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pydantic import ValidationError

from changeflow import lcr
from changeflow.apply import conflicts, errorq, positions
from changeflow.apply.config import ConflictConfig, ConflictHandlerSpec, EnqueueDestination
from changeflow.apply.ddl import DdlError, logical_type, parse
from changeflow.apply.handlers import Handlers, load
from changeflow.apply.positions import TxnId
from changeflow.apply.records import HandlerError, RowLCR
from changeflow.state import StateStore
from changeflow.targets.catalog import TargetTable

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def test_command_types_are_one_enum_and_unknown_ones_raise() -> None:
    assert lcr.DML_COMMANDS == ("INSERT", "UPDATE", "DELETE")
    assert lcr.CommandType.parse("truncate table", kind="DDL") is lcr.CommandType.TRUNCATE_TABLE
    for bad, kind in (("UPSERT", "ROW"), (None, "ROW"), ("INSERT", "DDL"), ("ALTER TABLE", "ROW")):
        with pytest.raises(lcr.UnknownCommandTypeError, match="unknown command type"):
            lcr.CommandType.parse(bad, kind=kind)


def test_config_refuses_bad_handlers_and_conditions() -> None:
    with pytest.raises(ValidationError, match="needs a resolution_column"):
        ConflictHandlerSpec(table="hr.emp", method="MAXIMUM")
    with pytest.raises(ValidationError, match="must be one of the column group"):
        ConflictHandlerSpec(table="hr.emp", columns=["a"], method="MINIMUM",
                            resolution_column="b")
    with pytest.raises(ValidationError, match="use OVERWRITE or DISCARD"):
        ConflictHandlerSpec(table="hr.emp", conflict="delete", method="MAXIMUM",
                            resolution_column="a")
    with pytest.raises(ValidationError, match="two update conflict handlers"):
        ConflictConfig(handlers=[ConflictHandlerSpec(table="hr.e", method="DISCARD"),
                                 ConflictHandlerSpec(table="HR.E", method="OVERWRITE")])
    with pytest.raises(ValidationError, match="condition"):
        EnqueueDestination(queue="a.b", condition=":dml.get_object_name( = 'X'")


def test_ddl_parsing() -> None:
    op = parse('ALTER TABLE "hr".emp ADD COLUMN IF NOT EXISTS bonus numeric(8, 2)')
    assert (op.op, op.owner, op.table, op.if_exists) == ("add_column", "HR", "EMP", True)
    assert op.columns[0].logical_type == "NUMBER"
    assert parse("alter table t rename column a to b").names == ["a", "b"]
    assert parse("CREATE TABLE x (a int, b text, PRIMARY KEY (a, b))").primary_key == ["a", "b"]
    assert logical_type("double precision") == ("BINARY_DOUBLE", "double precision")
    for text in ("CREATE INDEX i ON t (a)", "ALTER TABLE t ADD c geometry", "GRANT x TO y"):
        with pytest.raises(DdlError):
            parse(text)


def test_positions_are_exact_and_collapse_into_a_watermark() -> None:
    store = StateStore("sqlite://")
    with store.begin() as c:
        positions.record(c, "a", [(TxnId("S", 10, "x"), T0), (TxnId("S", 30, "y"),
                                                              T0 + dt.timedelta(days=9))])
    with store.read() as c:  # 20 was never applied: it is not "done", though lower than 30
        assert positions.done(c, "a", [TxnId("S", 20, "z"), TxnId("S", 30, "y")]) == {
            TxnId("S", 30, "y")}
    with store.begin() as c:
        assert positions.prune(c, "a", history_days=7) == 1
    with store.read() as c:
        assert positions.done(c, "a", [TxnId("S", 9, "old"), TxnId("S", 20, "z")]) == {
            TxnId("S", 9, "old")}


TABLE = TargetTable("hr.emp", ["id"], [("id", "INTEGER"), ("sal", "INTEGER"),
                                       ("name", "VARCHAR2")], 1)


def _effect(kind: str, scn: int, **values: object) -> dict[str, object]:
    e: dict[str, object] = {"id": 1, "_e_kind": kind, "_e_src": "S", "_e_scn": scn,
                            "_e_txn": f"t{scn}", "_e_pos": 1, "_e_sub": 0, "_e_msg": f"m{scn}",
                            "_e_absent": None, "_c_exists": True, "_c_src": "S", "_c_scn": 1,
                            "_c_pos": 1, "_c_sal": 100}
    e.update(values)
    return e


def test_fold_resolves_in_order_and_reports_unresolved() -> None:
    maxi = ConflictHandlerSpec(table="hr.emp", columns=["sal"], method="MAXIMUM",
                               resolution_column="sal")
    rows = [_effect("U", 5, sal=150, _o_sal=90, _h_sal=True),   # conflict, 150 > 100: wins
            _effect("U", 6, sal=120, _o_sal=150, _h_sal=True)]  # consistent with the first
    out = conflicts.fold(rows, TABLE, ["sal"], [maxi], {})
    assert [e["sal"] for e in out.effects] == [150, 120] and out.resolved == 1
    out = conflicts.fold([_effect("U", 5, sal=50, _o_sal=90, _h_sal=True)], TABLE, ["sal"],
                         [maxi], {})
    assert out.effects[0]["_e_absent"] == ["sal"]  # the row keeps its sal
    out = conflicts.fold([_effect("I", 5, sal=1)], TABLE, [], [], {})
    [failed] = out.failed.values()
    assert "uniqueness conflict" in failed.error_message and failed.transaction_id == "t5"
    out = conflicts.fold([_effect("U", 0, sal=1)], TABLE, [], [], {})  # older, same source
    assert (out.effects, out.skipped) == ([], 1)


def test_records_and_handler_loading(tmp_path: Path) -> None:
    rec = RowLCR({"kind": "ROW", "command_type": "INSERT", "new_values":
                  [("A", lcr.encode_value(1))], "old_values": None})
    rec.set_value("NEW", "b", "x")
    rec.rename_column("A", "C")
    assert rec.get_values("NEW") == {"C": 1, "B": "x"}
    with pytest.raises(lcr.UnknownCommandTypeError):
        rec.set_command_type("MERGE")
    with pytest.raises(HandlerError, match="has no callable 'nope'"):
        load("json:nope", "DML")
    from changeflow.apply.config import HandlerConfig

    with pytest.raises(HandlerError, match="cannot be imported"):
        Handlers.from_config(HandlerConfig(ddl="missing_mod_abc.x:y"))


def test_error_queue_records_update_and_delete(tmp_path: Path) -> None:
    store = StateStore("sqlite://")
    f = errorq.FailedTxn("S\x1f5\x1ft", "conflict", "boom", "S", "t", 5, T0, "m", 2, ["hr.e"])
    path = errorq.lcr_file(str(tmp_path), "ap")
    import pyarrow as pa

    row = {n: None for n in lcr.FIELD_NAMES}
    row.update(schema_version=1, msg_id="m", kind="ROW", origin="CAPTURED", position=2)
    errorq.write_lcrs(path, pa.Table.from_pylist([row], schema=lcr.arrow_schema()))
    with store.begin() as c:
        first, _ = errorq.record(c, "ap", f, path, 1)
        again, old = errorq.record(c, "ap", f, path, 1)
    [entry] = errorq.entries(store, "ap")
    assert first == again and old is None and entry.attempts == 2
    assert errorq.read_lcrs(entry).num_rows == 1
    with pytest.raises(errorq.ErrorNotFoundError, match="no error 99"):
        errorq.delete_entries(store, "ap", [99])
    assert errorq.delete_entries(store, "ap") == 1 and not Path(path).exists()
