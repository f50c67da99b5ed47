"""A real Airflow (scheduler, DAG processor, API server) runs the propagation DAGs.

One Airflow per module, on a temporary home. Checked against what Airflow and the
destination queue report:

- enabling a schedule unpauses its DAG; the scheduler starts a window run that ends
  green and delivers what was enqueued;
- a run without a logical date (REST ``"logical_date": null``) works;
- a backfill of two past windows carries the pending messages, each delivered once;
- disabling waits for the run in flight, which ends green, then pauses the DAG;
- the configured schedule exists before any run, and the plugin registers once.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from changeflow.airflow.render import write
from changeflow.airflow.testing import AirflowServer
from changeflow.config import load_config
from changeflow.schedules import probe

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

PIPELINE = """
version: 1
sites:
  site1: {staging_root: s1/staging, target_root: s1/t, state_url: "sqlite:///s1/state.db", database: DBS1.EXAMPLE.COM}
  site2: {staging_root: s2/staging, target_root: s2/t, state_url: "sqlite:///s2/state.db", database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.q, site: site1}
  - {name: strmadmin.q, site: site2}
  - {name: strmadmin.bq, site: site1}
  - {name: strmadmin.bq, site: site2}
propagations:
  # a 25-second window every 40 seconds: the scheduler starts one soon
  - name: live
    source_queue: strmadmin.q@site1
    destination_queue: strmadmin.q@site2
    schedule: {duration: 25, next_time: 40, latency: 1}
  # one 30-second window a day at 00:00: no scheduled run during the test, only backfills
  - name: daily
    source_queue: strmadmin.bq@site1
    destination_queue: strmadmin.bq@site2
    schedule: {start: "2024-01-01T00:00:00Z", duration: 30, next_time: 86400, latency: 1}
applies:
  - {name: ap, queue: strmadmin.q@site2}
  - {name: bp, queue: strmadmin.bq@site2}
"""
LIVE = "changeflow_t__propagation__live"
DAILY = "changeflow_t__propagation__daily"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "dags").mkdir()
    (root / "p.yaml").write_text(PIPELINE)
    write(load_config(root / "p.yaml"), project_root=str(root), pipeline="t",
          out_dir=str(root / "dags"))
    (root / "jobs").symlink_to(Path(__file__).resolve().parents[3] / "jobs")
    return root


@pytest.fixture(scope="module")
def airflow(project: Path) -> Iterator[AirflowServer]:
    server = AirflowServer(project / "airflow", project / "dags",
                           env={"CHANGEFLOW_CONFIG": str(project / "p.yaml"),
                                "CHANGEFLOW_PIPELINE": "t"})
    server.start()
    try:
        server.wait_for_dag(LIVE)
        server.wait_for_dag(DAILY)
        yield server
    finally:
        server.stop()


def cli(airflow: AirflowServer, project: Path, *args: str) -> str:
    return airflow.run("changeflow", "schedules", "--config", str(project / "p.yaml"),
                       "--pipeline", "t", *args)


def test_plugin_registers_once_and_schedules_exist_before_any_run(
        airflow: AirflowServer, project: Path) -> None:
    out = airflow.run("airflow", "plugins", "-o", "json")
    plugins = json.loads(out[out.index("["):])
    assert [p["name"] for p in plugins] == ["changeflow"], out[-2000:]
    assert "already registered" not in out + airflow.logs(100_000)
    listed = cli(airflow, project, "-o", "json")
    rows = {r["propagation"]: r for r in json.loads(listed[listed.index("["):])}
    assert set(rows) == {"live", "daily"}
    assert rows["daily"]["summary"] == "window 30 s every 1 d, latency 1 s"
    assert rows["live"]["state"] == "enabled" and rows["live"]["dag_paused"] is True


def test_scheduled_window_runs_green_and_delivers(airflow: AirflowServer, project: Path) -> None:
    cfg = load_config(project / "p.yaml")
    probe.enqueue_probes(cfg, "strmadmin.q@site1", ["s1", "s2", "s3"], scn=1)
    out = cli(airflow, project, "enable", "live")
    assert "unpaused" in out
    assert airflow.api("GET", f"/api/v2/dags/{LIVE}")["is_paused"] is False
    run = airflow.wait_for_run(LIVE, lambda r: r["run_type"] == "scheduled", timeout=240)
    assert run["state"] == "success", (run, airflow.logs())
    assert airflow.task_states(LIVE, run["dag_run_id"]) == {"window": "success"}
    assert sorted(probe.arrived(cfg, "strmadmin.q@site2", "apply:ap")) == ["s1", "s2", "s3"]


def test_run_without_logical_date(airflow: AirflowServer, project: Path) -> None:
    cfg = load_config(project / "p.yaml")
    probe.enqueue_probes(cfg, "strmadmin.q@site1", ["m1"], scn=10)
    made = airflow.api("POST", f"/api/v2/dags/{LIVE}/dagRuns",
                       {"logical_date": None, "note": "no logical date"})
    assert made["logical_date"] is None
    run = airflow.wait_for_run(LIVE, lambda r: r["dag_run_id"] == made["dag_run_id"])
    assert run["state"] == "success", airflow.logs()
    assert airflow.task_states(LIVE, run["dag_run_id"])["window"] in ("success", "skipped")
    deadline = time.monotonic() + 90
    while "m1" not in probe.arrived(cfg, "strmadmin.q@site2", "apply:ap"):
        assert time.monotonic() < deadline, "m1 never arrived"
        time.sleep(1)


def test_backfill_of_two_past_windows_delivers_pending_once(
        airflow: AirflowServer, project: Path) -> None:
    cfg = load_config(project / "p.yaml")
    ids = [f"b{i}" for i in range(6)]
    probe.enqueue_probes(cfg, "strmadmin.bq@site1", ids[:3], scn=100)
    probe.enqueue_probes(cfg, "strmadmin.bq@site1", ids[3:], scn=200)
    cli(airflow, project, "enable", "daily")
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    frm, to = today - dt.timedelta(days=2), today - dt.timedelta(days=1)
    out = cli(airflow, project, "-o", "json", "backfill", "daily", "--from", frm.isoformat(),
              "--to", to.isoformat())
    assert '"runs": 2' in out, out
    done = []
    deadline = time.monotonic() + 300
    while len(done) < 2:
        assert time.monotonic() < deadline, airflow.runs(DAILY)
        done = [r for r in airflow.runs(DAILY)
                if r["run_type"] == "backfill" and r["state"] in ("success", "failed")]
        time.sleep(2)
    assert [r["state"] for r in done] == ["success", "success"], airflow.logs()
    starts = sorted(r["data_interval_start"][:10] for r in done)
    assert starts == [frm.date().isoformat(), to.date().isoformat()]
    assert sorted(probe.arrived(cfg, "strmadmin.bq@site2", "apply:bp")) == ids  # each once


def test_disable_ends_the_window_and_pauses_without_stranding(
        airflow: AirflowServer, project: Path) -> None:
    deadline = time.monotonic() + 120
    while not [r for r in airflow.runs(LIVE) if r["state"] == "running"]:
        assert time.monotonic() < deadline, "no window run started"
        time.sleep(1)
    out = cli(airflow, project, "disable", "live", "--wait", "90")
    assert "paused" in out and "as soon as" not in out, out
    runs = airflow.runs(LIVE)
    assert not [r for r in runs if r["state"] in ("running", "queued")], runs
    assert [r for r in runs if r["state"] == "failed"] == [], runs
    assert airflow.api("GET", f"/api/v2/dags/{LIVE}")["is_paused"] is True
