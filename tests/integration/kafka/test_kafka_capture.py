"""PostgreSQL → Debezium's PostgreSQL connector in Kafka Connect → Kafka → changeflow.

Everything is real and started by the test: a PostgreSQL cluster, a KRaft broker, a
Kafka Connect worker running Debezium 3.6.1.Final (``changeflow.testing.kafka``), and
the ``kafka`` capture reading the topics with Spark's Kafka source. The LCRs, replayed,
must equal the source table; offsets move only with a committed batch. pgbench's
transactions go on through propagation into the PostgreSQL apply (and, in the long run
with the capture killed, an Iceberg apply): the targets' rows equal the source's.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
from changeflow.config import PipelineConfig, load_config
from changeflow.debezium.kafka import KafkaOffsetsError, run_kafka_capture, stored_offsets
from changeflow.debezium.reader import DebeziumFileError
from changeflow.sites import queue_site
from changeflow.testing.kafka import KafkaBroker, KafkaConnect, debezium_postgres
from changeflow.testing.pg_cluster import PgCluster

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

FIXTURES = Path(__file__).parents[2] / "fixtures" / "debezium" / "pg-3.6.1"
TABLE = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, score double precision,
                        amount numeric(10,2), born date, seen timestamptz);
INSERT INTO customers VALUES (1, 'Ann', 1.5, 10.25, '2000-01-01', '2024-01-02 03:04:05+00'),
                             (2, 'Bob', NULL, NULL, NULL, NULL);
"""
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


@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, Any]]:
    """PostgreSQL, a broker, Connect with Debezium streaming ``public.customers``."""
    pg = PgCluster().start()
    broker = KafkaBroker().start()
    connect = KafkaConnect(broker).start()
    try:
        pg.sql("postgres", TABLE)
        connect.add("pg1", debezium_postgres("pg1", port=pg.port, dbname="postgres",
                                             prefix="pg1", tables=["public.customers"],
                                             **{"provide.transaction.metadata": "true"}))
        yield {"pg": pg, "broker": broker, "connect": connect}
    finally:
        connect.stop()
        broker.stop()
        pg.stop()


