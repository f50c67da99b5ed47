"""wal2json format-2 documents become the LCRs of the contract, column-wise and exactly."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import msgspec
import pyarrow as pa
import pytest

from changeflow import lcr
from changeflow.capture import pg_arrow, pg_decode
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


def build(p: pg_decode.Peek, keys: dict[tuple[str, str], list[str]] | None = None,
          *, arrow: bool | None = True) -> pa.Table:
    """The LCRs through Python objects; also through Arrow (pg_arrow), which must give
    the same table (``arrow=True``) or leave the peek to the object path (``False``)."""
    def key_columns(s: str, t: str) -> list[str]:
        return (keys or {}).get((s, t), ["ID"])

    fast = pg_arrow.build(p, pg_arrow.parse(p.text), pg_arrow.Source(
        "pg1.example.com", key_columns, lambda o: None, lambda o: None, False), 0)
    if arrow is not None:
        assert (fast is not None) == arrow
    b = LcrBuilder("pg1.example.com", key_columns)
    for txn in pg_decode.transactions(p):
        b.add(txn, None)
    table = b.to_arrow()
    if fast is not None:
        assert fast.table.schema == table.schema
        assert fast.table.to_pylist() == table.to_pylist()
        assert fast.table.equals(table)
    return table


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
                    {"action": "I", "schema": "public", "table": "t", "columns": good}]),
              arrow=False)


def test_native_values_of_another_json_type_are_converted() -> None:
    t = build(peek([{"action": "I", "schema": "public", "table": "t",
                     "columns": [col("i", 23, True), col("s", 25, 5), col("b", 16, 1)]}]),
              arrow=False)
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


def arrow_build(p: pg_decode.Peek, done: int, include_tagged: bool) -> pg_arrow.Batch | None:
    return pg_arrow.build(p, pg_arrow.parse(p.text), pg_arrow.Source(
        "pg1.example.com", lambda s, t: ["ID"], lambda o: b"\x07" if o == 9 else None,
        lambda o: "SRC.EXAMPLE.COM" if o == 9 else None, include_tagged), done)


@pytest.mark.parametrize("include_tagged", [False, True])
def test_arrow_path_leaves_out_done_and_tagged_transactions(include_tagged: bool) -> None:
    docs, lsns = [], []
    for i, origin in enumerate([0, 9, 0, 9]):
        docs += [dumps({"action": "B", "xid": 700 + i, "timestamp": TS, "origin": origin}),
                 *[dumps({"action": "I", "schema": "public", "table": "t",
                          "columns": [col("id", 23, 10 * i + k)]}) for k in range(2)],
                 dumps({"action": "C", "xid": 700 + i, "timestamp": TS})]
        lsns.append(0x1000 * (i + 1))
    got = arrow_build(pg_decode.Peek(",".join(docs), lsns, len(docs)), 0x1000, include_tagged)
    assert got is not None and got.last == 0x4000
    rows = got.table.select(["transaction_id", "tag", "source_database_name", "position",
                             "msg_id"]).to_pylist()
    if include_tagged:
        assert (got.transactions, got.tagged_skipped) == (3, 0)
        assert [(r["transaction_id"], r["tag"], r["source_database_name"]) for r in rows] == [
            ("701", b"\x07", "SRC.EXAMPLE.COM")] * 2 + [("702", None, "PG1.EXAMPLE.COM")] * 2 \
            + [("703", b"\x07", "SRC.EXAMPLE.COM")] * 2
    else:
        assert (got.transactions, got.tagged_skipped) == (1, 2)
        assert [(r["transaction_id"], r["tag"]) for r in rows] == [("702", None)] * 2
    assert [r["position"] for r in rows][:2] == [1, 2]
    everything = build(pg_decode.Peek(",".join(docs), lsns, len(docs)))
    assert set(r["msg_id"] for r in rows) <= set(everything.column("msg_id").to_pylist())
    nothing = arrow_build(pg_decode.Peek(",".join(docs), lsns, len(docs)), 0x4000, False)
    assert nothing is not None and nothing.table.num_rows == 0 and nothing.last == 0x4000


@pytest.mark.parametrize("text", [
    # a logical message, a transaction without its commit, a change outside a transaction
    '{"action":"B","xid":1,"timestamp":"' + TS + '"},{"action":"M","transactional":true,'
    '"prefix":"p","content":"c"},{"action":"C","xid":1,"timestamp":"' + TS + '"}',
    '{"action":"B","xid":1,"timestamp":"' + TS + '"},{"action":"I","schema":"s","table":"t",'
    '"columns":[]}',
    '{"action":"I","schema":"s","table":"t","columns":[]}',
])
def test_arrow_path_leaves_what_it_cannot_prove_to_the_object_path(text: str) -> None:
    p = pg_decode.Peek(text, [0x1000], text.count('{"action"'))
    assert arrow_build(p, 0, False) is None


def test_arrow_path_reads_keys_and_separators_inside_strings_as_text() -> None:
    tricky = 'x},{"action":"I", "value":"y","typeoid":700,"value":1 \\ \n'
    t = build(peek([{"action": "I", "schema": "public", "table": "t",
                     "columns": [col("id", 23, 1), col("s", 25, tricky), col("f", 701, 0.1),
                                 col("n", 1700, decimal.Decimal("-0.5")), col("b", 16, False)]}]))
    assert values(t, "new_values") == [{"ID": 1, "S": tricky, "F": 0.1,
                                        "N": decimal.Decimal("-0.5"), "B": False}]
