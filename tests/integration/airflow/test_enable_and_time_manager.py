"""A real Airflow (scheduler, DAG processor, API server), as ``make airflow`` runs it.

Issue 32:

- item 13: enabling a schedule resumes the window open now: after disable and enable,
  messages pending at the source arrive without waiting for the timetable's next run
  (an hour away for an infinite window);
- item 3: the scheduler runs the AQ time manager: a message that expires while nobody
  dequeues moves to the exception queue with nothing else running.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.airflow.render import write
from changeflow.airflow.testing import AirflowServer
from changeflow.config import load_config
from changeflow.messaging import admin, connect, views
from changeflow.schedules import probe
from changeflow.schedules.window import schedule_store
from changeflow.sites import site

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

PIPELINE = """
version: 1
sites:
  site1: {staging_root: s1/staging, target_root: s1/t, state_url: "sqlite:///s1/state.db", database: DBS1.EXAMPLE.COM}
  site2: {staging_root: s2/staging, target_root: s2/t, state_url: "sqlite:///s2/state.db", database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.q, site: site1}
  - {name: strmadmin.q, site: site2}
propagations:
  # one infinite window (1-hour segments), latency 1 s
  - name: live
    source_queue: strmadmin.q@site1
    destination_queue: strmadmin.q@site2
    schedule: {latency: 1}
applies:
  - {name: ap, queue: strmadmin.q@site2}
"""
LIVE = "changeflow_t__propagation__live"


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
        yield server
    finally:
        server.stop()


def cli(airflow: AirflowServer, project: Path, *args: str) -> str:
    return airflow.run("changeflow", "schedules", "--config", str(project / "p.yaml"),
                       "--pipeline", "t", *args)


def wait_arrival(cfg, msg_id: str, timeout: float) -> float:
    started = time.monotonic()
    while msg_id not in probe.arrived(cfg, "strmadmin.q@site2", "apply:ap"):
        assert time.monotonic() - started < timeout, f"{msg_id} did not arrive in {timeout} s"
        time.sleep(0.5)
    return time.monotonic() - started


def test_the_scheduler_runs_the_time_manager(airflow: AirflowServer, project: Path) -> None:
    store = site(load_config(project / "p.yaml"), "site1").store
    admin.create_queue_table(store, "app.q_qt", "RAW")
    admin.create_queue(store, "app.q", "app.q_qt", start=True)
    mid = connect(store).enqueue("app.q", b"x", expiration=0.5, commit=True)
    deadline = time.monotonic() + 20
    while not views.exception_messages(store, "app.q"):
        assert time.monotonic() < deadline, ("the expired message never moved",
                                             airflow.logs())
        time.sleep(0.25)
    (row,) = views.exception_messages(store, "app.q")
    assert (row["msg_id"], row["state"]) == (mid, "EXPIRED")
    assert "AQ time manager started" in airflow.logs(200_000)


def enable(airflow: AirflowServer, project: Path) -> dict[str, Any]:
    """Enable the schedule; the run the enable names for the open window (REST view)."""
    out = cli(airflow, project, "enable", "live")
    assert "the open window resumes in run" in out, out
    run_id = out.split("the open window resumes in run ", 1)[1].split()[0].rstrip(";,")
    (made,) = [r for r in airflow.runs(LIVE) if r["dag_run_id"] == run_id]
    assert made["note"] == "schedule enabled: the open window resumes", made
    if made["run_type"] == "scheduled":  # the open window's own run, made by the enable
        assert made["logical_date"] == made["data_interval_start"] is not None, made
    else:  # that run exists already (the disable ended it): a run without a logical date
        assert made["run_type"] == "manual" and made["logical_date"] is None, made
    return made


def brief(runs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Runs as (id, type, state, queued_at, start_date): what a failure needs to say."""
    return [(r["dag_run_id"], r["run_type"], r["state"], r["queued_at"], r["start_date"])
            for r in runs]