def _pipeline(root: Path, broker: KafkaBroker, topics: list[str],
              table: str = "{name: public.customers, key: [id]}") -> PipelineConfig:
    path = root / "pipeline.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        sites:
          s1: {{staging_root: {root}/staging, target_root: {root}/targets,
               state_url: "sqlite:///{root}/state.db", database: DBS1.EXAMPLE.COM}}
        queues: [{{name: strm.q, site: s1}}]
        captures:
          - name: kcap
            queue: strm.q@s1
            source:
              type: kafka
              database: PG1.EXAMPLE.COM
              bootstrap_servers: {broker.bootstrap}
              topics: {json.dumps(topics)}
              tables: [{table}]
    """))
    return load_config(path)


def _wait(broker: KafkaBroker, topic: str, n: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(broker.consume(topic, expect=n, timeout_ms=5000)) >= n:
            return
        time.sleep(1)
    raise AssertionError(f"{topic} did not reach {n} records")


def _rows(cfg: PipelineConfig) -> list[dict[str, Any]]:
    from changeflow.debezium.export import queue_batches
    from changeflow.queues import arrow_io

    batches = queue_batches(cfg, "strm.q@s1")
    return arrow_io.read_arrow_batches(batches).to_pylist() if batches else []


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
    cfg = _pipeline(tmp_path, broker, [topic, "pg1.transaction"])
    first = run_kafka_capture(spark, cfg, "kcap")
    assert first.messages == 7 and first.skipped.get("tombstone") == 1
    assert first.skipped.get("txmeta", 0) >= 4
    rows = _rows(cfg)
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
    rows = _rows(cfg)
    assert len({r["msg_id"] for r in rows}) == len(rows) == 9  # no duplicate
    assert _replay(rows) == _source(pg)


def test_a_bad_record_names_topic_partition_and_offset(spark: Any, tmp_path: Path,
                                                       stack: dict[str, Any]) -> None:
    broker = stack["broker"]
    good = (FIXTURES / "customers.jsonl").read_text().splitlines()[8]  # a real insert
    good = good.replace('"schema":"inventory"', '"schema":"public"')
    broker.create_topic("bad.records")
    broker.produce("bad.records", [(None, good), (None, good.replace('"op":"c"', '"op":"x"'))])
    cfg = _pipeline(tmp_path, broker, ["bad.records"])
    with pytest.raises(DebeziumFileError,
                       match="topic bad.records partition 0 offset 1: unknown op 'x'"):
        run_kafka_capture(spark, cfg, "kcap")
    rt, _ = queue_site(cfg, "strm.q@s1")
    assert stored_offsets(rt, "kcap") == {} and _rows(cfg) == []
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
    cfg = _pipeline(tmp_path, broker, ["gone.records"])
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
    cfg = _pipeline(tmp_path, broker, [topic])
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
    assert len(_rows(cfg)) == (3 if committed else 0)
    again = run_kafka_capture(spark, cfg, "kcap")
    assert again.messages == (0 if committed else 3)
    broker.produce(topic, [(None, line.replace('"id":5001', '"id":4'))])
    assert run_kafka_capture(spark, cfg, "kcap").messages == 1
    rows = _rows(cfg)
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
    cfg = _pipeline(tmp_path, broker, ["plain.records"], table=(
        "{name: public.customers, key: [id], columns: {id: integer, name: text, born: date, "
        "qty: integer, score: float8, ratio: real, bio: text, photo: bytea}}"))
    result = run_kafka_capture(spark, cfg, "kcap")
    assert result.messages == 5 and result.offsets == {"plain.records:0": 6}
    rows = {(r["command_type"], r["position"]): r for r in _rows(cfg)}
    new = {k: lcr.decode_value(v) for k, v in rows[("UPDATE", 1)]["new_values"]}
    assert new == {"ID": 1, "NAME": "renamed", "BORN": dt.date(2000, 1, 2), "QTY": 11,
                   "SCORE": 0.125, "RATIO": 0.25}  # unchanged TOAST left out
    assert {r["transaction_id"] for r in _rows(cfg)} == {"735", "736"}


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

    def rows(queue: str) -> list[dict[str, Any]]:
        from changeflow.debezium.export import queue_batches
        from changeflow.queues import arrow_io

        got = arrow_io.read_arrow_batches(queue_batches(cfg, queue)).to_pylist()
        return sorted(got, key=lambda r: r["msg_id"])

    assert rows("strm.q@s1") == rows("strm.files@s1")


# -- pgbench → Debezium → Kafka → capture → propagation → apply (issue 28, item 5) ----------
PGBENCH_TABLES = {"pgbench_accounts": "aid", "pgbench_branches": "bid",
                  "pgbench_tellers": "tid", "pgbench_history": "hid"}
SNAPSHOT_ROWS = 1 + 10 + 1000
# pgbench's tpcb-like transaction over 1,000 accounts, 10 tellers and one branch (the
# built-in script draws from scale x 100,000 accounts): three updates and an insert
PGBENCH_SCRIPT = """\
\\set aid random(1, 1000)
\\set tid random(1, 10)
\\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = 1;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)
  VALUES (:tid, 1, :aid, :delta, CURRENT_TIMESTAMP);
