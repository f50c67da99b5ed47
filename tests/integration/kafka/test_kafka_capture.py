"""PostgreSQL → Debezium's PostgreSQL connector in Kafka Connect → Kafka → changeflow.

Everything is real and started by the test: a PostgreSQL cluster, a KRaft broker, a
Kafka Connect worker running Debezium 3.6.1.Final (``changeflow.testing.kafka``), and
the ``kafka`` capture reading the topics with Spark's Kafka source. The LCRs, replayed,
must equal the source table; offsets move only with a committed batch. (pgbench's
transactions through the whole pipeline: ``test_kafka_pgbench.py``.)
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
from changeflow.config import load_config
from changeflow.debezium.kafka import KafkaOffsetsError, run_kafka_capture, stored_offsets
from changeflow.debezium.reader import DebeziumFileError
from changeflow.sites import queue_site
from changeflow.testing.kafka import KafkaBroker
from changeflow.testing.pg_cluster import PgCluster

from .conftest import FIXTURES, pipeline, queue_rows

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

CHANGES = """
INSERT INTO customers VALUES (3, 'Cy', 2.5, -3.10, '1999-12-31', '2025-06-01 00:00:00.5+02');
UPDATE customers SET name = 'Anne', amount = 11.00 WHERE id = 1;
BEGIN;
DELETE FROM customers WHERE id = 2;
INSERT INTO customers (id, name) VALUES (4, 'Di');
UPDATE customers SET score = 0.25 WHERE id = 3;
COMMIT;
"""
MORE = "UPDATE customers SET name = 'Cyrus' WHERE id = 3; DELETE FROM customers WHERE id = 4;"


def _wait(broker: KafkaBroker, topic: str, n: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(broker.consume(topic, expect=n, timeout_ms=5000)) >= n:
            return
        time.sleep(1)
    raise AssertionError(f"{topic} did not reach {n} records")


def _replay(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The table the LCRs describe, applied in commit order."""
    table: dict[int, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["commit_scn"], r["position"])):
        new = {k.lower(): lcr.decode_value(v) for k, v in (r["new_values"] or [])}
        old = {k.lower(): lcr.decode_value(v) for k, v in (r["old_values"] or [])}
        if r["command_type"] == "DELETE":
            del table[old["id"]]
        else:
            table[new["id"]] = {**table.get(new["id"], {}), **new}
    return table


def _source(pg: PgCluster) -> dict[int, dict[str, Any]]:
    with pg.connect("postgres") as c:
        rows = c.execute("SELECT id, name, score, amount, born, seen FROM customers").fetchall()
    return {r[0]: {"id": r[0], "name": r[1], "score": r[2],
                   "amount": None if r[3] is None else decimal.Decimal(r[3]).quantize(
                       decimal.Decimal("1E-10")),
                   "born": r[4], "seen": None if r[5] is None else r[5].astimezone(dt.UTC)}
            for r in rows}


def test_debezium_topics_are_captured_exactly_once(spark: Any, tmp_path: Path,
                                                   stack: dict[str, Any]) -> None:
    pg, broker = stack["pg"], stack["broker"]
    topic = "pg1.public.customers"
    _wait(broker, topic, 2)  # the snapshot
    pg.sql("postgres", CHANGES)
    _wait(broker, topic, 2 + 5 + 1)  # and a tombstone after the delete
    cfg = pipeline(tmp_path, broker, [topic, "pg1.transaction"])
    first = run_kafka_capture(spark, cfg, "kcap")
    assert first.messages == 7 and first.skipped.get("tombstone") == 1
    assert first.skipped.get("txmeta", 0) >= 4
    rows = queue_rows(cfg)
    assert sorted(r["command_type"] for r in rows) == ["DELETE"] + ["INSERT"] * 4 + ["UPDATE"] * 2
    assert _replay(rows) == _source(pg)
    txn = {r["transaction_id"] for r in rows if r["command_type"] == "DELETE"}
    assert len({(r["commit_scn"], r["commit_time"]) for r in rows
                if r["transaction_id"] in txn}) == 1  # one transaction of three changes
    assert sum(r["transaction_id"] in txn for r in rows) == 3

    again = run_kafka_capture(spark, cfg, "kcap")  # nothing new: nothing enqueued
    assert again.messages == 0 and again.offsets == first.offsets
    pg.sql("postgres", MORE)
    _wait(broker, topic, 8 + 3)
    third = run_kafka_capture(spark, cfg, "kcap")
    assert third.messages == 2
    rows = queue_rows(cfg)
    assert len({r["msg_id"] for r in rows}) == len(rows) == 9  # no duplicate
    assert _replay(rows) == _source(pg)