def assert_takes_window(airflow: AirflowServer, made: dict[str, Any], bound: float = 15,
                        settle: float = 10, drain: float = 45) -> None:
    """The enable's run takes the window within ``bound`` s, and no run stays queued.

    The scheduler starts a run within its heartbeat. A redundant run, one the scheduler
    made for the same window, would sort before or after it and wait queued
    (``max_active_runs=1``) until the window ends, an hour for a segment: after the
    run started, runs are watched for ``settle`` s, and any queued one must be gone
    within ``drain`` s more (a run is queued for a moment before it starts, or at a
    segment's end while the last one stops; under load these take seconds, not hours).
    """
    created = dt.datetime.fromisoformat(made["queued_at"])
    deadline = time.monotonic() + bound + 60  # the clock that matters is Airflow's, below
    while True:
        (run,) = [r for r in airflow.runs(LIVE) if r["dag_run_id"] == made["dag_run_id"]]
        if run["start_date"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert run["start_date"], ("the enable's run never started", brief(airflow.runs(LIVE)))
    took = (dt.datetime.fromisoformat(run["start_date"]) - created).total_seconds()
    assert took < bound, (f"the enable's run started {took:.1f} s after it was made",
                          brief(airflow.runs(LIVE)))
    time.sleep(settle)
    deadline = time.monotonic() + drain
    while queued := [r for r in airflow.runs(LIVE) if r["state"] == "queued"]:
        assert time.monotonic() < deadline, ("a run of the DAG stays queued after the "
                                             "window was taken", brief(queued),
                                             brief(airflow.runs(LIVE)))
        time.sleep(1)


def test_enable_resumes_the_open_window_at_once(airflow: AirflowServer, project: Path) -> None:
    cfg = load_config(project / "p.yaml")
    # the first enable: the DAG, paused since its creation, has no run of the open window
    assert_takes_window(airflow, enable(airflow, project))
    probe.enqueue_probes(cfg, "strmadmin.q@site1", ["before"], scn=1)
    wait_arrival(cfg, "before", 600)  # the window runs (Spark started once)
    out = cli(airflow, project, "disable", "live", "--wait", "240")
    assert "paused" in out, out
    assert airflow.api("GET", f"/api/v2/dags/{LIVE}")["is_paused"] is True
    assert schedule_store(cfg, "live").require("live").process is None  # no window job
    assert not [r for r in airflow.runs(LIVE) if r["state"] in ("queued", "running")]
    probe.enqueue_probes(cfg, "strmadmin.q@site1", ["p1", "p2"], scn=10)
    time.sleep(3)
    assert "p1" not in probe.arrived(cfg, "strmadmin.q@site2", "apply:ap")  # disabled
    enabled = time.monotonic()
    made = enable(airflow, project)
    # what waited is delivered without the timetable's next run (an hour away): the
    # window job starts at once (its start-up is spark-submit's)
    took = wait_arrival(cfg, "p2", 600)
    print(f"pending messages arrived {took:.1f} s after the enable returned "
          f"({time.monotonic() - enabled:.1f} s after it was typed)")
    assert sorted(probe.arrived(cfg, "strmadmin.q@site2", "apply:ap")) == ["before", "p1", "p2"]
    assert_takes_window(airflow, made)


def test_enable_of_a_schedule_whose_dag_an_operator_unpaused(airflow: AirflowServer,
                                                             project: Path) -> None:
    """The schedule is disabled without Airflow (``--no-airflow``): the window job stops,
    and the plugin's listener pauses the DAG once the window's run ends. An operator then
    unpauses the DAG in Airflow while the schedule is still disabled: nothing is
    delivered. The enable finds the DAG unpaused and the window's run made: it gives the
    window a run without a logical date at once, and the scheduler makes no second one."""
    cfg = load_config(project / "p.yaml")
    wait_arrival(cfg, "p2", 600)  # the test before left the window running
    out = cli(airflow, project, "disable", "live", "--no-airflow")
    assert "schedule only" in out, out
    deadline = time.monotonic() + 300
    while not airflow.api("GET", f"/api/v2/dags/{LIVE}")["is_paused"]:
        assert time.monotonic() < deadline, ("the listener did not pause the DAG",
                                             brief(airflow.runs(LIVE)))
        time.sleep(0.5)
    assert schedule_store(cfg, "live").require("live").process is None
    airflow.api("PATCH", f"/api/v2/dags/{LIVE}", {"is_paused": False})
    probe.enqueue_probes(cfg, "strmadmin.q@site1", ["u1"], scn=20)
    time.sleep(5)
    assert "u1" not in probe.arrived(cfg, "strmadmin.q@site2", "apply:ap")  # disabled
    assert airflow.api("GET", f"/api/v2/dags/{LIVE}")["is_paused"] is False
    made = enable(airflow, project)
    assert made["run_type"] == "manual", made  # the window had its run: the enable's is new
    wait_arrival(cfg, "u1", 600)
    assert sorted(probe.arrived(cfg, "strmadmin.q@site2", "apply:ap")) == [
        "before", "p1", "p2", "u1"]
    assert_takes_window(airflow, made)
