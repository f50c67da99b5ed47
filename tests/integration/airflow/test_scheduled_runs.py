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
import http.server
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.airflow.render import write
from changeflow.airflow.testing import AirflowServer, MailReceiver, json_in
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
  # a 15-second window every 30 seconds: the scheduler starts one soon
  - name: live
    source_queue: strmadmin.q@site1
    destination_queue: strmadmin.q@site2
    schedule: {duration: 15, next_time: 30, latency: 1}
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
BAD = "changeflow_x__propagation__bad"
# A pipeline whose source state store cannot be opened (its directory is a file): the window
# job exits 75 at start-up, Airflow retries it after exactly 30 s and notifies.
BROKEN = """
version: 1
sites:
  site1: {staging_root: b1/staging, target_root: b1/t, state_url: "sqlite:///afile/state.db", database: DBS1.EXAMPLE.COM}
  site2: {staging_root: b2/staging, target_root: b2/t, state_url: "sqlite:///b2/state.db", database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.q, site: site1}
  - {name: strmadmin.q, site: site2}
propagations:
  - {name: bad, source_queue: strmadmin.q@site1, destination_queue: strmadmin.q@site2}
alerts:
  webhook_url: http://127.0.0.1:WEBHOOK/hook
  airflow: {smtp_conn_id: smtp_test, to: [ops@example.com]}
"""


@pytest.fixture(scope="module")
def receivers() -> Iterator[tuple[MailReceiver, Any]]:
    mail = MailReceiver()
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    hook.messages = []  # type: ignore[attr-defined]
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    yield mail, hook
    mail.close()
    hook.shutdown()


class _Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.messages.append(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, receivers: Any) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "dags").mkdir()
    (root / "p.yaml").write_text(PIPELINE)
    write(load_config(root / "p.yaml"), project_root=str(root), pipeline="t",
          out_dir=str(root / "dags"))
    (root / "afile").write_text("a file where a directory should be")
    port = receivers[1].server_address[1]
    (root / "broken.yaml").write_text(BROKEN.replace("WEBHOOK", str(port)))
    write(load_config(root / "broken.yaml"), project_root=str(root), pipeline="x",
          out_dir=str(root / "dags"))
    (root / "jobs").symlink_to(Path(__file__).resolve().parents[3] / "jobs")
    return root


@pytest.fixture(scope="module")
def airflow(project: Path, receivers: Any) -> Iterator[AirflowServer]:
    server = AirflowServer(project / "airflow", project / "dags",
                           env={"CHANGEFLOW_CONFIG": str(project / "p.yaml"),
                                "CHANGEFLOW_PIPELINE": "t",
                                "AIRFLOW_CONN_SMTP_TEST": receivers[0].connection()})
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
    plugins = json_in(out)
    assert [p["name"] for p in plugins] == ["changeflow"], out[-2000:]
    assert "already registered" not in out + airflow.logs(100_000)
    listed = cli(airflow, project, "-o", "json")
    rows = {r["propagation"]: r for r in json_in(listed)}
    assert set(rows) == {"live", "daily"}
    assert rows["daily"]["summary"] == "window 30 s every 1 d, latency 1 s"
    # enabled, but the DAG is paused at creation: the state says so
    assert rows["live"]["state"] == "paused" and rows["live"]["dag_paused"] is True


def test_scheduled_window_runs_green_and_delivers(airflow: AirflowServer, project: Path) -> None:
    cfg = load_config(project / "p.yaml")
    probe.enqueue_probes(cfg, "strmadmin.q@site1", ["s1", "s2", "s3"], scn=1)
    out = cli(airflow, project, "enable", "live")
    assert "unpaused" in out
    assert airflow.api("GET", f"/api/v2/dags/{LIVE}")["is_paused"] is False
    run = airflow.wait_for_run(LIVE, lambda r: r["run_type"] == "scheduled", timeout=600)
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
    assert airflow.task_states(LIVE, run["dag_run_id"]) == {"window": "success"}
    deadline = time.monotonic() + 300
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
    deadline = time.monotonic() + 600  # two windows, each a spark-submit: minutes on a loaded 2-core machine
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
    deadline = time.monotonic() + 300
    while not [r for r in airflow.runs(LIVE) if r["state"] == "running"]:
        assert time.monotonic() < deadline, "no window run started"
        time.sleep(1)
    out = cli(airflow, project, "disable", "live", "--wait", "240")
    assert "paused" in out and "as soon as" not in out, out
    runs = airflow.runs(LIVE)
    assert not [r for r in runs if r["state"] in ("running", "queued")], runs
    assert [r for r in runs if r["state"] == "failed"] == [], runs
    assert airflow.api("GET", f"/api/v2/dags/{LIVE}")["is_paused"] is True