END;
"""
CAPTURE_LOOP = "\n".join([
    "import sys, time",
    "from changeflow.config import load_config",
    "from changeflow.debezium.kafka import run_kafka_capture",
    "from changeflow.spark import get_session",
    "spark, cfg = get_session('kafka-capture-loop'), load_config(sys.argv[1])",
    "end = time.monotonic() + float(sys.argv[2])",
    "while time.monotonic() < end:",
    "    run_kafka_capture(spark, cfg, 'kcap')",
    "    time.sleep(0.5)"])


def _pgbench_source(spark: Any, stack: dict[str, Any], tmp_path: Path,
                    name: str) -> PipelineConfig:
    """Databases ``<name>`` (1,011 rows, streamed by a connector ``<name>`` once its
    snapshot is in Kafka) and ``<name>_dst`` (the same tables, empty), and a pipeline:
    the ``kafka`` capture, a propagation to a second site, a PostgreSQL apply and an
    Iceberg apply."""
    pg, broker, connect = stack["pg"], stack["broker"], stack["connect"]
    for db in (name, f"{name}_dst"):
        pg.createdb(db)
        pg.tool("pgbench", "-q", "-i", "-I", "dtp", "-s", "1", db=db)
        pg.sql(db, "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")
    pg.sql(name, """
        INSERT INTO pgbench_branches VALUES (1, 0, '');
        INSERT INTO pgbench_tellers SELECT t, 1, 0, '' FROM generate_series(1, 10) t;
        INSERT INTO pgbench_accounts SELECT a, 1, 0, '' FROM generate_series(1, 1000) a;
    """)
    connect.add(name, debezium_postgres(
        name, port=pg.port, dbname=name, prefix=name,
        tables=[f"public.{t}" for t in PGBENCH_TABLES],
        **{"provide.transaction.metadata": "true"}))
    os.environ[f"CF_{name.upper()}_DST"] = pg.url(f"{name}_dst")
    tables = json.dumps([{"name": f"public.{t}", "key": [k]} for t, k in PGBENCH_TABLES.items()])
    topics = json.dumps([f"{name}.public.{t}" for t in PGBENCH_TABLES] + [f"{name}.transaction"])
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        sites:
          s1: {{staging_root: {tmp_path}/s1/staging, target_root: {tmp_path}/s1/targets,
               state_url: "sqlite:///{tmp_path}/s1/state.db", database: DBS1.EXAMPLE.COM}}
          s2: {{staging_root: {tmp_path}/s2/staging, target_root: {tmp_path}/s2/targets,
               state_url: "sqlite:///{tmp_path}/s2/state.db", database: DBS2.EXAMPLE.COM}}
        queues: [{{name: strm.cq, site: s1}}, {{name: strm.aq, site: s2}}]
        captures:
          - name: kcap
            queue: strm.cq@s1
            source: {{type: kafka, database: PG1.EXAMPLE.COM,
                      bootstrap_servers: {broker.bootstrap}, topics: {topics},
                      tables: {tables}}}
        propagations:
          - {{name: p12, source_queue: strm.cq@s1, destination_queue: strm.aq@s2}}
        applies:
          - name: topg
            queue: strm.aq@s2
            target: {{type: postgres, url_env: CF_{name.upper()}_DST}}
          - {{name: toiceberg, queue: strm.aq@s2}}
    """))
    cfg = load_config(path)
    _wait_records(spark, cfg, SNAPSHOT_ROWS)
    return cfg


def _wait_records(spark: Any, cfg: PipelineConfig, n: int,
                  timeout: float = 300.0) -> None:
    """Wait until the tables' topics hold ``n`` records (end offsets, asked of the broker
    by the capture's own probe on the test's Spark session)."""
    from changeflow.debezium.kafka import broker_offsets, kafka_source

    source = kafka_source(cfg.component("capture", "kcap"))
    deadline, got = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        got = sum(end for (topic, _), (_, end) in broker_offsets(spark, source).items()
                  if not topic.endswith(".transaction"))
        if got >= n:
            assert got == n, f"the connector wrote {got} records, {n} expected"
            return
        time.sleep(1)
    raise AssertionError(f"the connector wrote {got} of {n} records in {timeout:.0f} s")


