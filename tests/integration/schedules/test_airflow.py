"""The CLI against a real Airflow metadata database (temp AIRFLOW_HOME, no scheduler).

- enable/disable change the schedule and the DAG's pause state together;
- a command that cannot reach Airflow refuses before changing anything, says what to
  set, and leaves no stray ``~/airflow/airflow.db``;
- the backfill of a disabled (paused) schedule is refused with a clear message;
- the window DAG's timetable carries the configuration and propagation the listener
  needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from changeflow.airflow.render import write
from changeflow.config import PipelineConfig
from changeflow.schedules.window import schedule_store

pytestmark = [pytest.mark.airflow, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
DAG = "changeflow_t__propagation__p12"


def _env(tmp: Path, cfg: PipelineConfig) -> dict[str, str]:
    return dict(os.environ, AIRFLOW_HOME=str(tmp / "af"),
                AIRFLOW__CORE__DAGS_FOLDER=str(tmp / "dags"),
                AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp}/af/airflow.db",
                AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(tmp / "af/logs"),
                CHANGEFLOW_CONFIG=str(cfg.source_path), CHANGEFLOW_PIPELINE="t")


def _run(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(ROOT / "scripts/env.sh"), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    if ok:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def _paused(env: dict[str, str]) -> bool:
    """Whether Airflow's metadata database records the DAG as paused (``dag.is_paused``)."""
    db = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute("SELECT is_paused FROM dag WHERE dag_id = ?", (DAG,)).fetchone()
    assert row is not None, f"Airflow's database has no DAG {DAG}"
    return bool(row[0])


def test_enable_disable_change_both_or_neither(pipeline: PipelineConfig, tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    write(pipeline, project_root=str(tmp_path), pipeline="t", out_dir=str(tmp_path / "dags"))
    env = _env(tmp_path, pipeline)
    cli = ["changeflow", "schedules", "--config", str(pipeline.source_path)]
    # before Airflow's database exists: refused, nothing changed
    before = _run(env, *cli, "disable", "p12", ok=False)
    assert before.returncode == 1 and "does not exist" in before.stderr
    assert "nothing was changed" in before.stderr
    store = schedule_store(pipeline, "p12")
    assert store.get("p12") is None or not store.require("p12").disabled

    _run(env, "airflow", "db", "migrate")
    _run(env, "airflow", "dags", "reserialize")
    details = _run(env, "airflow", "dags", "details", DAG, "-o", "json").stdout
    assert "infinite window (runs of 1 h), latency 1 s" in details
    assert _paused(env)  # paused at creation

    out = _run(env, *cli, "enable", "p12", "--pipeline", "t").stdout
    assert "unpaused" in out and not _paused(env)
    assert not store.require("p12").disabled
    out = _run(env, *cli, "disable", "p12", "--pipeline", "t", "--wait", "5").stdout
    assert f"DAG {DAG} paused" in out and _paused(env)
    assert store.require("p12").disabled and store.require("p12").disabled_reason == "user"

    _enable_of_a_dag_an_operator_unpaused(env, cli)

    # a pipeline name Airflow does not know: refused before the schedule changes
    bad = _run(env, *cli, "enable", "p12", "--pipeline", "nope", ok=False)
    assert bad.returncode == 1 and "does not know the DAG" in bad.stderr
    assert store.require("p12").disabled and _paused(env)

    # the backfill of a disabled schedule would wait unseen behind the pause: refused
    refused = _run(env, *cli, "backfill", "p12", "--pipeline", "t", "--from",
                   "2024-03-01T00:00Z", "--to", "2024-03-01T02:00Z", ok=False)
    assert refused.returncode == 1 and "Enable the schedule, then backfill" in refused.stderr
    code = ("from airflow.models.backfill import Backfill; from airflow.utils.session import "
            "create_session; from sqlalchemy import select, func\n"
            "with create_session() as s: print(s.scalar(select(func.count()).select_from(Backfill)))")
    assert _run(env, sys.executable, "-c", code).stdout.strip().splitlines()[-1] == "0"


def _dag_state(env: dict[str, str], due_in_hours: float | None = None) -> list[dict[str, str]]:
    """The DAG's runs (type, note, logical date); with ``due_in_hours``, its runs are
    removed first and the scheduler's next run made due that far from now (what the DAG
    processor would have set)."""
    code = f"""
import datetime as dt, json
from airflow.models.dag import DagModel
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session
from sqlalchemy import delete, select
with create_session() as s:
    if {due_in_hours!r} is not None:
        s.execute(delete(DagRun).where(DagRun.dag_id == {DAG!r}))
        s.get(DagModel, {DAG!r}).next_dagrun_create_after = (
            dt.datetime.now(dt.UTC) + dt.timedelta(hours={due_in_hours!r}))
    runs = s.scalars(select(DagRun).where(DagRun.dag_id == {DAG!r})).all()
    print(json.dumps([{{"id": r.run_id, "type": str(r.run_type), "note": r.note,
                       "logical": str(r.logical_date)}} for r in runs]))
"""
    return json.loads(_run(env, sys.executable, "-c", code).stdout.strip().splitlines()[-1])


def _enable_of_a_dag_an_operator_unpaused(env: dict[str, str], cli: list[str]) -> None:
    """The schedule is disabled, but an operator unpaused its DAG (in the UI), and the
    window open now has no run yet: the enable leaves the run to the scheduler when it is
    due to make it, and makes one itself (without a logical date) when it is not."""
    _run(env, "airflow", "dags", "unpause", DAG)
    assert not _paused(env)
    _dag_state(env, due_in_hours=-0.01)  # the scheduler makes the window's run at once
    out = _run(env, *cli, "enable", "p12", "--pipeline", "t").stdout
    assert "unpaused" in out and "resumes in run" not in out, out
    assert _dag_state(env) == []
    _run(env, *cli, "disable", "p12", "--pipeline", "t", "--wait", "5")
    _run(env, "airflow", "dags", "unpause", DAG)
    _dag_state(env, due_in_hours=24)  # the scheduler's next run is far off
    out = _run(env, *cli, "enable", "p12", "--pipeline", "t").stdout
    run_id = out.split("the open window resumes in run ", 1)[1].split()[0].rstrip(";,")
    made = _dag_state(env)
    assert [(r["id"], r["note"], r["logical"]) for r in made] == [
        (run_id, "schedule enabled: the open window resumes", "None")], made
    assert made[0]["type"].lower().endswith("manual"), made
    _run(env, *cli, "disable", "p12", "--pipeline", "t", "--wait", "5")
    assert _paused(env)


def test_cli_outside_a_project_refuses_and_creates_no_airflow_home(
        pipeline: PipelineConfig, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home),
           "CHANGEFLOW_CONFIG": str(pipeline.source_path)}
    done = subprocess.run(["changeflow", "schedules", "disable", "p12"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "set AIRFLOW_HOME" in done.stderr and "Traceback" not in done.stderr
    assert not (home / "airflow").exists()
    row = schedule_store(pipeline, "p12").get("p12")
    assert row is None or not row.disabled
