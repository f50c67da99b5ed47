"""The rendered MCQ DAG file: current, literal, no I/O at import."""

from __future__ import annotations

from pathlib import Path

from changeflow.airflow.mcq import mcq_spec, render
from changeflow.config import load_config

ROOT = Path(__file__).resolve().parents[3]


def test_the_dag_file_is_current() -> None:
    cfg = load_config(ROOT / "config" / "demo-mcq.yaml")
    text = render(cfg, project_root=str(ROOT))
    assert (ROOT / "dags" / "changeflow_mcq.py").read_text() == text, \
        "run: changeflow mcq render-dags --config config/demo-mcq.yaml"


def test_the_spec_schedules_each_listener_by_its_frequency() -> None:
    cfg = load_config(ROOT / "config" / "demo-mcq.yaml")
    spec = mcq_spec(cfg, "config/demo-mcq.yaml")
    assert spec["listeners"]["FEED"]["schedule"] == 180.0  # 3min, drained per run
    assert spec["listeners"]["Insite"]["schedule"] == "@daily"
    assert "LDAP" not in spec["listeners"]  # no handler: its own program polls
    assert spec["pumps"]["hrdb"]["schedule"] == "@hourly"  # a 10 s pump polls for an hour
    assert spec["pumps"]["hrdb"]["duration"] == 3595.0


def test_a_poller_polls_for_its_window() -> None:
    from changeflow.config import PipelineConfig

    cfg = PipelineConfig.model_validate({
        "sites": {"s": {"staging_root": "/s", "target_root": "/t", "state_url": "sqlite://",
                        "database": "S.EXAMPLE.COM"}},
        "mcq": {"site": "s", "listeners": [{
            "proc_name": "LDAP", "frequency": "5s", "poll_window": "10min",
            "handler": {"type": "python", "callable": "mod:fn"}}]}})
    ldap = mcq_spec(cfg, "x")["listeners"]["LDAP"]
    assert (ldap["runs_as"], ldap["schedule"], ldap["duration"]) == ("poller", 600.0, 595.0)