def _pgbench(stack: dict[str, Any], tmp_path: Path, db: str, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "tpcb-1000.sql"
    script.write_text(PGBENCH_SCRIPT)
    argv = stack["pg"].argv("pgbench", "-n", "-f", str(script), *args, db=db)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _transactions(bench: subprocess.Popen[str], timeout: float) -> int:
    out, _ = bench.communicate(timeout=timeout)
    assert bench.returncode == 0, out
    line = next(x for x in out.splitlines() if "transactions actually processed" in x)
    return int(line.split(":")[1].split("/")[0])


def _propagate_and_apply(spark: Any, cfg: PipelineConfig, iceberg: bool) -> None:
    from changeflow.apply.engine import apply_once
    from changeflow.apply.postgres import apply_pg_once
    from changeflow.propagation import propagate_once

    while propagate_once(spark, cfg, "p12").batches_read:
        pass
    applied = apply_pg_once(None, cfg, "topg")
    assert applied.errors == 0 and applied.changes > 0
    if iceberg:
        result = apply_once(spark, cfg, "toiceberg")
        assert result.errors == 0 and result.changes > 0


def _assert_targets_equal_source(spark: Any, pg: PgCluster, cfg: PipelineConfig, db: str,
                                 iceberg: bool) -> None:
    from changeflow.apply.engine import targets_of
    from changeflow.targets.read import read_table

    with pg.connect(db) as s, pg.connect(f"{db}_dst") as d:
        for table, key in PGBENCH_TABLES.items():
            expected = s.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
            assert expected, f"{table} is empty: the workload did not run"
            assert d.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall() == expected, \
                f"{table} differs in the PostgreSQL target"
            if iceberg:
                cols = [c.name for c in s.execute(f"SELECT * FROM {table} LIMIT 0").description]
                catalog = targets_of(cfg, cfg.component("apply", "toiceberg"))
                got = read_table(spark, catalog, f"public.{table}").select(*cols).collect()
                assert sorted(tuple(r) for r in got) == sorted(expected), \
                    f"{table} differs in the Iceberg target"


def _captured_once(cfg: PipelineConfig, records: int) -> None:
    """Every record of the topics is in the capture's queue once."""
    from changeflow.debezium.export import queue_batches
    from changeflow.queues import arrow_io

    ids = arrow_io.read_arrow_batches(queue_batches(cfg, "strm.cq@s1")).column(
        "msg_id").to_pylist()
    assert len(ids) == len(set(ids)) == records


def test_pgbench_through_debezium_and_kafka_is_applied_equal_to_the_source(
        spark: Any, tmp_path: Path, stack: dict[str, Any]) -> None:
    """pgbench → Debezium's connector → Kafka → ``kafka`` capture → propagation → the
    PostgreSQL apply: the target's rows equal the source's."""
    cfg = _pgbench_source(spark, stack, tmp_path, "pgb")
    n = _transactions(_pgbench(stack, tmp_path, "pgb", "-c", "2", "-j", "2", "-T", "5",
                               "-R", "60"), timeout=60)
    records = SNAPSHOT_ROWS + 4 * n
    _wait_records(spark, cfg, records)
    assert run_kafka_capture(spark, cfg, "kcap").messages == records
    _captured_once(cfg, records)
    _propagate_and_apply(spark, cfg, iceberg=False)
    _assert_targets_equal_source(spark, stack["pg"], cfg, "pgb", iceberg=False)


@pytest.mark.long
def test_pgbench_for_a_minute_with_the_capture_killed(spark: Any, tmp_path: Path,
                                                      stack: dict[str, Any]) -> None:
    """60 s of pgbench through Debezium; the capture (a process looping over
    ``run_kafka_capture``) is killed with SIGKILL at a random moment and the next run
    catches up: every record captured once, and the PostgreSQL and Iceberg targets equal
    the source."""
    cfg = _pgbench_source(spark, stack, tmp_path, "pgl")
    bench = _pgbench(stack, tmp_path, "pgl", "-c", "4", "-j", "2", "-T", "60", "-R", "200")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
           "CHANGEFLOW_DRIVER_MEMORY": "1g"}
    loop = subprocess.Popen([sys.executable, "-c", CAPTURE_LOOP, str(cfg.source_path), "300"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    rt, _ = queue_site(cfg, "strm.cq@s1")
    deadline = time.monotonic() + 120  # until the loop has committed a batch, then later
    while not stored_offsets(rt, "kcap") and time.monotonic() < deadline:
        assert loop.poll() is None, loop.communicate()[1][-3000:]
        time.sleep(0.5)
    assert stored_offsets(rt, "kcap"), "the capture loop committed nothing in 120 s"
    time.sleep(random.uniform(2.0, 20.0))
    os.kill(loop.pid, signal.SIGKILL)
    loop.wait()
    records = SNAPSHOT_ROWS + 4 * _transactions(bench, timeout=180)
    _wait_records(spark, cfg, records, timeout=600)
    run_kafka_capture(spark, cfg, "kcap")
    _captured_once(cfg, records)
    _propagate_and_apply(spark, cfg, iceberg=True)
    _assert_targets_equal_source(spark, stack["pg"], cfg, "pgl", iceberg=True)