def test_transient_start_failure_retried_after_30_s_and_notified(
        airflow: AirflowServer, receivers: Any) -> None:
    mail, hook = receivers
    airflow.wait_for_dag(BAD)
    airflow.api("PATCH", f"/api/v2/dags/{BAD}", {"is_paused": False})  # the open segment runs
    try:
        _retried_and_notified(airflow, mail, hook)
    finally:
        airflow.api("PATCH", f"/api/v2/dags/{BAD}", {"is_paused": True})


def _retried_and_notified(airflow: AirflowServer, mail: MailReceiver, hook: Any) -> None:
    deadline = time.monotonic() + 400
    while not (runs := airflow.runs(BAD)):
        assert time.monotonic() < deadline, "no run of the broken pipeline"
        time.sleep(1)
    ti_path = f"/api/v2/dags/{BAD}/dagRuns/{runs[0]['dag_run_id']}/taskInstances/window"
    while airflow.api("GET", ti_path)["state"] != "up_for_retry":
        assert time.monotonic() < deadline, airflow.api("GET", ti_path)
        time.sleep(1)
    while not mail.messages or not hook.messages:
        assert time.monotonic() < deadline, (mail.messages, hook.messages)
        time.sleep(0.5)
    # Airflow's SmtpNotifier, from the Airflow connection smtp_test
    assert f"{BAD}.window" in mail.messages[0]["Subject"]
    assert mail.messages[0]["To"] == "ops@example.com"
    # the project's own channel, for a failure the job could not count itself
    assert hook.messages[0]["event"] == "task_retry" and hook.messages[0]["propagation"] == "bad"
    log = airflow.api("GET", f"{ti_path}/logs/1?full_content=true")
    text = json.dumps(log)
    assert "transient failure (exit 75)" in text and "retry in 0:00:30" in text, text[-3000:]
    assert "File exists" in hook.messages[0]["error"]  # the job's own error, not the command


def _window_jobs(name: str) -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of the Python window jobs of a propagation."""
    rows = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        args = " ".join(a.decode(errors="replace") for a in argv if a)
        if ("propagation_window.py" in args and f"--name {name} " in f"{args} "
                and "java" not in argv[0].decode(errors="replace")):
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            rows.append((int(proc.name), ppid, args))
    return rows


def test_window_job_stops_when_its_task_is_killed(airflow: AirflowServer,
                                                  project: Path) -> None:
    cli(airflow, project, "enable", "live")
    deadline = time.monotonic() + 400
    while not (jobs := _window_jobs("live")):
        assert time.monotonic() < deadline, "no window job started"
        time.sleep(1)
    pid, _, args = jobs[0]
    owner = int(args.split("--watch ", 1)[1].split()[0].rsplit(":", 1)[1])
    os.kill(owner, signal.SIGKILL)  # the Airflow task process that started the job
    killed = time.monotonic()
    while any(p == pid for p, _, _ in _window_jobs("live")):
        assert time.monotonic() - killed < 30, "the window job outlived its task"
        time.sleep(0.5)
    assert not [j for j in _window_jobs("live") if j[1] == 1], "orphaned window job"
    cfg = load_config(project / "p.yaml")
    from changeflow.schedules.window import schedule_store

    entry = schedule_store(cfg, "live").require("live").process
    assert entry is None or not entry.endswith(f":{pid}"), entry  # cleared by the job itself
