"""Capturing Debezium change-event files as the PostgreSQL connector writes them."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import pytest

from changeflow.debezium.capture import run_debezium_capture
from changeflow.debezium.reader import DebeziumFileError

pytestmark = pytest.mark.spark

D = decimal.Decimal


def b64(unscaled: int) -> str:
    """A Kafka Connect Decimal's bytes: minimal big-endian two's complement, base64."""
    n = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(n, "big", signed=True)).decode()


FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "12"},
     "field": "balance"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "version": 1, "parameters": {"scale": "10"}, "field": "big"},
    {"type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal",
     "fields": [{"type": "int32", "field": "scale"}, {"type": "bytes", "field": "value"}],
     "field": "ratio"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp",
     "field": "created"},
    {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp",
     "field": "seen"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "born"},
    {"type": "bytes", "optional": True, "field": "photo"},
    {"type": "boolean", "optional": True, "field": "active"},
    {"type": "float64", "optional": True, "field": "score"},
]
SCHEMA = {"type": "struct", "name": "inv.inventory.customers.Envelope", "optional": False,
          "fields": [{"type": "struct", "fields": FIELDS, "optional": True, "field": "before"},
                     {"type": "struct", "fields": FIELDS, "optional": True, "field": "after"},
                     {"type": "struct", "fields": [], "field": "source"},
                     {"type": "string", "field": "op"}]}
BIG = D("12345678901234567890.1234567890")
BIG_UNSCALED = 123456789012345678901234567890  # BIG * 10**10, exactly


def _event(op: str, before: Any, after: Any, source: dict[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA, "payload": {"before": before, "after": after, "source": source,
                                          "op": op, "ts_ms": 1700000001000}}


ROW1 = {"id": 1, "name": "Ann", "balance": b64(1234), "big": b64(BIG_UNSCALED),
        "ratio": {"scale": 3, "value": b64(12345)}, "created": 1700000000123456,
        "seen": "2024-01-02T01:04:05.5+02:00",
        "born": (dt.date(2024, 1, 1) - dt.date(1970, 1, 1)).days, "photo": "AP8=",
        "active": True, "score": 1.5}


def test_connector_events_become_typed_lcrs(spark: Any, tmp_path: Path, dbz: Any) -> None:
    root = tmp_path / "topics"
    dbz.write_events(root / "inv.inventory.customers" / "inv.inventory.customers+0+0000000000.json", [
        _event("r", None, ROW1, dbz.pg_source(1000, 500, None, snapshot="true")),
        _event("c", None, {"id": 2, "name": "Bob", "balance": b64(-15), "big": b64(-BIG_UNSCALED),
                           "ratio": None, "created": None, "seen": None, "born": None,
                           "photo": None, "active": False, "score": None},
               dbz.pg_source(2100, 501, 2000)),
        _event("u", ROW1, {**ROW1, "name": "Anne"}, dbz.pg_source(2200, 501, 2000)),
        _event("d", {"id": 2}, None, dbz.pg_source(3100, 502, 3000)),
        _event("t", None, None, dbz.pg_source(4100, 503, 4000)),
    ])
    dbz.write_events(root / "inv.inventory.orders" / "inv.inventory.orders+0+0000000000.json", [
        {"before": None, "after": {"id": 7, "total": b64(99_95), "placed": 1700000000000000},
         "source": dbz.pg_source(2150, 501, 2000, table="orders"), "op": "c", "ts_ms": 1},
    ])
    cfg = dbz.capture(tmp_path, root, [
        {"name": "inventory.customers", "key": ["id"]},
        {"name": "inventory.orders", "key": ["id"],
         "columns": {"id": "integer", "total": "numeric(10,2)", "placed": "timestamp"}}],
        database="pg1.example.com")
    result = run_debezium_capture(spark, cfg, "dbz")
    assert (result.files, result.messages) == (2, 6)
    rows = dbz.queue_rows(cfg, dbz.QUEUE)
    by = {(r["object_name"], r["command_type"], r["commit_scn"]): r for r in rows}
    snap = by[("CUSTOMERS", "INSERT", 1000)]
    assert snap["source_database_name"] == "PG1.EXAMPLE.COM" and snap["object_owner"] == "INVENTORY"
    assert snap["transaction_id"] == "500" and snap["key_columns"] == ["ID"]
    assert dbz.values(snap["new_values"]) == {
        "ID": ("INTEGER", 1), "NAME": ("VARCHAR2", "Ann"), "BALANCE": ("NUMBER", D("12.34")),
        "BIG": ("NUMBER", BIG), "RATIO": ("NUMBER", D("12.345")),
        "CREATED": ("TIMESTAMP", dt.datetime(2023, 11, 14, 22, 13, 20, 123456)),
        "SEEN": ("TIMESTAMP WITH TIME ZONE", dt.datetime(2024, 1, 1, 23, 4, 5, 500000, tzinfo=dt.UTC)),
        "BORN": ("DATE", dt.date(2024, 1, 1)), "PHOTO": ("RAW", b"\x00\xff"),
        "ACTIVE": ("BOOLEAN", True), "SCORE": ("BINARY_DOUBLE", 1.5)}
    bob = by[("CUSTOMERS", "INSERT", 2000)]
    assert dbz.values(bob["new_values"])["BALANCE"] == ("NUMBER", D("-0.15"))
    assert dbz.values(bob["new_values"])["BIG"] == ("NUMBER", D("-12345678901234567890.1234567890"))
    assert dbz.values(bob["new_values"])["RATIO"] == ("NUMBER", None)
    # one source transaction (501) across two tables: one commit position, positions by LSN
    upd = by[("CUSTOMERS", "UPDATE", 2000)]
    order = by[("ORDERS", "INSERT", 2000)]
    assert {bob["transaction_id"], upd["transaction_id"], order["transaction_id"]} == {"501"}
    assert (bob["position"], order["position"], upd["position"]) == (2100, 2150, 2200)
    assert dbz.values(upd["old_values"])["NAME"] == ("VARCHAR2", "Ann")
    assert dbz.values(upd["new_values"])["NAME"] == ("VARCHAR2", "Anne")
    assert dbz.values(order["new_values"]) == {"ID": ("INTEGER", 7), "TOTAL": ("NUMBER", D("99.95")),
                                            "PLACED": ("TIMESTAMP", dt.datetime(2023, 11, 14, 22, 13, 20))}
    gone = by[("CUSTOMERS", "DELETE", 3000)]
    assert dbz.values(gone["old_values"]) == {"ID": ("INTEGER", 2)} and gone["new_values"] is None
    trunc = by[("CUSTOMERS", "TRUNCATE TABLE", 4000)]
    assert trunc["kind"] == "DDL" and trunc["ddl_text"] == 'TRUNCATE TABLE "inventory"."customers"'
    assert snap["commit_time"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC)

    # a second run finds nothing new; a late transaction is renumbered after the last one
    assert run_debezium_capture(spark, cfg, "dbz").messages == 0
    dbz.write_events(root / "inv.inventory.orders" / "inv.inventory.orders+0+0000000001.json", [
        {"before": None, "after": {"id": 8, "total": b64(100), "placed": None},
         "source": dbz.pg_source(2160, 501, 1500, table="orders"), "op": "c", "ts_ms": 1}])
    late = run_debezium_capture(spark, cfg, "dbz")
    assert late.messages == 1 and late.renumbered
    (eight,) = [r for r in dbz.queue_rows(cfg, dbz.QUEUE)
                if r["new_values"] and dbz.values(r["new_values"]).get("ID") == ("INTEGER", 8)]
    assert eight["commit_scn"] == 4001  # above the highest position captured (4000)


ORDERS = {"name": "inventory.orders", "key": ["id"],
          "columns": {"id": "integer", "total": "numeric(10,2)"}}
BAD = [
    ("not json", ["{\"op\": \"c\"", "plain text"], "not a JSON change event"),
    ("no op", [{"before": None, "after": {"id": 1}, "source": {"connector": "postgresql",
                "schema": "inventory", "table": "orders", "lsn": 1, "ts_ms": 1}}], "no 'op' field"),
    ("bad op", [{"op": "z", "after": {"id": 1}, "source": {"connector": "postgresql",
                 "schema": "inventory", "table": "orders", "lsn": 1, "ts_ms": 1}}], "unknown op 'z'"),
    ("unknown column", [{"op": "c", "after": {"id": 1, "colour": "red"}, "source": {
        "connector": "postgresql", "schema": "inventory", "table": "orders", "lsn": 1, "ts_ms": 1}}],
     "column 'colour', which the declared table does not have"),
    ("key missing", [{"op": "d", "before": {"total": "AQ=="}, "source": {
        "connector": "postgresql", "schema": "inventory", "table": "orders", "lsn": 1, "ts_ms": 1}}],
     "lack key column 'id' in 'before'"),
    ("wrong type", [{"op": "c", "after": {"id": "seven", "total": "AQ=="}, "source": {
        "connector": "postgresql", "schema": "inventory", "table": "orders", "lsn": 1, "ts_ms": 1}}],
     "inventory.orders.id: value seven is not a INTEGER"),
    ("connector", [{"op": "c", "after": {"id": 1}, "source": {
        "connector": "mongodb", "schema": "inventory", "table": "orders", "ts_ms": 1}}],
     "connector 'mongodb' are not supported"),
]


@pytest.mark.parametrize("case, lines, message", BAD, ids=[b[0] for b in BAD])
def test_bad_files_are_refused_and_nothing_is_enqueued(spark: Any, tmp_path: Path, case: str,
                                                       lines: list[Any], message: str, dbz: Any) -> None:
    root = tmp_path / "files"
    bad = dbz.write_events(root / "t" / "bad.json", lines)
    cfg = dbz.capture(tmp_path, root, [ORDERS], database="pg1.example.com", quality=False)
    with pytest.raises(DebeziumFileError) as err:
        run_debezium_capture(spark, cfg, "dbz")
    assert message in str(err.value)
    assert str(bad) in str(err.value)
    assert dbz.queue_rows(cfg, dbz.QUEUE) == []
    # the file was not recorded: fixing it and re-running captures it
    dbz.write_events(bad, [{"op": "c", "after": {"id": 1, "total": "AQ=="}, "source": {
        "connector": "postgresql", "schema": "inventory", "table": "orders", "lsn": 5, "ts_ms": 1}}])
    assert run_debezium_capture(spark, cfg, "dbz").messages == 1


def test_a_captured_file_that_changes_is_refused(spark: Any, tmp_path: Path, dbz: Any) -> None:
    root = tmp_path / "files"
    ev = {"op": "c", "after": {"id": 1, "total": "AQ=="}, "source": {
        "connector": "postgresql", "schema": "inventory", "table": "orders", "lsn": 5, "ts_ms": 1}}
    f = dbz.write_events(root / "a.json", [ev])
    cfg = dbz.capture(tmp_path, root, [ORDERS], quality=False)
    assert run_debezium_capture(spark, cfg, "dbz").messages == 1
    dbz.write_events(f, [ev, ev])
    with pytest.raises(DebeziumFileError, match="changed after it was captured"):
        run_debezium_capture(spark, cfg, "dbz")
