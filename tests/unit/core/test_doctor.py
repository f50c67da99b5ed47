"""``changeflow doctor`` on local roots: one line per check, nothing left behind, and the
exit code of what failed (terminal 65, transient 75). The object-store cases are in
tests/integration/storage/test_s3_errors.py."""

from __future__ import annotations

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
    out = CliRunner().invoke(main, ["doctor", "--config", str(config), "--backoff", "0",
                                    *args])
    return out.exit_code, out.output.strip().splitlines()


def test_local_roots_pass_and_nothing_is_created_or_left(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(PIPELINE)
    code, lines = doctor(config, "--master", "local[2]")
    assert code == 0, lines
    assert [ln.split()[0] for ln in lines] == ["ok"] * 7
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
        ["FAILED"]
    assert lines[3].startswith("FAILED site s2 staging root") and \
        f"{tmp_path}/s2/staging" in lines[3]
    assert lines[6].startswith("FAILED spark master") and \
        f"127.0.0.1:{port} does not answer" in lines[6]
    assert lines[-1] == "Error: 2 of 7 checks failed"
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
