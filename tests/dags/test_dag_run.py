"""A real Airflow DAG run: `airflow dags test` of a small pipeline, every task a spark-submit."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.airflow, pytest.mark.slow]

PIPELINE = """
version: 1
sites:
  site1: {staging_root: work/s1/staging, target_root: work/s1/targets, state_url: "sqlite:///work/s1/state.db", database: DBS1.EXAMPLE.COM}
  site2: {staging_root: work/s2/staging, target_root: work/s2/targets, state_url: "sqlite:///work/s2/state.db", database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.streams_queue, site: site1}
  - {name: strmadmin.streams_queue, site: site2}
captures:
  - name: cap
    queue: strmadmin.streams_queue@site1
    source: {type: snapshot, database: DBS1.EXAMPLE.COM, root: work/source, tables: [{name: hr.regions, key: [region_id]}, {name: hr.jobs, key: [job_id]}]}
propagations:
  - {name: p12, source_queue: strmadmin.streams_queue@site1, destination_queue: strmadmin.streams_queue@site2}
applies:
  - {name: ap, queue: strmadmin.streams_queue@site2, buckets: 2}
"""


def json_list(text: str) -> list[dict[str, object]]:
    """The JSON list an ``airflow … -o json`` command printed among its log lines."""
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch == "[":
            try:
                value, _ = decoder.raw_decode(text[i:])
            except json.JSONDecodeError:
                continue
            if isinstance(value, list) and all(isinstance(v, dict) for v in value):
                return value
    raise AssertionError(f"no JSON list in: {text[-2000:]}")


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def _project(tmp_path: Path) -> Path:
    """A project folder: ``dags/``, ``config/`` and the repository's ``jobs/``."""
    project = tmp_path / "project"
    (project / "dags").mkdir(parents=True)
    (project / "config").mkdir()
    (project / "jobs").symlink_to(ROOT / "jobs")
    return project


def _airflow(tmp_path: Path, project: Path) -> tuple[dict[str, str], str, str]:
    """The environment of an Airflow home under ``tmp_path`` reading the project's DAGs,
    and the ``changeflow`` and ``airflow`` commands."""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
           "AIRFLOW__CORE__DAGS_FOLDER": str(project / "dags"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/airflow/airflow.db",
           "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(tmp_path / "airflow" / "logs")}
    bin_dir = Path(sys.executable).parent
    return env, str(bin_dir / "changeflow"), str(bin_dir / "airflow")


def test_pipeline_dag_runs_end_to_end(tmp_path: Path) -> None:
    from changeflow.demo.hr import generate

    project = _project(tmp_path)
    (project / "config" / "p.yaml").write_text(PIPELINE.replace("work/", "../work/"))
    generate(str(project / "work" / "source"), rounds=2, employees=20, changes=9)
    env, changeflow, airflow = _airflow(tmp_path, project)
    r = run([changeflow, "dags", "render", "--config", "config/p.yaml", "--pipeline", "t",
             "--verify", "ap"], env, project)
    assert r.returncode == 0, r.stderr
    assert run([airflow, "db", "migrate"], env, project).returncode == 0
    r = run([airflow, "dags", "test", "changeflow_t__pipeline"], env, project)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "verification: PASSED" in out, out[-4000:]
    # what Airflow recorded: one run, succeeded, every task succeeded
    listed = run([airflow, "dags", "list-runs", "changeflow_t__pipeline", "-o", "json"], env,
                 project)
    runs = json_list(listed.stdout)
    assert [x["state"] for x in runs] == ["success"], runs
    states = run([airflow, "tasks", "states-for-dag-run", "changeflow_t__pipeline",
                  runs[0]["run_id"], "-o", "json"], env, project)
    tis = json_list(states.stdout)
    assert {t["task_id"]: t["state"] for t in tis} == {
        "capture__cap": "success", "propagation__p12": "success", "apply__ap": "success",
        "verify__ap": "success"}
    _readable_by_others(project)


def _source_rows(project: Path, table: str) -> list[list[str]]:
    """The source's final state of a table (its newest snapshot), as strings."""
    import pyarrow.parquet as pq

    snaps = sorted((project / "work" / "source" / table).glob("snap=*"),
                   key=lambda p: int(p.name.split("=")[1]))
    rows = pq.read_table(snaps[-1]).to_pylist()
    return sorted([[_text(v) for v in r.values()] for r in rows])


def _text(v: object) -> str:
    """A value as text, decimals without trailing zeros (source and target scales differ)."""
    import decimal

    return format(v.normalize(), "f") if isinstance(v, decimal.Decimal) else str(v)


def _readable_by_others(project: Path, *, spark: bool = True) -> None:
    """Every target read without changeflow, by PyIceberg and (``spark``) by plain Spark
    with Iceberg's runtime, equals the source's final state."""
    from pyiceberg.catalog.sql import SqlCatalog

    db = project / "work" / "s2" / "state.db"
    tables = ["hr.regions", "hr.jobs"]
    catalog = SqlCatalog("cf_site2", uri=f"sqlite:///{db}")
    by_pyiceberg = {}
    for t in tables:
        arrow = catalog.load_table(t).scan().to_arrow()
        arrow = arrow.drop_columns(["_cf_src", "_cf_scn", "_cf_pos", "_cf_tag"])
        by_pyiceberg[t] = sorted([[_text(v) for v in r.values()] for r in arrow.to_pylist()])
    for t in tables:
        expected = _source_rows(project, t)
        assert expected and by_pyiceberg[t] == expected, t
    if not spark:
        return
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("read_iceberg.py")),
                        str(ROOT / "jars" / "spark"), str(db),
                        str(project / "work" / "s2" / "targets"), "cf_site2", *tables],
                       capture_output=True, text=True, timeout=300)
    line = next((x for x in r.stdout.splitlines() if x.startswith("ROWS ")), None)
    assert line is not None, r.stderr[-3000:]
    by_spark = json.loads(line[5:])
    for t in tables:
        assert by_spark[t] == by_pyiceberg[t], t


