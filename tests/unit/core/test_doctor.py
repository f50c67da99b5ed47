"""``changeflow doctor`` on local roots: one line per check, nothing left behind, and the
exit code of what failed (terminal 65, transient 75). The object-store cases are in
tests/integration/storage/test_s3_errors.py."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from changeflow.cli import main
from changeflow.doctor import spark_master_of

PIPELINE = """
version: 1
sites:
  s1: {staging_root: s1/staging, target_root: s1/targets, state_url: "sqlite:///s1.db",
       database: DBS1.EXAMPLE.COM}
  s2: {staging_root: s2/staging, target_root: s2/targets, state_url: "sqlite:///s2.db",
       database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.q, site: s1}
  - {name: strmadmin.q, site: s2}
propagations:
  - {name: p12, source_queue: strmadmin.q@s1, destination_queue: strmadmin.q@s2}
"""


def doctor(config: Path, *args: str) -> tuple[int, list[str]]:
    """The doctor's exit code and lines (the scratch space may be short of room on the
    machine running the tests: its own tests set ``--min-free-gb``)."""
    args = args if "--min-free-gb" in args else (*args, "--min-free-gb", "0")
    out = CliRunner().invoke(main, ["doctor", "--config", str(config), "--backoff", "0",
                                    *args])
    return out.exit_code, out.output.strip().splitlines()


def test_local_roots_pass_and_nothing_is_created_or_left(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(PIPELINE)
    code, lines = doctor(config, "--master", "local[2]")
    assert code == 0, lines
    assert [ln.split()[0] for ln in lines] == ["ok"] * 8
    assert f"site s2 staging root         {tmp_path}/s2/staging" in lines[3]
    assert "no database file yet" in lines[2]
    # no probe object or directory, no SQLite file the first run would find already there
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "p.yaml", "s1", "s1/staging", "s1/targets", "s2", "s2/staging", "s2/targets"]


def test_an_unwritable_root_and_a_master_down_are_named(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(PIPELINE)
    (tmp_path / "s2").mkdir()
    (tmp_path / "s2" / "staging").write_text("a file where the root should be")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, lines = doctor(config, "--master", f"spark://127.0.0.1:{port}", "--retries", "0")
    # transient (75), as the propagation takes an unwritable destination: retried later
    assert code == 75, lines
    assert [ln.split()[0] for ln in lines[:-1]] == ["ok"] * 3 + ["FAILED"] + ["ok"] * 2 + \
        ["FAILED", "ok"]
    assert lines[3].startswith("FAILED site s2 staging root") and \
        f"{tmp_path}/s2/staging" in lines[3]
    assert lines[6].startswith("FAILED spark master") and \
        f"127.0.0.1:{port} does not answer" in lines[6]
    assert lines[-1] == "Error: 2 of 8 checks failed"
    (tmp_path / "s2" / "staging").unlink()
    code, lines = doctor(config, "--master", "local[1]")
    assert code == 0, lines


@pytest.mark.parametrize(("conn", "master"), [
    ('{"conn_type": "spark", "host": "spark://m:7077"}', "spark://m:7077"),
    ('{"conn_type": "spark", "host": "spark://m", "port": 7078}', "spark://m:7078"),
    ('{"conn_type": "spark", "host": "yarn"}', "yarn"),
])
def test_the_master_is_the_spark_default_connection(monkeypatch: pytest.MonkeyPatch,
                                                    conn: str, master: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", conn)
    assert spark_master_of() == master
    assert spark_master_of("local[1]") == "local[1]"


def test_the_scratch_space_counts_left_spark_folders_and_fails_short_of_room(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scratch space is ``SPARK_LOCAL_DIRS`` (else /tmp): its free space and the
    folders killed Spark JVMs left there, counted from the disk; too little room fails
    (terminal, 65), and a folder that is not there is named."""
    config = tmp_path / "p.yaml"
    config.write_text(PIPELINE)
    scratch = tmp_path / "scratch"
    (scratch / "spark-1f2e" / "userFiles-9a").mkdir(parents=True)
    (scratch / "spark-1f2e" / "userFiles-9a" / "bundle.jar").write_bytes(b"j" * 3 * 2**20)
    (scratch / "blockmgr-77c0" / "0c").mkdir(parents=True)
    (scratch / "blockmgr-77c0" / "0c" / "shuffle_0_0_0.data").write_bytes(b"s" * 2**19)
    (scratch / "sparkle.txt").write_text("not a Spark folder")
    (scratch / "kept").mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(scratch))
    code, lines = doctor(config, "--master", "local[1]")
    assert code == 0, lines
    line = lines[-1]
    assert line.startswith(f"ok     scratch space                {scratch}  "), line
    assert "; 2 Spark folders hold 3.5 MiB (a JVM that did not end cleanly" in line, line

    free_gb = shutil.disk_usage(scratch).free / 2**30
    code, lines = doctor(config, "--master", "local[1]", "--min-free-gb", f"{free_gb + 1024:.0f}")
    assert code == 65, lines
    assert lines[-2].startswith(f"FAILED scratch space                {scratch}  ")
    assert f"less than {free_gb + 1024:.0f} GiB free" in lines[-2]
    assert lines[-1] == "Error: 1 of 8 checks failed"

    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{scratch},{tmp_path}/gone")
    code, lines = doctor(config, "--master", "local[1]")
    assert code == 65, lines
    assert lines[-3].startswith("ok     scratch space")
    assert lines[-2].startswith(f"FAILED scratch space                {tmp_path}/gone  "
                                f"{tmp_path}/gone is not a folder")
