"""Source transactions out of an LCR table: order, shared values, value maps."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pyarrow as pa

from changeflow import lcr
from changeflow.apply.pg_txns import repeated, source_transactions, value_maps

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _row(scn: int, pos: int, table: str, ident: int, value: Any) -> dict[str, Any]:
    return {"msg_id": f"m{scn:06d}{pos:03d}", "kind": "ROW", "command_type": "UPDATE",
            "source_database_name": "DB1", "transaction_id": f"x{scn}", "commit_scn": scn,
            "commit_time": T0 + dt.timedelta(seconds=scn), "position": pos,
            "object_owner": "PUBLIC", "object_name": table, "key_columns": ["ID"],
            "new_values": [("ID", lcr.encode_value(ident, "INTEGER")),
                           ("V", lcr.encode_value(value, "VARCHAR2" if isinstance(value, str)
                                                  else "INTEGER"))],
            "old_values": [("ID", lcr.encode_value(ident, "INTEGER"))]}


def _rows(n: int) -> list[dict[str, Any]]:
    return [_row(scn, pos, f"T{scn % 3}", scn * 10 + pos, f"v{scn}" if pos % 2 else scn)
            for scn in range(1, n + 1) for pos in (1, 2, 3)]


def _flat(txns: list[Any]) -> list[tuple[Any, ...]]:
    return [(t.commit_scn, m["position"], m["object_name"], m["key_columns"],
             m["new_values"], m["old_values"], m["commit_time"]) for t in txns for m in t.lcrs]


def test_out_of_order_rows_are_sorted_and_in_order_rows_kept() -> None:
    rows = _rows(40)
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    in_order, _ = source_transactions(pa.Table.from_pylist(rows, schema=lcr.arrow_schema()))
    mixed, _ = source_transactions(pa.Table.from_pylist(shuffled, schema=lcr.arrow_schema()))
    assert [t.commit_scn for t in mixed] == list(range(1, 41))
    assert _flat(mixed) == _flat(in_order)
    first = _flat(in_order)[:3]
    assert [m[1] for m in first] == [1, 2, 3]
    assert first[0][4] == {"ID": 11, "V": "v1"} and first[1][4] == {"ID": 12, "V": 1}
    assert first[0][6] == T0 + dt.timedelta(seconds=1)


def test_repeated_matches_to_pylist() -> None:
    arrays = [
        pa.array(["A", "B", None] * 40),
        pa.array([T0, None, T0] * 40, pa.timestamp("us", tz="UTC")),
        pa.array([["ID"], ["A", "B"], None, []] * 30, pa.list_(pa.string())),
        pa.array([["A\x1fB"], [""], ["C"]] * 30, pa.list_(pa.string())),  # falls back
        pa.array([f"u{i}" for i in range(100)]),  # unique: falls back
    ]
    for arr in arrays:
        assert repeated(arr) == arr.to_pylist()
    shared = repeated(pa.array([["ID"]] * 100, pa.list_(pa.string())))
    assert shared[0] is shared[99]  # one list per distinct value


def test_value_maps_of_sliced_chunks() -> None:
    """Chunks that are slices (their offsets do not start at 0) decode without copying."""
    t = lcr.arrow_schema().field("new_values").type
    rows = [None if i % 7 == 3 else
            [(f"C{k}", lcr.encode_value(i * 10 + k if k % 2 else f"s{i}.{k}"))
             for k in range(i % 4)] for i in range(200)]
    want = [None if r is None else {k: lcr.decode_value(v) for k, v in r} for r in rows]
    whole = pa.array(rows, t)
    column = pa.chunked_array([whole.slice(5, 60), whole.slice(65, 0), whole.slice(65, 135)])
    assert value_maps(column) == want[5:]
    assert value_maps(whole.slice(101, 50)) == want[101:151]
    assert value_maps(pa.chunked_array([], t)) == []


def test_transactions_split_where_any_part_of_their_key_changes() -> None:
    rows = _rows(6)
    # same commit position, another transaction id; then another database; then no id
    rows[3]["transaction_id"], rows[4]["transaction_id"] = "y1", "y1"
    rows[5]["source_database_name"] = "DB2"
    for r in rows[6:9]:
        r["transaction_id"] = None
    for r in rows[9:12]:
        r["commit_scn"], r["transaction_id"] = 3, None
    txns, _ = source_transactions(pa.Table.from_pylist(rows, schema=lcr.arrow_schema()))
    got = [(t.database, t.commit_scn, t.transaction_id, t.rows) for t in txns]
    assert got == [("DB1", 1, "x1", [0, 1, 2]), ("DB1", 2, "y1", [3, 4]),
                   ("DB2", 2, "x2", [5]), ("DB1", 3, None, [6, 7, 8, 9, 10, 11]),
                   ("DB1", 5, "x5", [12, 13, 14]), ("DB1", 6, "x6", [15, 16, 17])]
    # a re-delivered message (same id twice) takes the row-by-row path: same groups
    twice, _ = source_transactions(pa.Table.from_pylist(rows + rows[:1],
                                                        schema=lcr.arrow_schema()))
    assert [(t.database, t.commit_scn, t.transaction_id, len(t.rows)) for t in twice] == [
        (d, s, x, len(r)) for d, s, x, r in got]
    assert _flat(twice) == _flat(txns)
