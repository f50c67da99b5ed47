"""``changeflow run``: the demo pipeline, one component at a time, with readable output.

The figures each run prints are checked against what the queues and targets hold
afterwards; a fresh process shows no Spark progress bars or warnings unless
``--verbose`` is given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from changeflow.cli import main

pytestmark = pytest.mark.spark
C = ["--config", "config/demo.yaml"]


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["run", *args, *C])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.stdout, r.stderr


def depth(queue: str) -> int:
    from changeflow.config import load_config
    from changeflow.sites import queue_site

    rt, name = queue_site(load_config("config/demo.yaml"), queue)
    return rt.catalog.info(name).depth


@pytest.fixture
def source(project: Path) -> Path:
    from changeflow.demo.hr import generate

    root = project / "work" / "demo" / "source"
    generate(str(root), rounds=1, employees=20, changes=9)
    return root


def test_each_component_prints_what_it_did(spark, source: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run("capture", "capture_hr", "-o", "json", "--verbose")
    assert code == 0, out
    captured = json.loads(out)  # --verbose: the logs go to stderr, stdout stays JSON
    site1 = depth("strmadmin.streams_queue@site1")
    assert captured["result"]["messages"] == site1 > 0
    assert captured["result"]["snapshots"] == [1, 2] and captured["ok"] is True
    assert "INFO changeflow.capture.snapshot: capture capture_hr: snapshot 1" in err

    code, out, err = run("propagation", "dbs1_to_dbs2")
    assert code == 0, out
    site2 = depth("strmadmin.streams_queue@site2")
    assert out.startswith(f"propagation dbs1_to_dbs2: {site2:,} messages (")
    assert "from strmadmin.streams_queue@site1 to strmadmin.streams_queue@site2 as batch" in out
    assert "CaptureResult" not in out and "PropagationResult" not in out
    assert "INFO" not in err  # the run's events only with --verbose

    code, out, _ = run("apply", "apply_dbs2")
    assert code == 0, out
    head, _, table = out.partition("\n\n")
    assert head.startswith(f"apply apply_dbs2: {site2:,} messages from 1 batch applied to")
    rows = [line.split() for line in table.splitlines()]
    assert rows[0] == ["TABLE", "CHANGES"]
    assert sum(int(n.replace(",", "")) for _, n in rows[1:]) == site2

    code, out, _ = run("capture", "capture_hr")
    assert code == 0 and out.startswith("capture capture_hr: no new snapshot to capture")


@pytest.mark.slow
def test_a_fresh_process_is_quiet_and_a_failed_verification_exits_1(source: Path,
                                                                     project: Path) -> None:
    """What users run: Spark's start-up banner and warnings stay out of a quiet run."""
    exe = str(Path(sys.executable).parent / "changeflow")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGEFLOW_CONFIG")}
    r = subprocess.run([exe, "run", "verify", "apply_dbs2", *C], cwd=project, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr  # nothing applied yet
    assert r.stdout.startswith("verify apply_dbs2: FAILED, "), r.stdout
    assert "DIFFERS" in r.stdout and "verification: FAILED" not in r.stdout
    assert r.stderr == "", r.stderr
