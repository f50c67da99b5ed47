"""What Debezium's PostgreSQL connector really writes, captured exactly (issue 28).

The events are the connector's own (``tests/fixtures/debezium/pg-3.6.1``, recorded from
Debezium 3.6.1.Final through Kafka Connect's JsonConverter): a snapshot, the first
transaction after the connector started, transaction metadata, unchanged TOAST values,
``double``/``float`` columns, a key-only delete and its tombstone, a logical-decoding
message, rows flattened by ``ExtractNewRecordState``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from changeflow.debezium import envelope as E
from changeflow.debezium.capture import run_debezium_capture
from changeflow.debezium.export import export_queue, queue_batches
from changeflow.debezium.reader import DebeziumFileError
from changeflow.queues import io as qio

pytestmark = pytest.mark.spark

FIXTURES = Path(__file__).parents[2] / "fixtures" / "debezium" / "pg-3.6.1"
CUSTOMERS = [{"name": "inventory.customers", "key": ["id"]}]


def lines(name: str) -> list[str]:
    """The lines of a fixture file, as recorded."""
    return (FIXTURES / f"{name}.jsonl").read_text().splitlines()


SNAPSHOT = lines("customers")[:6]  # r events of one snapshot transaction (txId 732)
FIRST = lines("customers")[6:8]  # two updates: the first transaction after the start
SECOND = lines("customers")[8:11]  # insert, update, key-only delete (txId 736)
TOMBSTONE = lines("customers")[11]


def topic_file(root: Path, topic: str, events: list[str]) -> Path:
    """Write events as Kafka Connect's S3 sink names a topic's first file."""
    path = root / topic / f"{topic}+0+0000000000.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(e + "\n" for e in events))
    return path


def by_id(dbz: Any, cfg: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """The captured LCRs by command and the row's ID."""
    out = {}
    for r in dbz.queue_rows(cfg, dbz.QUEUE):
        image = dbz.values(r["new_values"] or r["old_values"])
        out[(r["command_type"], image["ID"][1])] = r
    return out


def test_unchanged_toast_placeholders_leave_the_column_unchanged(spark: Any, tmp_path: Path,
                                                                 dbz: Any) -> None:
    root = tmp_path / "topics"
    topic_file(root, "shop.inventory.customers", SNAPSHOT + FIRST)
    assert E.UNAVAILABLE in FIRST[0] and "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==" in FIRST[0]
    cfg = dbz.capture(tmp_path, root, CUSTOMERS)
    assert run_debezium_capture(spark, cfg, "dbz").messages == 8
    rows = by_id(dbz, cfg)
    for i in (1, 2):
        new = dbz.values(rows[("UPDATE", i)]["new_values"])
        assert set(new) == {"ID", "NAME", "BORN", "QTY", "SCORE", "RATIO"}  # no BIO, PHOTO
        assert new["NAME"] == ("VARCHAR2", "renamed") and new["QTY"] == ("INTEGER", 11)
        snap = dbz.values(rows[("INSERT", i)]["new_values"])
        assert snap["BIO"][1].startswith("long biography") and snap["PHOTO"][1][:2] == b"\0\xff"
    assert not any(E.UNAVAILABLE in json.dumps(dbz.values(r["new_values"]), default=repr)
                   for r in dbz.queue_rows(cfg, dbz.QUEUE))


def test_unchanged_toast_without_schemas(spark: Any, tmp_path: Path, dbz: Any) -> None:
    """Files without schemas: the declared types, the same placeholder forms."""
    root = tmp_path / "topics"
    topic_file(root, "shop.inventory.customers",
               [json.dumps(json.loads(x)["payload"]) for x in FIRST])
    cfg = dbz.capture(tmp_path, root, [{"name": "inventory.customers", "key": ["id"], "columns": {
        "id": "integer", "name": "text", "born": "date", "qty": "integer",
        "score": "double precision", "ratio": "real", "bio": "text", "photo": "bytea"}}])
    assert run_debezium_capture(spark, cfg, "dbz").messages == 2
    for r in dbz.queue_rows(cfg, dbz.QUEUE):
        assert "BIO" not in dbz.values(r["new_values"])
        assert "PHOTO" not in dbz.values(r["new_values"])


