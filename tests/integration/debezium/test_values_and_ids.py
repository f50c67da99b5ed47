"""What the conversion must never change: value types and representation, message ids.

Decimals of every width (1 to 16 bytes), sign and scale go through the capture in two
tables whose Decimal columns share slots (:func:`changeflow.debezium.convert.
decimal_slots`) with different scales; each value must come out exactly, as a
``decimal(38,10)`` in the ``dec`` field of its value struct and nowhere else. Message
ids must differ between any two events and stay the same when the same files are
captured again.
"""

from __future__ import annotations

import base64
import decimal
import json
import random
from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
from changeflow.debezium.capture import run_debezium_capture
from changeflow.debezium.reader import DebeziumFileError
from changeflow.quality import QualityError
from changeflow.queues.quarantine import quarantined
from changeflow.sites import queue_site

pytestmark = pytest.mark.spark

D = decimal.Decimal
CTX = decimal.Context(prec=100)
DEC = "org.apache.kafka.connect.data.Decimal"
VAR = "io.debezium.data.VariableScaleDecimal"


def _b64(unscaled: int, width: int | None = None) -> str:
    n = width or max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(n, "big", signed=True)).decode()


def _decimal(name: str, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "optional": True, "name": DEC, "version": 1,
            "parameters": {"scale": str(scale)}, "field": name}