def test_a_bad_record_names_topic_partition_and_offset(spark: Any, tmp_path: Path,
                                                       stack: dict[str, Any]) -> None:
    broker = stack["broker"]
    good = (FIXTURES / "customers.jsonl").read_text().splitlines()[8]  # a real insert
    good = good.replace('"schema":"inventory"', '"schema":"public"')
    broker.create_topic("bad.records")
    broker.produce("bad.records", [(None, good), (None, good.replace('"op":"c"', '"op":"x"'))])
    cfg = pipeline(tmp_path, broker, ["bad.records"])
    with pytest.raises(DebeziumFileError,
                       match="topic bad.records partition 0 offset 1: unknown op 'x'"):
        run_kafka_capture(spark, cfg, "kcap")
    rt, _ = queue_site(cfg, "strm.q@s1")
    assert stored_offsets(rt, "kcap") == {} and queue_rows(cfg) == []
    broker.produce("bad.records", [(None, "{not json")])
    with pytest.raises(DebeziumFileError, match="topic bad.records partition 0 offset"):
        run_kafka_capture(spark, cfg, "kcap")
    assert stored_offsets(rt, "kcap") == {}


def test_offsets_deleted_before_they_were_captured_stop_the_capture(
        spark: Any, tmp_path: Path, stack: dict[str, Any]) -> None:
    broker = stack["broker"]
    line = (FIXTURES / "customers.jsonl").read_text().splitlines()[8]
    line = line.replace('"schema":"inventory"', '"schema":"public"')
    broker.create_topic("gone.records")
    broker.produce("gone.records", [(None, line), (None, line.replace('"id":5001', '"id":5002'))])
    cfg = pipeline(tmp_path, broker, ["gone.records"])
    assert run_kafka_capture(spark, cfg, "kcap").offsets == {"gone.records:0": 2}
    broker.produce("gone.records", [(None, line.replace('"id":5001', f'"id":{i}'))
                                    for i in (7, 8)])
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "gone.records", "partition": 0,
                                                "offset": 4}], "version": 1}))
    broker.tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server",
                broker.bootstrap, "--offset-json-file", str(spec))
    with pytest.raises(KafkaOffsetsError,
                       match="topic gone.records partition 0: offsets 2 to 3 are gone"):
        run_kafka_capture(spark, cfg, "kcap")
    rt, _ = queue_site(cfg, "strm.q@s1")
    assert stored_offsets(rt, "kcap") == {("gone.records", 0): 2}


