"""Real Airflow runs (`airflow dags test`): a listener DAG drains its queue through the
generic XML listener, and the monitor DAG's alert reaches a local webhook."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.config import load_config
from changeflow.mcq import views
from changeflow.mcq.store import open_mcq, section

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

CONFIG = """
version: 1
sites:
  s1: {staging_root: st, target_root: tg, state_url: "sqlite:///../work/mcq.db",
       database: S1.EXAMPLE.COM}
alerts: {webhook_url: "HOOK"}
mcq:
  site: s1
  tables: [{tname: LOGINS, pkey_string: logins.username}]
  listeners:
    - {proc_name: FEED, frequency: 3min, handler: {type: xml, directory: ../work/feed}}
    - {proc_name: LDAP, frequency: 5s, alert_after: 1}
  interests: [{proc_name: FEED, tname: LOGINS}, {proc_name: LDAP, tname: LOGINS}]
  monitor: {check_every: 1min}
"""


class Hook(http.server.BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802
        type(self).received.append(json.loads(self.rfile.read(
            int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[str]:
    Hook.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_listener_and_monitor_dags(tmp_path: Path, hook: str) -> None:
    project = tmp_path / "project"
    (project / "dags").mkdir(parents=True)
    (project / "config").mkdir()
    path = project / "config" / "mcq.yaml"
    path.write_text(CONFIG.replace("HOOK", hook))
    cfg = load_config(path)
    mcq = open_mcq(cfg)
    mcq.sync(section(cfg))
    for user in ("finkej", "mondore", "powell"):
        mcq.log_update("LOGINS", pkey_string=user)
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
           "AIRFLOW__CORE__DAGS_FOLDER": str(project / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/airflow/airflow.db",
           "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(tmp_path / "airflow" / "logs")}
    bin_dir = Path(sys.executable).parent
    r = run([str(bin_dir / "changeflow"), "mcq", "render-dags", "--config", str(path),
             "--out", str(project / "dags" / "changeflow_mcq.py")], env, project)
    assert r.returncode == 0, r.stderr
    airflow = str(bin_dir / "airflow")
    assert run([airflow, "db", "migrate"], env, project).returncode == 0
    r = run([airflow, "dags", "test", "changeflow_mcq__listener__FEED"], env, project)
    out = r.stdout + r.stderr
    assert "state=success" in out, out[-4000:]
    docs = sorted((project / "work" / "feed").glob("*.xml"))
    assert len(docs) == 3
    rows = {x["listener"]: x for x in views.listener_rows(mcq.store)}
    assert (rows["FEED"]["pending"], rows["FEED"]["processed"]) == (0, 3)
    assert rows["FEED"]["last_mark"] is not None  # the run marked it alive
    assert rows["LDAP"]["pending"] == 3  # nobody ran LDAP
    time.sleep(1.2)  # LDAP has never marked and its limit is 1 s
    r = run([airflow, "dags", "test", "changeflow_mcq__monitor"], env, project)
    out = r.stdout + r.stderr
    assert "state=success" in out, out[-4000:]
    assert [(a["proc"], a["event"]) for a in Hook.received] == [("LDAP", "process_silent")]