def test_a_snapshot_is_one_transaction_with_one_commit_time(spark: Any, tmp_path: Path,
                                                            dbz: Any) -> None:
    """Snapshot rows read over several milliseconds (each row's ts_ms is when it was
    read) pass the quality checks: one commit time per transaction, the earliest."""
    events = []
    for i, line in enumerate(SNAPSHOT):
        e = json.loads(line)
        e["payload"]["source"]["ts_ms"] += 7 * i
        e["payload"]["source"]["ts_us"] += 7000 * i
        events.append(json.dumps(e))
    root = tmp_path / "topics"
    topic_file(root, "shop.inventory.customers", events)
    cfg = dbz.capture(tmp_path, root, CUSTOMERS)  # quality checks on
    assert run_debezium_capture(spark, cfg, "dbz").messages == 6
    rows = dbz.queue_rows(cfg, dbz.QUEUE)
    first = json.loads(SNAPSHOT[0])["payload"]["source"]["ts_us"]
    assert {r["commit_time"] for r in rows} == {
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=first)}
    assert {(r["transaction_id"], r["commit_scn"]) for r in rows} == {("732", 22599000)}


def test_the_first_transaction_after_a_start_is_not_split(spark: Any, tmp_path: Path,
                                                          dbz: Any) -> None:
    """``sequence: [null, "<lsn>"]``: each event has only its own LSN; the transaction
    keeps one commit position (its lowest LSN), below the next transaction's."""
    assert all('"sequence":"[null,' in x for x in FIRST)
    root = tmp_path / "topics"
    topic_file(root, "shop.inventory.customers", FIRST + SECOND)
    cfg = dbz.capture(tmp_path, root, CUSTOMERS)  # quality checks on
    assert run_debezium_capture(spark, cfg, "dbz").messages == 5
    rows = by_id(dbz, cfg)
    first = {(rows[("UPDATE", i)]["transaction_id"], rows[("UPDATE", i)]["commit_scn"])
             for i in (1, 2)}
    assert first == {("735", 22600760)}
    assert rows[("INSERT", 5001)]["commit_scn"] == 22601296 > 22600760
    assert [rows[("UPDATE", i)]["position"] for i in (1, 2)] == [1, 2]


def test_transaction_metadata_ids_name_the_source_transaction(spark: Any, tmp_path: Path,
                                                              dbz: Any) -> None:
    """With transaction metadata, ``transaction.id`` is ``"<txId>:<lsn>"`` on every event:
    the transaction is ``source.txId``, ordered by ``total_order``."""
    ids = {json.loads(x)["payload"]["transaction"]["id"] for x in SECOND}
    assert len(ids) == 3
    root = tmp_path / "topics"
    topic_file(root, "shop.inventory.customers", SECOND)
    cfg = dbz.capture(tmp_path, root, CUSTOMERS)
    assert run_debezium_capture(spark, cfg, "dbz").messages == 3
    rows = dbz.queue_rows(cfg, dbz.QUEUE)
    assert {r["transaction_id"] for r in rows} == {"736"}
    assert sorted((r["position"], r["command_type"]) for r in rows) == [
        (1, "INSERT"), (2, "UPDATE"), (3, "DELETE")]


def test_double_and_float_columns(spark: Any, tmp_path: Path, dbz: Any) -> None:
    fields = json.loads(SNAPSHOT[0])["schema"]["fields"][1]["fields"]
    assert {f["field"]: f["type"] for f in fields}["score"] == "double"
    assert {f["field"]: f["type"] for f in fields}["ratio"] == "float"
    root = tmp_path / "topics"
    topic_file(root, "shop.inventory.customers", SNAPSHOT)
    cfg = dbz.capture(tmp_path, root, CUSTOMERS)
    assert run_debezium_capture(spark, cfg, "dbz").messages == 6
    new = dbz.values(by_id(dbz, cfg)[("INSERT", 3)]["new_values"])
    assert (new["SCORE"], new["RATIO"]) == (("BINARY_DOUBLE", 0.375), ("BINARY_DOUBLE", 0.75))


def test_tombstones_heartbeats_messages_and_metadata_are_skipped(spark: Any, tmp_path: Path,
                                                                 dbz: Any) -> None:
    root = tmp_path / "topics"
    topic_file(root, "shop.inventory.customers", FIRST + SECOND + [TOMBSTONE])
    topic_file(root, "shop.message", lines("message"))
    topic_file(root, "shop.transaction", lines("transaction"))
    # (a sink's files of the heartbeat topic itself, __debezium-heartbeat.shop+0+...,
    # start with "_" and are not read at all)
    (root / "heartbeats.json").write_text('{"ts_ms":1795860477000}\n')
    assert TOMBSTONE == "null" and '"op":"m"' in lines("message")[0]
    cfg = dbz.capture(tmp_path, root, CUSTOMERS)
    result = run_debezium_capture(spark, cfg, "dbz")
    assert (result.files, result.messages) == (4, 5)
    assert result.skipped == {"tombstone": 1, "message": 1, "txmeta": 8, "heartbeat": 1}