def test_an_apply_dag_keeps_its_job_running_for_its_period(tmp_path: Path, spark) -> None:  # type: ignore[no-untyped-def]
    """``keep_running``: the apply's own DAG runs on its period, and its task is one job
    that applies every ``every`` seconds in one Spark session until the period's end:
    its first run applies what arrived before it started, the others find nothing new,
    and the task ends green."""
    from changeflow.airflow.dags import build_dags
    from changeflow.airflow.render import pipeline_spec
    from changeflow.capture.snapshot import run_capture
    from changeflow.config import load_config
    from changeflow.demo.hr import generate
    from changeflow.propagation import propagate_once

    project = _project(tmp_path)
    text = PIPELINE.replace("work/", "../work/").replace(
        "{name: ap, queue", "{name: ap, keep_running: {every: 2, minutes: 0.75}, queue")
    (project / "config" / "p.yaml").write_text(text)
    generate(str(project / "work" / "source"), rounds=2, employees=20, changes=9)
    cfg = load_config(project / "config" / "p.yaml")
    dags = build_dags(pipeline_spec(cfg, pipeline="t", config_rel="config/p.yaml"), project)
    kept = dags["changeflow_t__apply__ap"]
    assert kept.timetable.delta == dt.timedelta(seconds=45)  # every 0.75 minutes
    assert kept.get_task("apply").application_args[-4:] == ["--every", "2", "--for", "40.5"]
    assert dags["changeflow_t__pipeline"].get_task("apply__ap").application_args[-1] == "ap"
    env, changeflow, airflow = _airflow(tmp_path, project)
    r = run([changeflow, "dags", "render", "--config", "config/p.yaml", "--pipeline", "t"],
            env, project)
    assert r.returncode == 0, r.stderr
    assert run([airflow, "db", "migrate"], env, project).returncode == 0
    # the changes reach the apply's queue in this process (the pipeline test above runs
    # the capture and propagation tasks); the apply runs as its DAG's task
    run_capture(spark, cfg, "cap")
    assert propagate_once(spark, cfg, "p12").messages_propagated > 0
    r = run([airflow, "dags", "test", "changeflow_t__apply__ap"], env, project)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    decoder = json.JSONDecoder()
    ends = [decoder.raw_decode(x[x.index('{"kind"'):])[0] for x in out.splitlines()
            if '"stopped"' in x and '{"kind"' in x]
    assert ends and ends[-1]["stopped"] == "--for elapsed" and ends[-1]["exit"] == 0, out[-4000:]
    assert ends[-1]["runs"] >= 2, ends  # one job, more than one run (the first is cold)
    _readable_by_others(project, spark=False)  # the targets equal the source's final state
