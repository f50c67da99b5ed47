"""Message types: field checks, encoding round trips, JMS and LCR payloads, JSON forms."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from changeflow.errors import PayloadTypeError
from changeflow.messaging import jsonio
from changeflow.messaging import types as T
from changeflow.messaging.errors import MessagePropertyError
from changeflow.messaging.model import Agent, MessageProperties, Selector
from changeflow.messaging.payloads import FieldType, JmsBytes, JmsMap, JmsObject, JmsText


def roundtrip(t: T.TypeDef, payload):
    text, raw, size = t.encode(payload)
    assert size == (len(text.encode()) if text else 0) + (len(raw) if raw else 0)
    return t.decode(text, raw)


def test_object_type_round_trip_keeps_types() -> None:
    t = T.TypeDef.object("hr.t", {"n": "NUMBER", "i": "INTEGER", "d": "DATE",
                                  "tz": "TIMESTAMP WITH TIME ZONE", "r": "RAW", "s": "VARCHAR2"})
    ts = dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    got = roundtrip(t, {"n": decimal.Decimal("1.50"), "i": 7, "d": dt.date(2024, 1, 2),
                        "tz": ts, "r": b"\x01", "s": None})
    assert got == {"n": decimal.Decimal("1.50"), "i": 7, "d": dt.date(2024, 1, 2), "tz": ts,
                   "r": b"\x01", "s": None}
    assert isinstance(got["n"], decimal.Decimal)


@pytest.mark.parametrize("spec, value, match", [
    ("INTEGER", 1.5, "not a valid INTEGER"),
    ("INTEGER", True, "not a valid INTEGER"),
    ("NUMBER", "abc", "not a valid NUMBER"),
    ("DATE", "2024-13-01", "not a valid DATE"),
    ("RAW(2)", "001122", "3 bytes long; RAW\\(2\\)"),
    ("VARCHAR2", 5, "not a valid VARCHAR2"),
    ("BOOLEAN", "maybe", "not a valid BOOLEAN"),
])
def test_field_checks(spec: str, value, match: str) -> None:
    t = T.TypeDef.object("x.t", {"f": spec})
    with pytest.raises(PayloadTypeError, match=match):
        t.encode({"f": value})


def test_bad_type_declarations() -> None:
    with pytest.raises(PayloadTypeError, match="unknown field type 'BLOB'"):
        T.TypeDef.object("x.t", {"f": "BLOB"})
    with pytest.raises(PayloadTypeError, match="duplicate"):
        T.TypeDef.object("x.t", [("f", "INTEGER"), ("F", "INTEGER")])
    with pytest.raises(PayloadTypeError, match="at least one field"):
        T.TypeDef.object("x.t", {})
    assert str(FieldType.parse("varchar2( 30 )")) == "VARCHAR2(30)"


def test_jms_and_anydata_payloads() -> None:
    text = T.builtin("SYS.AQ$_JMS_TEXT_MESSAGE")
    assert roundtrip(text, "hi") == JmsText("hi")
    msg = JmsMap({"qty": 3, "price": decimal.Decimal("2.5")}, {"Region": "Western"})
    assert roundtrip(T.builtin("aq$_jms_map_message"), msg) == msg
    assert roundtrip(T.builtin("SYS.AQ$_JMS_BYTES_MESSAGE"), JmsBytes(b"\x00")) == JmsBytes(
        b"\x00")
    obj = JmsObject(b"\xac\xed", "com.example.Order", {"n": 1})
    assert roundtrip(T.builtin("SYS.AQ$_JMS_OBJECT_MESSAGE"), obj) == obj
    any_t = T.builtin("ANYDATA")
    assert roundtrip(any_t, {"d": dt.date(2024, 1, 1), "x": 1.5}) == {
        "d": dt.date(2024, 1, 1), "x": 1.5}
    assert roundtrip(any_t, 42) == 42
    with pytest.raises(PayloadTypeError, match="JmsText"):
        text.encode(b"bytes")
    assert text.rule_fields(JmsText("t", {"Region": "W"})) == {
        "REGION": {"type": "VARCHAR2", "str": "W", "int": None, "dec": None, "dbl": None,
                   "bool": None, "date": None, "ts_ntz": None, "ts": None, "raw": None}}


def test_row_lcr_payload() -> None:
    t = T.builtin("SYS.LCR$_ROW_RECORD")
    lcr = {"command_type": "UPDATE", "object_owner": "HR", "object_name": "EMP",
           "old_values": {"ID": 1}, "new_values": {"ID": 1, "SAL": decimal.Decimal("10")},
           "tag": b"\x01", "commit_scn": 5}
    got = roundtrip(t, lcr)
    assert got["new_values"] == {"ID": 1, "SAL": decimal.Decimal("10")} and got["tag"] == b"\x01"
    with pytest.raises(PayloadTypeError, match="command_type"):
        t.encode({**lcr, "command_type": "MERGE"})
    with pytest.raises(PayloadTypeError, match="no field 'oops'"):
        t.encode({**lcr, "oops": 1})


def test_json_forms() -> None:
    raw = T.builtin("RAW")
    assert jsonio.from_json(raw, "00ff") == b"\x00\xff"
    with pytest.raises(PayloadTypeError, match="hexadecimal"):
        jsonio.from_json(raw, 12)
    m = jsonio.from_json(T.builtin("SYS.AQ$_JMS_MAP_MESSAGE"), {"map": {"a": 1},
                                                               "properties": {"p": "x"}})
    assert m == JmsMap({"a": 1}, {"p": "x"})
    assert jsonio.to_json(m) == {"map": {"a": 1}, "properties": {"p": "x"}}
    assert jsonio.to_json({"d": dt.date(2024, 1, 1), "n": decimal.Decimal("1.5")}) == {
        "d": "2024-01-01", "n": "1.5"}


def test_properties_agents_selectors() -> None:
    p = MessageProperties.of({"priority": "3", "correlation_id": "c", "recipient_list":
                              "Priority@ws.topic@db2"}, delay=2)
    assert (p.priority, p.correlation, p.delay) == (3, "c", 2.0)
    assert p.recipients == (Agent("PRIORITY", "ws.topic@db2"),)
    assert Agent.parse("ws.topic@db2") == Agent("", "ws.topic@db2")
    with pytest.raises(MessagePropertyError, match="unknown message properties"):
        MessageProperties.of({"colour": 1})
    with pytest.raises(MessagePropertyError, match="needs a name or an address"):
        Agent("")
    with pytest.raises(MessagePropertyError, match="owner.name"):
        MessageProperties(exception_queue="noowner")
    assert Selector.of({"message_id": "m1"}) == Selector(msg_id="m1")
    assert Selector.of("  ") is None
