"""``changeflow mcq`` in-process: registry, log, get/ack by worker, status, flush, refresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from changeflow.cli import main

CONFIG = """
version: 1
sites:
  s1: {staging_root: st, target_root: tg, state_url: "sqlite:///s1.db", database: S1.EXAMPLE.COM}
mcq:
  site: s1
  tables:
    - {tname: LOGINS, pkey_string: logins.username}
    - {tname: PERSON, subtype: Telephone}
  listeners:
    - {proc_name: ADSI, frequency: 5s}
    - {proc_name: FEED, frequency: 3min, handler: {type: xml, directory: feed}}
  interests:
    - {proc_name: ADSI, tname: LOGINS}
    - {proc_name: FEED, tname: LOGINS}
"""


@pytest.fixture
def cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "p.yaml").write_text(CONFIG)
    runner = CliRunner()

    def run(*args: str, ok: bool = True, stdin: str | None = None) -> Result:
        r = runner.invoke(main, ["mcq", *args, "--config", str(tmp_path / "p.yaml")],
                          input=stdin)
        assert (r.exit_code == 0) == ok, r.output
        return r

    run("sync")
    return run


def status(cli) -> dict:  # type: ignore[no-untyped-def]
    data = json.loads(cli("status", "--json").output)
    return {r["listener"]: r for r in data["listeners"]}


def test_log_get_ack_through_the_cli(cli) -> None:  # type: ignore[no-untyped-def]
    assert "2 entries queued" in cli("log", "update", "LOGINS", "--pkey-string", "finkej").output
    rec = json.loads(cli("get", "ADSI", "--worker", "shell-1").output)
    assert (rec["change_type"], rec["pkey_string"], rec["claimed_by"]) == ("C", "finkej",
                                                                          "shell-1")
    assert status(cli)["ADSI"]["in_flight"] == 1
    r = cli("ack", "ADSI", str(rec["entry_number"]), "--worker", "shell-2", ok=False)
    assert "held by shell-1" in r.output
    cli("ack", "ADSI", str(rec["entry_number"]), "--worker", "shell-1")
    assert (status(cli)["ADSI"]["pending"], status(cli)["ADSI"]["processed"]) == (0, 1)
    r = cli("ack", "ADSI", str(rec["entry_number"]), "--worker", "shell-1", ok=False)
    assert "already processed" in r.output
    end = json.loads(cli("get", "ADSI").output)
    assert end["change_type"] is None


def test_put_back_into_the_past_is_refused(cli) -> None:  # type: ignore[no-untyped-def]
    cli("log", "insert", "LOGINS", "--pkey-string", "a")
    rec = json.loads(cli("get", "ADSI", "--worker", "w").output)
    r = cli("put-back", "ADSI", str(rec["entry_number"]), "--worker", "w",
            "--hold-until", "2001-01-01T00:00:00Z", ok=False)
    assert "in the past" in r.output
    cli("put-back", "ADSI", str(rec["entry_number"]), "--worker", "w", "--delay", "60")
    pending = json.loads(cli("pending", "ADSI", "--json").output)
    assert pending[0]["retry_count"] == 1


def test_unknown_table_or_listener(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("log", "update", "PERSON", "--subtype", "Nope", "--person-id", "1", ok=False)
    assert "unknown table 'PERSON/Nope'" in r.output and "nothing was logged" in r.output
    r = cli("get", "LDAP", ok=False)
    assert "unknown listener 'LDAP'" in r.output
    assert status(cli)["ADSI"]["pending"] == 0


def test_registry_commands(cli) -> None:  # type: ignore[no-untyped-def]
    cli("table", "add", "BUILDINGS", "--pkey-string", "buildings.code", "--comments", "Insite")
    cli("listener", "add", "Insite", "--frequency", "daily", "--owner", "ops")
    cli("interest", "add", "Insite", "BUILDINGS")
    rows = json.loads(cli("interest", "list", "Insite", "--json").output)
    assert [(r["proc_name"], r["tname"]) for r in rows] == [("Insite", "BUILDINGS")]
    r = cli("table", "drop", "BUILDINGS", ok=False)
    assert "still of interest to Insite" in r.output
    cli("log", "update", "BUILDINGS", "--pkey-string", "VCC")
    r = cli("listener", "drop", "Insite", ok=False)
    assert "1 pending entries" in r.output
    cli("listener", "drop", "Insite", "--force")
    cli("table", "drop", "BUILDINGS")
    tables = json.loads(cli("table", "list", "--json").output)
    assert "BUILDINGS" not in {t["tname"] for t in tables}


def test_flush_asks_for_the_name(cli) -> None:  # type: ignore[no-untyped-def]
    for k in "abc":
        cli("log", "update", "LOGINS", "--pkey-string", k)
    r = cli("flush", "ADSI", stdin="FEED\n", ok=False)
    assert "nothing was removed" in r.output
    assert status(cli)["ADSI"]["pending"] == 3
    assert "flushed 3" in cli("flush", "ADSI", stdin="ADSI\n").output
    assert (status(cli)["ADSI"]["pending"], status(cli)["FEED"]["pending"]) == (0, 3)


def test_refresh_and_listen(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "keys.csv").write_text("pkey_string\nu1\nu2\n")
    out = json.loads(cli("refresh", "FEED", "LOGINS", "--file", str(tmp_path / "keys.csv"),
                         "--json").output)
    assert (out["queued"], out["already_pending"]) == (2, 0)
    res = json.loads(cli("listen", "FEED", "--once", "--json").output)
    assert (res["processed"], res["ended"]) == (2, "empty")
    assert len(list((tmp_path / "feed").glob("*.xml"))) == 2
    mon = json.loads(cli("monitor", "--json").output)
    assert {m["proc"] for m in mon} >= {"FEED"}


def test_status_table_output(cli) -> None:  # type: ignore[no-untyped-def]
    cli("log", "update", "LOGINS", "--pkey-string", "a", "--bulk")
    out = cli("status").output
    assert out.splitlines()[0].split()[:4] == ["LISTENER", "PENDING", "BULK", "HELD"]
    assert any(line.startswith("ADSI") and line.split()[1:3] == ["1", "1"]
               for line in out.splitlines())
    assert "TABLE" in out and "LOGINS" in out