def _schema(table: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    image = {"type": "struct", "optional": True,
             "fields": [{"type": "int64", "optional": False, "field": "id"}, *fields]}
    return {"type": "struct", "name": f"inv.inventory.{table}.Envelope", "optional": False,
            "fields": [{**image, "field": "before"}, {**image, "field": "after"},
                       {"type": "string", "field": "op"}]}


VARIABLE = {"type": "struct", "optional": True, "name": VAR, "field": "v",
            "fields": [{"type": "int32", "field": "scale"}, {"type": "bytes", "field": "value"}]}
TABLES = {  # the tables' Decimal columns in order: slot 0, slot 1, slot 2
    "amounts": _schema("amounts", [_decimal("d2", 2), _decimal("d12", 12), VARIABLE]),
    "ledger": _schema("ledger", [{"type": "string", "optional": True, "field": "note"},
                                 _decimal("d0", 0), VARIABLE]),
}


def _unscaled(rng: random.Random, scale: int) -> tuple[int, int | None]:
    """An unscaled value that fits decimal(38,10) at ``scale``, and a byte width
    (None: minimal) that may pad it with sign bytes, up to 16."""
    digits = 28 + min(scale, 10)
    bits = rng.randint(1, min(126, int(digits * 3.32) - 1))
    u = rng.getrandbits(bits) * rng.choice((1, -1))
    if scale > 10:
        u -= u % 10 ** (scale - 10)  # only what scale 10 keeps exactly
    minimal = max(1, (u.bit_length() + 8) // 8)
    return u, rng.choice((None, rng.randint(minimal, 16)))


def _number(u: int, scale: int) -> D:
    return D(u).scaleb(-scale, CTX).quantize(D("1E-10"), context=CTX)


def _events(rng: random.Random, n: int, dbz: Any) -> tuple[list[Any], dict[tuple[str, int], Any]]:
    events, expected = [], {}
    for i in range(n):
        table = ("amounts", "ledger")[i % 2]
        row: dict[str, Any] = {"id": i}
        want: dict[str, Any] = {"ID": i}
        cols = [("d2", 2), ("d12", 12)] if table == "amounts" else [("d0", 0)]
        for name, scale in cols:
            u, width = _unscaled(rng, scale)
            row[name], want[name.upper()] = _b64(u, width), _number(u, scale)
        vscale = rng.choice((0, 3, 10, 14))
        u, width = _unscaled(rng, vscale)
        row["v"], want["V"] = {"scale": vscale, "value": _b64(u, width)}, _number(u, vscale)
        if table == "ledger":
            row["note"], want["NOTE"] = f"n{i}", f"n{i}"
        events.append({"schema": TABLES[table], "payload": {
            "before": None, "after": row, "op": "c", "ts_ms": 1,
            "source": dbz.pg_source(1000 + i, 7, 900, table=table)}})
        expected[(table.upper(), i)] = want
    return events, expected


def test_decimals_of_every_width_and_scale_keep_their_value(spark: Any, tmp_path: Path,
                                                             dbz: Any) -> None:
    rng = random.Random(17)
    events, expected = _events(rng, 400, dbz)
    edges = [0, 1, -1, 127, -128, 128, -129, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64,
             -(2**64), 10**29 - 1, -(10**29) + 1]
    for k, u in enumerate(edges):
        i = 10_000 + k
        events.append({"schema": TABLES["amounts"], "payload": {
            "before": None, "op": "c", "ts_ms": 1,
            "source": dbz.pg_source(9000 + k, 8, 8000, table="amounts"),
            "after": {"id": i, "d2": _b64(u), "d12": _b64(0, 16),
                      "v": {"scale": 10, "value": _b64(u // 10)}}}})
        expected[("AMOUNTS", i)] = {"ID": i, "D2": _number(u, 2), "D12": D("0E-10"),
                                    "V": _number(u // 10, 10)}
    root = tmp_path / "topics"
    for table in TABLES:
        dbz.write_events(root / f"inv.inventory.{table}" / "f+0+0000000000.json",
                         [e for e in events if e["payload"]["source"]["table"] == table])
    cfg = dbz.capture(tmp_path, root, [{"name": f"inventory.{t}", "key": ["id"]}
                                       for t in TABLES])
    assert run_debezium_capture(spark, cfg, "dbz").messages == len(events)
    rows = dbz.queue_rows(cfg, dbz.QUEUE)
    got = {}
    for r in rows:
        image = dict(r["new_values"])
        for v in image.values():  # one field holds the value; the type names it
            field = lcr.LOGICAL_TYPES[v["type"]].field
            assert [k for k, x in v.items() if x is not None and k != "type"] in ([field], [])
        got[(r["object_name"], image["ID"]["int"])] = {
            k: (v["dec"] if v["type"] == "NUMBER" else lcr.decode_value(v))
            for k, v in image.items()}
        assert all(v["type"] == "NUMBER" for k, v in image.items() if k in ("D0", "D2", "V"))
    assert got == expected
    assert all(x.as_tuple().exponent == -10 for row in got.values() for x in row.values()
               if isinstance(x, D))


@pytest.mark.parametrize("scale, unscaled, why", [
    (12, 123, "more than ten decimals"),
    (0, 10**28, "more than 28 integer digits"),
])
def test_a_decimal_that_does_not_fit_is_refused(spark: Any, tmp_path: Path, dbz: Any,
                                                scale: int, unscaled: int, why: str) -> None:
    root = tmp_path / "topics"
    dbz.write_events(root / "t" / "f.json", [{"schema": _schema("x", [_decimal("d", scale)]),
                                              "payload": {
        "before": None, "after": {"id": 1, "d": _b64(unscaled)}, "op": "c", "ts_ms": 1,
        "source": dbz.pg_source(10, 1, 5, table="x")}}])
    cfg = dbz.capture(tmp_path, root, [{"name": "inventory.x", "key": ["id"]}])
    with pytest.raises(DebeziumFileError, match="inventory.x.d: value .* is not a NUMBER"):
        run_debezium_capture(spark, cfg, "dbz")
    assert dbz.queue_rows(cfg, dbz.QUEUE) == [], why


def _snapshot_and_twins(dbz: Any) -> list[dict[str, Any]]:
    """Events that share everything the source block says and differ only in their
    images: a snapshot (one LSN and transaction for every row), and two updates of one
    row at one position whose new names differ."""
    snap = [{"before": None, "after": {"id": i, "name": f"row {i}"}, "op": "r", "ts_ms": 1,
             "source": dbz.pg_source(500, 40, None, table="people", snapshot="true")}
            for i in range(60)]
    twins = [{"before": None, "after": {"id": 1, "name": name}, "op": "u", "ts_ms": 2,
              "source": dbz.pg_source(700, 41, 650, table="people")} for name in ("a", "b")]
    return snap + twins


def test_every_event_gets_its_own_id_and_a_replay_the_same_ids(spark: Any, tmp_path: Path,
                                                               dbz: Any) -> None:
    events = _snapshot_and_twins(dbz)
    root = tmp_path / "topics"
    dbz.write_events(root / "people" / "p+0+0000000000.json", events)
    table = [{"name": "inventory.people", "key": ["id"],
              "columns": {"id": "bigint", "name": "text"}}]
    ids = []
    for run in ("first", "replay"):
        (tmp_path / run).mkdir()
        cfg = dbz.capture(tmp_path / run, root, table)
        assert run_debezium_capture(spark, cfg, "dbz").messages == len(events)
        rows = dbz.queue_rows(cfg, dbz.QUEUE)
        ids.append({(r["commit_scn"], r["position"], json.dumps(dbz.values(r["new_values"]),
                                                                 default=str)): r["msg_id"]
                    for r in rows})
    assert len(set(ids[0].values())) == len(events)  # no two events share an id
    assert ids[0] == ids[1]  # the same files captured again: the same ids
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids[0].values())


def test_a_batch_failing_a_quality_check_is_set_aside(spark: Any, tmp_path: Path,
                                                      dbz: Any) -> None:
    """The capture's checks (in Arrow for a small batch) block a batch whose transaction
    has two commit times, exactly as the Spark checks do: committed, set aside, raised."""
    root = tmp_path / "topics"
    dbz.write_events(root / "people" / "p+0+0000000000.json", [
        {"before": None, "after": {"id": i, "name": "x"}, "op": "c", "ts_ms": 1,
         "source": dbz.pg_source(800 + i, 50, 790, table="people", ts_ms=1700000000000 + i)}
        for i in range(2)])
    cfg = dbz.capture(tmp_path, root, [{"name": "inventory.people", "key": ["id"],
                                        "columns": {"id": "bigint", "name": "text"}}])
    with pytest.raises(QualityError, match="single_commit_time") as info:
        run_debezium_capture(spark, cfg, "dbz")
    rt, q = queue_site(cfg, dbz.QUEUE)
    [held] = quarantined(rt.catalog, q)
    assert (held.seq, held.origin, held.n_messages) == (info.value.report.quarantine_seq,
                                                        "quality", 2)
    assert rt.catalog.info(q).depth == 0
    assert run_debezium_capture(spark, cfg, "dbz").messages == 0  # the files are recorded


def test_the_commit_position_of_every_shape_of_sequence(spark: Any) -> None:
    """``source.sequence``'s first LSN, as the connector writes it (read by pattern) and
    in any other JSON (parsed); not a number, or not JSON: the event's ``lsn``."""
    from pyspark.sql import functions as F

    from changeflow.debezium.reader import native_position

    cases = {'["100000","10100"]': 100000, '["7",null]': 7, '[ "8" , "9" ]': 8,
             '["-3","1"]': -3, '["12","3"] ': 12, '[5,6]': 5, '["9"]': 9,
             '["+5","1"]': 5, '["\\u0031","2"]': 1, '[null,"5"]': 42, '["abc","1"]': 42,
             '["1e3","2"]': 42, '[5,': 42, None: 42}
    df = spark.createDataFrame([(k,) for k in cases], "seq string")
    src = F.struct(F.col("seq").alias("sequence"), F.lit("postgresql").alias("connector"),
                   F.lit(42).cast("bigint").alias("lsn"))
    got = {r.seq: r.pos for r in df.select(
        "seq", native_position(F.struct(src.alias("source"))).alias("pos")).collect()}
    assert got == cases