@pytest.mark.parametrize("crash", ["capture.before_commit", "capture.after_commit"])
def test_a_capture_killed_at_its_commit_loses_and_repeats_nothing(
        spark: Any, tmp_path: Path, stack: dict[str, Any], crash: str) -> None:
    """The capture job (``jobs/capture.py``) dies like ``kill -9`` just before or just
    after its state-store commit; the next run captures every record once."""
    broker = stack["broker"]
    line = (FIXTURES / "customers.jsonl").read_text().splitlines()[8]
    line = line.replace('"schema":"inventory"', '"schema":"public"')
    topic = f"killed.{crash.split('.')[1]}"
    broker.create_topic(topic)
    broker.produce(topic, [(None, line.replace('"id":5001', f'"id":{i}')) for i in (1, 2, 3)])
    cfg = pipeline(tmp_path, broker, [topic])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
           "CHANGEFLOW_CRASH_AT": crash, "CHANGEFLOW_DRIVER_MEMORY": "1g"}
    job = Path(__file__).parents[3] / "jobs" / "capture.py"
    done = subprocess.run([sys.executable, str(job), "--config", str(cfg.source_path),
                           "--name", "kcap"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 137, done.stderr[-3000:]
    rt, _ = queue_site(cfg, "strm.q@s1")
    committed = crash == "capture.after_commit"
    assert stored_offsets(rt, "kcap") == ({(topic, 0): 3} if committed else {})
    assert len(queue_rows(cfg)) == (3 if committed else 0)
    again = run_kafka_capture(spark, cfg, "kcap")
    assert again.messages == (0 if committed else 3)
    broker.produce(topic, [(None, line.replace('"id":5001', '"id":4'))])
    assert run_kafka_capture(spark, cfg, "kcap").messages == 1
    rows = queue_rows(cfg)
    assert len(rows) == len({r["msg_id"] for r in rows}) == 4
    assert stored_offsets(rt, "kcap") == {(topic, 0): 4}


def test_json_without_schemas(spark: Any, tmp_path: Path, stack: dict[str, Any]) -> None:
    """Records written with ``schemas.enable=false``: the declared columns type them."""
    broker = stack["broker"]
    events = [json.loads(x)["payload"] for x in
              (FIXTURES / "customers.jsonl").read_text().splitlines()[6:11]]
    for e in events:
        e["source"]["schema"] = "public"
    broker.create_topic("plain.records")
    broker.produce("plain.records", [(None, json.dumps(e)) for e in events] + [(None, "null")])
    cfg = pipeline(tmp_path, broker, ["plain.records"], table=(
        "{name: public.customers, key: [id], columns: {id: integer, name: text, born: date, "
        "qty: integer, score: float8, ratio: real, bio: text, photo: bytea}}"))
    result = run_kafka_capture(spark, cfg, "kcap")
    assert result.messages == 5 and result.offsets == {"plain.records:0": 6}
    rows = {(r["command_type"], r["position"]): r for r in queue_rows(cfg)}
    new = {k: lcr.decode_value(v) for k, v in rows[("UPDATE", 1)]["new_values"]}
    assert new == {"ID": 1, "NAME": "renamed", "BORN": dt.date(2000, 1, 2), "QTY": 11,
                   "SCORE": 0.125, "RATIO": 0.25}  # unchanged TOAST left out
    assert {r["transaction_id"] for r in queue_rows(cfg)} == {"735", "736"}


def test_a_queue_exported_to_kafka_comes_back_identical(spark: Any, tmp_path: Path,
                                                        stack: dict[str, Any]) -> None:
    """Files of the connector's own events → queue → ``export_to_kafka`` (a topic per
    table, keyed by primary key) → the ``kafka`` capture → the same LCRs."""
    from changeflow.debezium.capture import run_debezium_capture
    from changeflow.debezium.export import export_to_kafka

    broker = stack["broker"]
    events = (FIXTURES / "customers.jsonl").read_text().splitlines()
    files = tmp_path / "files" / "shop.inventory.customers"
    files.mkdir(parents=True)
    (files / "shop.inventory.customers+0+0000000000.json").write_text("\n".join(events) + "\n")
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        sites:
          s1: {{staging_root: {tmp_path}/staging, target_root: {tmp_path}/targets,
               state_url: "sqlite:///{tmp_path}/state.db", database: DBS1.EXAMPLE.COM}}
        queues: [{{name: strm.files, site: s1}}, {{name: strm.q, site: s1}}]
        captures:
          - name: files
            queue: strm.files@s1
            source: {{type: debezium, database: PG1, root: {tmp_path}/files,
                      tables: [{{name: inventory.customers, key: [id]}}]}}
          - name: kcap
            queue: strm.q@s1
            source: {{type: kafka, database: OTHER, bootstrap_servers: {broker.bootstrap},
                      topics: [back.inventory.customers]}}
    """))
    cfg = load_config(path)
    assert run_debezium_capture(spark, cfg, "files").messages == 11
    out = export_to_kafka(spark, cfg, "strm.files@s1", broker.bootstrap, topic_prefix="back")
    assert out.topics == {"back.inventory.customers": 11}
    records = broker.consume("back.inventory.customers", expect=11)
    assert json.loads(records[0]["key"])["payload"] == {"id": 1}
    assert json.loads(records[-1]["value"])["payload"]["op"] == "d"
    assert run_kafka_capture(spark, cfg, "kcap").messages == 11

    def queue_rows(queue: str) -> list[dict[str, Any]]:
        from changeflow.debezium.export import queue_batches
        from changeflow.queues import arrow_io

        got = arrow_io.read_arrow_batches(queue_batches(cfg, queue)).to_pylist()
        return sorted(got, key=lambda r: r["msg_id"])

    assert queue_rows("strm.q@s1") == queue_rows("strm.files@s1")


# -- pgbench → Debezium → Kafka → capture → propagation → apply (issue 28, item 5) ----------