def test_flattened_rows_are_refused(spark: Any, tmp_path: Path, dbz: Any) -> None:
    root = tmp_path / "topics"
    flat = topic_file(root, "flat.inventory.notes", lines("flattened"))
    cfg = dbz.capture(tmp_path, root, [{"name": "inventory.notes", "key": ["id"]}],
                      quality=False)
    for _ in range(2):  # nothing is recorded: the files are refused again
        with pytest.raises(DebeziumFileError, match="ExtractNewRecordState") as err:
            run_debezium_capture(spark, cfg, "dbz")
        assert f"{flat}, line 1:" in str(err.value)
    assert dbz.queue_rows(cfg, dbz.QUEUE) == [] and dbz.batch_dirs(tmp_path) == []
    rows = [json.loads(x)["payload"] for x in lines("flattened")]
    topic_file(root, "flat.inventory.notes", [json.dumps({k: v for k, v in r.items()
                                                          if k != "__deleted"}) for r in rows])
    with pytest.raises(DebeziumFileError, match="not Debezium change events"):
        run_debezium_capture(spark, cfg, "dbz")


def test_a_captured_queue_is_read_by_propagation_and_export(spark: Any, tmp_path: Path,
                                                            dbz: Any) -> None:
    root = tmp_path / "topics"
    topic_file(root, "shop.inventory.customers", SNAPSHOT + FIRST + SECOND)
    cfg = dbz.capture(tmp_path, root, CUSTOMERS)
    assert run_debezium_capture(spark, cfg, "dbz").messages == 11
    batches = queue_batches(cfg, dbz.QUEUE)
    for f in Path(batches[0].path.removeprefix("file:")).glob("*.parquet"):
        # the writer: list elements nullable, as the contract's array<string>
        assert pq.read_schema(f).field("key_columns").type.value_field.nullable
    assert qio.read_batches(spark, batches).count() == 11  # the read check propagation runs
    out = export_queue(spark, cfg, dbz.QUEUE, str(tmp_path / "out"), topic_prefix="back")
    assert out.topics == {"back.inventory.customers": 11}


def test_a_failed_capture_leaves_no_batch_and_names_the_line(spark: Any, tmp_path: Path,
                                                             dbz: Any) -> None:
    root = tmp_path / "my topics"
    good = json.loads(SECOND[0])
    bad = json.loads(SECOND[0])
    bad["payload"]["after"]["qty"] = "seven"
    path = topic_file(root, "shop.inventory.customers", [json.dumps(good), json.dumps(bad)])
    cfg = dbz.capture(tmp_path, root, CUSTOMERS, quality=False)
    with pytest.raises(DebeziumFileError) as err:
        run_debezium_capture(spark, cfg, "dbz")
    assert str(err.value).startswith(f"{path}, line 2: inventory.customers.qty: value seven")
    assert "%20" not in str(err.value)
    assert dbz.batch_dirs(tmp_path) == []
    no_op = json.loads(SECOND[1])
    del no_op["payload"]["op"]
    topic_file(root, "shop.inventory.customers", [json.dumps(good), "", json.dumps(no_op)])
    with pytest.raises(DebeziumFileError, match=f"^{re.escape(str(path))}, line 3: 1 events "
                                                "have no 'op'"):
        run_debezium_capture(spark, cfg, "dbz")
    assert dbz.batch_dirs(tmp_path) == []


def test_a_key_only_delete_keeps_only_its_key(spark: Any, tmp_path: Path, dbz: Any) -> None:
    """REPLICA IDENTITY DEFAULT: ``before`` holds the key and the connector's fillers
    (``''``, ``0``, NULL); REPLICA IDENTITY FULL: the whole old row, kept."""
    delete = json.loads(SECOND[2])
    assert delete["payload"]["before"]["name"] == "" and delete["payload"]["before"]["qty"] == 0
    full = json.loads(SECOND[2])
    full["payload"]["before"] = {**full["payload"]["before"], "id": 4, "name": "name 4",
                                 "born": 10961, "qty": 40, "score": 0.5}
    full["payload"]["source"]["lsn"] += 1
    root = tmp_path / "topics"
    topic_file(root, "shop.inventory.customers", [json.dumps(delete), json.dumps(full)])
    cfg = dbz.capture(tmp_path, root, CUSTOMERS)
    assert run_debezium_capture(spark, cfg, "dbz").messages == 2
    rows = by_id(dbz, cfg)
    assert dbz.values(rows[("DELETE", 3)]["old_values"]) == {"ID": ("INTEGER", 3)}
    assert dbz.values(rows[("DELETE", 4)]["old_values"])["NAME"] == ("VARCHAR2", "name 4")
    assert dbz.values(rows[("DELETE", 4)]["old_values"])["QTY"] == ("INTEGER", 40)
