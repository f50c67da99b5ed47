"""Remote subscriber end to end through a real propagation DAG run (``airflow dags test``).

A topic at site db1 has a remote subscriber, agent PRIORITY at ``ws.booked@db2``, for
orders of region WEST (seed 002, case 2). Messages are enqueued at db1 with the Python
API; the propagation's window DAG runs once (the window job is a spark-submit); then
PRIORITY dequeues the matching order at db2, its typed payload intact, another
subscriber of db2 gets nothing, and the schedule's statistics count the message.
"""

from __future__ import annotations

import decimal
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from changeflow.config import load_config
from changeflow.messaging import connect, views
from changeflow.schedules.window import schedule_store

pytestmark = [pytest.mark.airflow, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
DAG = "changeflow_t__propagation__oe_to_ws"

PIPELINE = """
version: 1
sites:
  db1: {staging_root: ../work/s1/st, target_root: ../work/s1/t,
        state_url: "sqlite:///../work/s1/state.db", database: DB1.EXAMPLE.COM}
  db2: {staging_root: ../work/s2/st, target_root: ../work/s2/t,
        state_url: "sqlite:///../work/s2/state.db", database: DB2.EXAMPLE.COM}
queues:
  - {name: oe.booked, site: db1, queue_table: oe.orders_qt}
  - {name: ws.booked, site: db2, queue_table: ws.orders_qt}
propagations:
  # windows of 60 s once a day: a manual run between windows makes one pass
  - name: oe_to_ws
    source_queue: oe.booked@db1
    destination_queue: ws.booked@db2
    schedule: {start: "2024-01-01T00:00:00+00:00", duration: 60, next_time: 86400}
messaging:
  types:
    - {name: oe.order_t, fields: {id: INTEGER, region: VARCHAR2(10), amount: NUMBER}}
  queue_tables:
    - {name: oe.orders_qt, site: db1, payload_type: oe.order_t, multiple_consumers: true}
    - {name: ws.orders_qt, site: db2, payload_type: oe.order_t, multiple_consumers: true}
  subscribers:
    - {queue: oe.booked@db1, name: priority, address: ws.booked@db2,
       rule: "tab.user_data.region = 'WEST'"}
    - {queue: ws.booked@db2, name: normal}
"""


def run(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run([str(ROOT / "scripts/env.sh"), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    return out


def test_remote_subscriber_through_a_propagation_dag_run(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "dags").mkdir(parents=True)
    (project / "config").mkdir()
    (project / "jobs").symlink_to(ROOT / "jobs")
    (project / "config" / "p.yaml").write_text(textwrap.dedent(PIPELINE))
    cfg = load_config(project / "config" / "p.yaml")
    src = connect(cfg, site="db1")
    west = src.enqueue("oe.booked", {"id": 1, "region": "WEST", "amount": "12.50"})
    src.enqueue("oe.booked", {"id": 2, "region": "EAST", "amount": 3}, recipients=["local"])
    src.commit()

    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path / "af"),
               AIRFLOW__CORE__DAGS_FOLDER=str(project / "dags"),
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp_path}/af/airflow.db",
               AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(tmp_path / "af" / "logs"))
    run(env, project, "changeflow", "dags", "render", "--config", "config/p.yaml",
        "--pipeline", "t")
    run(env, project, "airflow", "db", "migrate")
    out = run(env, project, "airflow", "dags", "test", DAG)
    assert f"dag_id={DAG}" in out and "state=success" in out, out[-4000:]

    dst = connect(cfg, site="db2")
    got = dst.dequeue("ws.booked", consumer="priority", wait=0)
    assert got is not None and got.msg_id == west
    assert got.payload == {"id": 1, "region": "WEST", "amount": decimal.Decimal("12.50")}
    assert dst.dequeue("ws.booked", consumer="normal", wait=0) is None  # case 2: PRIORITY only
    dst.commit()
    left = views.messages(src.store, "oe.booked")
    assert [(r["consumer"], r["address"]) for r in left] == [("LOCAL", "")]
    stats = schedule_store(cfg, "oe_to_ws").require("oe_to_ws").stats
    assert stats.total_number == 1
