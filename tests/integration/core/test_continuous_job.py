"""A job that keeps running (``--every``): one process, one Spark session, a run every
period, each finding what arrived since; SIGTERM ends it after the run it is in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from changeflow.apply.engine import targets_of
from changeflow.capture.snapshot import run_capture
from changeflow.propagation import propagate_once
from changeflow.runner import main as job_main
from changeflow.targets.read import read_table

pytestmark = pytest.mark.spark
REGIONS = "region_id int, region_name string, zone int"
ROOT = Path(__file__).resolve().parents[3]


def _until(check, what: str, proc: subprocess.Popen, timeout: float = 120.0):  # type: ignore[no-untyped-def,type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc.poll() is not None:
            pytest.fail(f"the job ended before {what}: {proc.communicate()}")
        time.sleep(0.5)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}: {proc.communicate()}")


def test_an_apply_job_every_period_applies_what_arrives_until_sigterm(
        spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    cfg = pipeline
    cat = targets_of(cfg, cfg.applies[0])

    def arrive(n: int, rows: list[tuple]) -> None:
        snapshot("hr.regions", n, rows, REGIONS)
        run_capture(spark, cfg, "cap", None)
        propagate_once(spark, cfg, "p12")

    def regions() -> list[tuple]:
        if "hr.regions" not in cat.names(spark):
            return []
        return sorted(tuple(r) for r in read_table(spark, cat, "hr.regions").collect())

    arrive(1, [(1, "Europe", 1), (2, "Americas", 1)])
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "jobs" / "apply.py"), "--config", cfg.source_path,
         "--name", "ap", "--every", "1", "--for", "600"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "CHANGEFLOW_SPARK_MASTER": "local[1]"})
    try:
        first = [(1, "Europe", 1), (2, "Americas", 1)]
        _until(lambda: regions() == first, "the first batch applied", proc)
        arrive(2, [(1, "Europe", 1), (2, "Americas", 2), (3, "Asia", 1)])
        second = [(1, "Europe", 1), (2, "Americas", 2), (3, "Asia", 1)]
        _until(lambda: regions() == second, "the second batch applied", proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    runs, last = lines[:-1], lines[-1]
    # every run of the one process, numbered; both batches, each applied by one run
    assert [r["run"] for r in runs] == list(range(1, len(runs) + 1))
    assert sum(r["result"]["transactions"] for r in runs) == 2
    assert sum(1 for r in runs if r["result"]["transactions"]) == 2
    assert last == {"kind": "apply", "name": "ap", "runs": len(runs), "stopped": "SIGTERM",
                    "exit": 0}


@pytest.mark.parametrize(("args", "message"), [
    (["--for", "60"], "--for needs --every"),
    (["--every", "0"], "'0' is not a positive number of seconds"),
    (["--every", "soon"], "'soon' is not a positive number of seconds"),
    (["--every", "5", "--for", "-1"], "'-1' is not a positive number of seconds"),
])
def test_bad_repeat_arguments_are_named(pipeline, capsys, args: list[str],
                                        message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        job_main("apply", ["--config", pipeline.source_path, "--name", "ap", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_verify_does_not_repeat(pipeline, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit):
        job_main("verify", ["--config", pipeline.source_path, "--name", "ap", "--every", "5"])
    assert "verify runs once" in capsys.readouterr().err


def test_a_transient_failure_is_tried_again_at_the_next_period(
        spark, pipeline, snapshot, capsys) -> None:  # type: ignore[no-untyped-def]
    """Another process holds the apply's lease (transient): the runs fail and are tried
    again each period; once it lets go, a run applies the batch, and the job exits 0."""
    import threading

    from changeflow.pipeline import resolve
    from changeflow.runner import Stop, repeat
    from changeflow.sites import queue_site
    from changeflow.state.leases import Lease

    cfg = pipeline
    snapshot("hr.regions", 1, [(1, "Europe", 1)], REGIONS)
    run_capture(spark, cfg, "cap", None)
    propagate_once(spark, cfg, "p12")
    rt, _ = queue_site(cfg, cfg.applies[0].queue)
    other = Lease(rt.store, "apply:ap", owner="elsewhere:1:airflow:x").acquire()
    threading.Timer(2.0, other.release).start()
    code = repeat(spark, resolve(cfg), "apply", "ap", every=0.5, duration=4.0, stop=Stop())
    out, err = capsys.readouterr()
    assert code == 0
    assert "transient, retry later" in err and "already running in elsewhere" in err
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    applied = [r for r in lines[:-1] if r["result"]["transactions"]]
    assert len(applied) == 1 and applied[0]["run"] > 1  # after the failed runs
    assert lines[-1]["stopped"] == "--for elapsed" and lines[-1]["exit"] == 0
    cat = targets_of(cfg, cfg.applies[0])
    assert [tuple(r) for r in read_table(spark, cat, "hr.regions").collect()] == [
        (1, "Europe", 1)]
