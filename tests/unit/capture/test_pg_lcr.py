"""wal2json format-2 documents become the LCRs of the contract, column-wise and exactly."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import msgspec
import pyarrow as pa
import pytest

from changeflow import lcr
from changeflow.capture import pg_decode
from changeflow.capture.pg_lcr import LcrBuilder
from changeflow.queues.arrow_io import conform_arrow

TS = "2024-05-01 10:00:00.123456+00"
_ENC = msgspec.json.Encoder(decimal_format="number")  # numeric as wal2json writes it


def dumps(doc: dict[str, Any]) -> str:
    return _ENC.encode(doc).decode()


def col(name: str, oid: int, value: Any) -> dict[str, Any]:
    return {"name": name, "typeoid": oid, "value": value}


def peek(*txns: list[dict[str, Any]], raw: list[str] | None = None) -> pg_decode.Peek:
    """A peek of whole transactions (each a list of change documents)."""
    docs: list[str] = list(raw or [])
    lsns = []
    for i, changes in enumerate(txns):
        docs.append(dumps({"action": "B", "xid": 700 + i, "timestamp": TS, "origin": 0}))
        docs.extend(dumps(c) for c in changes)
        docs.append(dumps({"action": "C", "xid": 700 + i, "timestamp": TS}))
        lsns.append(0x1000 * (i + 1))
    return pg_decode.Peek(",".join(docs), lsns, len(docs))


def build(p: pg_decode.Peek, keys: dict[tuple[str, str], list[str]] | None = None) -> pa.Table:
    b = LcrBuilder("pg1.example.com", lambda s, t: (keys or {}).get((s, t), ["ID"]))
    for txn in pg_decode.transactions(p):
        b.add(txn, None)
    return b.to_arrow()


def values(table: pa.Table, column: str) -> list[dict[str, Any] | None]:
    return [None if m is None else {k: lcr.decode_value(v) for k, v in m}
            for m in table.column(column).to_pylist()]


def test_every_supported_type_nulls_and_a_wide_row() -> None:
    typed = [col("b", 16, True), col("raw", 17, "\\x00ff"), col("ch", 18, "c"),
             col("nm", 19, "n"), col("big", 20, 9007199254740993), col("sm", 21, -3),
             col("i", 23, 7), col("txt", 25, 'a "q"'), col("o", 26, 12), col("js", 114,
             '{"a": 1}'), col("r", 700, 1.5), col("d", 701, 2.25), col("bp", 1042, "x  "),
             col("vc", 1043, "v"), col("dt", 1082, "2024-02-29"),
             col("ts", 1114, "2024-02-29 23:59:59.999999"),
             col("tz", 1184, "2024-02-29 23:59:59+02"),
             col("num", 1700, decimal.Decimal("123456789012345678.0123456789")),
             col("numi", 1700, 42), col("u", 2950, "6b1d2f0e-0000-4000-8000-000000000001"),
             col("jb", 3802, '{"b": 2}'), col("nul", 23, None)]
    wide = [col(f"c{i}", 25, f"v{i}") for i in range(400)]
    t = build(peek([{"action": "I", "schema": "public", "table": "typed", "columns": typed},
                    {"action": "I", "schema": "public", "table": "wide", "columns": wide}]))
    conform_arrow(t, origin="test")  # the table follows the contract exactly
    got = values(t, "new_values")[0]
    assert got is not None
    assert got["B"] is True and got["RAW"] == b"\x00\xff" and got["BIG"] == 9007199254740993
    assert got["TXT"] == 'a "q"' and got["JS"] == '{"a": 1}' and got["BP"] == "x  "
    assert got["R"] == 1.5 and got["D"] == 2.25
    assert got["DT"] == dt.date(2024, 2, 29)
    assert got["TS"] == dt.datetime(2024, 2, 29, 23, 59, 59, 999999)
    assert got["TZ"] == dt.datetime(2024, 2, 29, 21, 59, 59, tzinfo=dt.UTC)
    assert got["NUM"] == decimal.Decimal("123456789012345678.0123456789")
    assert got["NUMI"] == decimal.Decimal(42)
    assert "NUL" in got and got["NUL"] is None
    types = {k: v["type"] for k, v in t.column("new_values").to_pylist()[0]}
    assert types["NUL"] == "INTEGER" and types["TZ"] == "TIMESTAMP WITH TIME ZONE"
    assert types["NUM"] == "NUMBER" and types["RAW"] == "RAW" and types["R"] == "BINARY_DOUBLE"
    assert values(t, "new_values")[1] == {f"C{i}": f"v{i}" for i in range(400)}
    assert t.column("old_values").to_pylist() == [None, None]


def test_update_delete_truncate_and_unchanged_toast_column() -> None:
    t = build(peek(
        [{"action": "U", "schema": "public", "table": "doc",
          # an unchanged TOASTed column is left out of the new image by wal2json
          "columns": [col("id", 23, 1), col("n", 23, 2)],
          "identity": [col("id", 23, 1)]},
         {"action": "D", "schema": "public", "table": "doc",
          "identity": [col("id", 23, 5)]}],
        [{"action": "T", "schema": "public", "table": "doc"},
         {"action": "I", "schema": "Mixed", "table": "CamelT", "columns": [col("Id", 23, 3)]}],
    ), keys={("public", "doc"): ["ID"], ("Mixed", "CamelT"): ['"Id"']})
    rows = t.select(["kind", "command_type", "object_owner", "object_name", "ddl_text",
                     "key_columns", "transaction_id", "commit_scn", "position"]).to_pylist()
    assert [r["command_type"] for r in rows] == ["UPDATE", "DELETE", "TRUNCATE TABLE", "INSERT"]
    assert rows[2]["kind"] == "DDL" and rows[2]["ddl_text"] == 'TRUNCATE TABLE "public"."doc"'
    assert rows[2]["key_columns"] is None and rows[0]["key_columns"] == ["ID"]
    assert rows[3]["object_owner"] == lcr.canonical_identifier("Mixed")
    assert rows[3]["object_name"] == lcr.canonical_identifier("CamelT")
    assert [(r["transaction_id"], r["commit_scn"], r["position"]) for r in rows] == [
        ("700", 0x1000, 1), ("700", 0x1000, 2), ("701", 0x2000, 1), ("701", 0x2000, 2)]
    assert values(t, "new_values") == [{"ID": 1, "N": 2}, None, None,
                                       {lcr.canonical_identifier("Id"): 3}]
    assert values(t, "old_values") == [{"ID": 1}, {"ID": 5}, None, None]
    ids = t.column("msg_id").to_pylist()
    assert len(set(ids)) == 4 and build(peek(
        [{"action": "U", "schema": "public", "table": "doc", "columns": [col("id", 23, 1)],
          "identity": [col("id", 23, 1)]}])).column("msg_id")[0].as_py() == ids[0]
    assert t.column("commit_time")[0].as_py() == dt.datetime(2024, 5, 1, 10, 0, 0, 123456,
                                                             tzinfo=dt.UTC)


@pytest.mark.parametrize(("column", "message"), [
    (col("p", 600, "(1,2)"), "public.t.p: PostgreSQL type 600 (oid 600) is not supported"),
    (col("n", 1700, decimal.Decimal("1.00000000001")), "public.t.n: value '1.00000000001' of "
     "type numeric cannot be held as NUMBER"),
    (col("n", 1700, "NaN"), "public.t.n: value 'NaN' of type numeric cannot be held as NUMBER"),
    (col("n", 1700, 10 ** 29), "does not fit NUMBER"),
    (col("d", 1082, "infinity"), "public.t.d: value 'infinity' of type date cannot be held"),
])
def test_bad_values_are_refused_naming_table_and_column(column: dict[str, Any],
                                                        message: str) -> None:
    good = [col("id", 23, i) for i in range(3)]
    with pytest.raises(pg_decode.UnsupportedTypeError, match=message.replace("(", r"\(")
                       .replace(")", r"\)")):
        build(peek([{"action": "I", "schema": "public", "table": "t",
                     "columns": [good[0], column]},
                    {"action": "I", "schema": "public", "table": "t", "columns": good}]))


def test_native_values_of_another_json_type_are_converted() -> None:
    t = build(peek([{"action": "I", "schema": "public", "table": "t",
                     "columns": [col("i", 23, True), col("s", 25, 5), col("b", 16, 1)]}]))
    assert values(t, "new_values") == [{"I": 1, "S": "5", "B": True}]


def test_decode_errors_are_clear() -> None:
    with pytest.raises(pg_decode.DecodeError, match="not wal2json format 2"):
        list(pg_decode.transactions(pg_decode.Peek('{"action": "B", "xid": 1', [], 1)))
    with pytest.raises(pg_decode.DecodeError, match="outside a transaction"):
        list(pg_decode.transactions(pg_decode.Peek(
            '{"action":"I","schema":"s","table":"t","columns":[]}', [], 1)))
    with pytest.raises(pg_decode.DecodeError, match="unknown wal2json action 'X'"):
        list(pg_decode.transactions(peek([{"action": "X"}])))
    with pytest.raises(pg_decode.DecodeError, match="without its commit LSN"):
        p = peek([{"action": "I", "schema": "s", "table": "t", "columns": []}])
        list(pg_decode.transactions(pg_decode.Peek(p.text, [], p.rows)))
    msg = peek([], raw=[dumps({"action": "M", "prefix": "x", "content": "y"})])
    assert [t.xid for t in pg_decode.transactions(msg)] == [700]
    inside = peek([{"action": "M", "prefix": "x", "content": "y"},
                   {"action": "D", "schema": "s", "table": "t", "identity": []}])
    assert [[c.action for c in t.changes] for t in pg_decode.transactions(inside)] == [["D"]]


@pytest.mark.parametrize("stamps", [
    ["2024-05-01 12:00:00.5+02", "2024-05-01 10:00:01-03:30", "2024-05-01 10:00:02+00"],
    # an offset with seconds (historical zones): Arrow refuses it, Python parses the batch
    ["1890-01-01 10:00:00+00:09:21", "2024-05-01 12:00:00.5+02"],
])
def test_commit_times_in_any_offset_are_utc_and_stay_with_their_transaction(
        stamps: list[str]) -> None:
    docs, lsns = [], []
    for i, ts in enumerate(stamps):
        docs += [dumps({"action": "B", "xid": 700 + i, "timestamp": ts, "origin": 0}),
                 *[dumps({"action": "I", "schema": "public", "table": "t",
                          "columns": [col("id", 23, 10 * i + k)]}) for k in range(i + 1)],
                 dumps({"action": "C", "xid": 700 + i, "timestamp": ts})]
        lsns.append(0x1000 * (i + 1))
    t = build(pg_decode.Peek(",".join(docs), lsns, len(docs)))
    want = [dt.datetime.fromisoformat(ts).astimezone(dt.UTC)
            for i, ts in enumerate(stamps) for _ in range(i + 1)]
    assert t.column("commit_time").to_pylist() == want
    assert t.column("commit_time").type == pa.timestamp("us", tz="UTC")
