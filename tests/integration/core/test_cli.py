"""The CLI against a real state store: help, queue inspection, errors that name the problem."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from changeflow.cli import main

pytestmark = pytest.mark.spark


def test_help_lists_the_command_groups() -> None:
    out = CliRunner().invoke(main, ["--help"]).output
    for group in ("queues", "run", "demo", "dags", "rules"):
        assert group in out


def test_console_script_is_on_the_path() -> None:
    exe = Path(sys.executable).parent / "changeflow"
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "queues" in r.stdout


def test_queues_show_depth_and_positions(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    from changeflow.capture.snapshot import run_capture

    snapshot("hr.regions", 1, [(1, "Europe"), (2, "Americas")], "region_id int, region_name string")
    run_capture(spark, pipeline, "cap")
    runner = CliRunner()
    res = runner.invoke(main, ["queues", "show", "strmadmin.streams_queue@site1", "--config",
                               pipeline.source_path, "--json"])
    assert res.exit_code == 0, res.output
    (info,) = json.loads(res.output)
    assert info["depth"] == 2 and info["batches"] == 1 and info["oldest_time"]
    assert [(c["consumer"], c["position"], c["pending_messages"]) for c in info["consumers"]] == [
        ("propagation:p12", 0, 2)]
    text = runner.invoke(main, ["queues", "list", "--config", pipeline.source_path]).output
    assert "strmadmin.streams_queue@site1" in text and "strmadmin.streams_queue@site2" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["queues", "show", "hr.nope"], "unknown queue 'hr.nope'"),
        (["run", "apply", "nope"], "no apply named 'nope'"),
        (["run", "teleport", "x"], "Invalid value"),
    ],
)
def test_errors_name_the_problem(pipeline, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    res = CliRunner().invoke(main, [*args, "--config", pipeline.source_path])
    assert res.exit_code != 0
    assert message in res.output


def test_bad_config_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nsites: {s: {staging_root: x}}\n")
    res = CliRunner().invoke(main, ["queues", "list", "--config", str(bad)])
    assert res.exit_code != 0
    assert "bad.yaml:sites.s.target_root" in res.output


def test_job_entry_point_exit_codes(tmp_path: Path, pipeline, capsys) -> None:  # type: ignore[no-untyped-def]
    from changeflow.errors import EXIT_TERMINAL
    from changeflow.runner import main as job_main

    assert job_main("apply", ["--config", str(tmp_path / "absent.yaml"), "--name", "ap"]) == EXIT_TERMINAL
    assert "cannot read configuration" in capsys.readouterr().err
    assert job_main("apply", ["--config", pipeline.source_path, "--name", "nope"]) == EXIT_TERMINAL
    assert "no apply named 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        job_main("apply", ["--name", "ap"])  # --config is required
