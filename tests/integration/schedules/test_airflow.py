"""Enable/disable through the real Airflow (embedded DB in a temp AIRFLOW_HOME), the
auto-disable pause, the timetable's runs and a backfill of a date range."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from changeflow.airflow.render import write
from changeflow.config import PipelineConfig
from changeflow.schedules.window import ensure_schedule

pytestmark = [pytest.mark.airflow, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
DAG = "changeflow_t__propagation__p12"


def _env(tmp: Path, cfg: PipelineConfig) -> dict[str, str]:
    env = dict(os.environ, AIRFLOW_HOME=str(tmp / "af"),
               AIRFLOW__CORE__DAGS_FOLDER=str(tmp / "dags"),
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp}/af/airflow.db",
               AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(tmp / "af/logs"),
               CHANGEFLOW_CONFIG=str(cfg.source_path), CHANGEFLOW_PIPELINE="t")
    return env


def _run(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(ROOT / "scripts/env.sh"), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _paused(env: dict[str, str]) -> str:
    code = ("from changeflow.schedules.airflow_ops import is_paused; "
            f"print(is_paused({DAG!r}))")
    return _run(env, sys.executable, "-c", code).strip().splitlines()[-1]


def test_enable_disable_autodisable_and_backfill(pipeline: PipelineConfig, tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    cfg = pipeline.model_copy()
    write(cfg, project_root=str(tmp_path), pipeline="t", out_dir=str(tmp_path / "dags"))
    env = _env(tmp_path, cfg)
    _run(env, "airflow", "db", "migrate")
    _run(env, "airflow", "dags", "reserialize")
    details = _run(env, "airflow", "dags", "details", DAG, "-o", "plain")
    assert "infinite window (runs of 1 h), latency 1 s" in details
    assert _paused(env) == "True"  # paused at creation

    cli = ["changeflow", "schedules", "--config", str(cfg.source_path)]
    out = _run(env, *cli, "enable", "p12", "--pipeline", "t")
    assert '"disabled": false' in out and _paused(env) == "False"
    out = _run(env, *cli, "disable", "p12", "--pipeline", "t")
    assert '"disabled": true' in out and _paused(env) == "True"
    _run(env, *cli, "enable", "p12", "--pipeline", "t")

    # the auto-disable: the store says disabled after 16 failures -> the sync task pauses
    store = ensure_schedule(cfg, "p12", dt.datetime.now(dt.UTC))
    store.set_disabled("p12", True, "failures")
    code = ("from changeflow.schedules.airflow_ops import sync_pause; "
            f"print(sync_pause({str(cfg.source_path)!r}, 'p12', {DAG!r}))")
    assert "DAG changeflow_t__propagation__p12 paused" in _run(env, sys.executable, "-c", code)
    assert _paused(env) == "True"

    # a backfill of three hours makes one run per (segment of the) window
    out = _run(env, "airflow", "backfill", "create", "--dag-id", DAG, "--from-date",
               "2024-03-01T00:00:00+00:00", "--to-date", "2024-03-01T02:30:00+00:00",
               "--dry-run")
    assert out.count("2024-03-01") >= 3, out
    listed = _run(env, *cli, "--json")
    assert '"propagation": "p12"' in listed and '"disabled_reason": "failures"' in listed
