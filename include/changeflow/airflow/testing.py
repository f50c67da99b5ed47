"""A real Airflow for tests: scheduler, DAG processor and API server on a temporary home.

Used by the scheduler-driven and browser tests (``tests/integration/airflow``,
``tests/browser``): the three components run as separate processes on an embedded
SQLite database, with LocalExecutor, the project's plugin, a known admin password
(simple auth manager) and short parsing intervals. Every process runs in its own
session and is stopped with its children (spark-submit, window jobs) at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "changeflow-test"


def free_port() -> int:
    """A free local TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def json_in(text: str) -> Any:
    """The first JSON list or object a command printed among its log lines."""
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "[{":
            try:
                return decoder.raw_decode(text[i:])[0]
            except json.JSONDecodeError:
                continue
    raise ValueError(f"no JSON in: {text[-2000:]}")


@dataclass
class AirflowServer:
    """Airflow's components on ``home``, reading DAGs from ``dags``.

    Args:
        home: the AIRFLOW_HOME (created).
        dags: the DAGs folder.
        env: extra environment (CHANGEFLOW_PIPELINES, connections ...).
    """

    home: Path
    dags: Path
    env: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=lambda: {"admin": "admin"})
    port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environ(self) -> dict[str, str]:
        """The environment every component (and the CLI in the tests) runs with."""
        bin_dir = str(Path(sys.executable).parent)
        env = dict(os.environ)
        env.update({
            "PATH": f"{bin_dir}:{env.get('PATH', '')}",
            "CHANGEFLOW_HOME": str(ROOT),
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                f"{u}:{r}" for u, r in self.users.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home}/airflow.db",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "GX_ANALYTICS_ENABLED": "False",
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "CHANGEFLOW_DRIVER_MEMORY": "1g",
        })
        env.update(self.env)
        return env

    def run(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        """Run a command (``airflow …``, ``changeflow …``) in this Airflow's environment."""
        done = subprocess.run(list(args), env=self.environ(), cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done.stdout + done.stderr

    def start(self, timeout: float = 300) -> AirflowServer:
        """Migrate the database and start the components; wait for the API server."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({u: PASSWORD for u in self.users}))
        self.run("airflow", "db", "migrate")
        logs = self.home / "component-logs"
        logs.mkdir(exist_ok=True)
        for name in ("api-server", "scheduler", "dag-processor"):
            out = open(logs / f"{name}.log", "wb")  # noqa: SIM115 (kept open for the process)
            self.procs.append(subprocess.Popen(["airflow", name], env=self.environ(), cwd=ROOT,
                                               stdout=out, stderr=subprocess.STDOUT,
                                               start_new_session=True))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                self.login()
                return self
            except (OSError, urllib.error.URLError):
                time.sleep(1)
        raise TimeoutError(f"Airflow API server not up after {timeout} s:\n{self.logs()}")

    def _check_alive(self) -> None:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"Airflow component {p.args!r} exited {p.returncode}:\n"
                                   f"{self.logs()}")

    def logs(self, tail: int = 4000) -> str:
        """The tails of the components' logs."""
        out = []
        for f in sorted((self.home / "component-logs").glob("*.log")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-tail:]}")
        return "\n".join(out)

    def login(self, user: str = "admin") -> str:
        """A JWT for the REST API (``POST /auth/token``); the admin's is kept as default."""
        body = json.dumps({"username": user, "password": PASSWORD}).encode()
        req = urllib.request.Request(f"{self.url}/auth/token", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            token = str(json.loads(resp.read())["access_token"])
        if user == "admin":
            self.token = token
        return token

    def api(self, method: str, path: str, body: Any = None, *, token: str | None = None,
            expect: int | None = None) -> Any:
        """Call the REST API (or the plugin's app); returns the JSON answer.

        Raises:
            AssertionError: the status is not ``expect`` (or not 2xx when None).
        """
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        tok = token if token is not None else self.token
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        ok = status == expect if expect is not None else 200 <= status < 300
        if not ok:
            raise AssertionError(f"{method} {path} answered {status}: {text[:2000]}")
        return json.loads(text) if text.strip().startswith(("{", "[")) else text

    def wait_for_dag(self, dag_id: str, timeout: float = 300) -> None:
        """Wait until the DAG processor has parsed a DAG."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.api("GET", f"/api/v2/dags/{dag_id}")
                return
            except AssertionError:
                self._check_alive()
                time.sleep(2)
        raise TimeoutError(f"DAG {dag_id} not parsed after {timeout} s:\n{self.logs()}")

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of a DAG."""
        return list(self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"])

    def wait_for_run(self, dag_id: str, pred: Any, timeout: float = 600) -> dict[str, Any]:
        """Wait for a finished run matching ``pred(run)``; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in self.runs(dag_id):
                if r["state"] in ("success", "failed") and pred(r):
                    return r
            self._check_alive()
            time.sleep(2)
        raise TimeoutError(f"no finished run of {dag_id} after {timeout} s: "
                           f"{self.runs(dag_id)}\n{self.logs()}")

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        """The task states of a run."""
        tis = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {t["task_id"]: t["state"] for t in tis["task_instances"]}

    def stop(self) -> None:
        """Stop every component and its children (SIGTERM, then SIGKILL)."""
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


class MailReceiver:
    """A real SMTP server on a free local port (EHLO, MAIL, RCPT, DATA, QUIT only).

    Received messages are in :attr:`messages` (``email.message.Message``).
    """

    def __init__(self) -> None:
        import email
        import socketserver
        import threading

        messages: list[Any] = []
        self.messages = messages

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self._send("220 test ESMTP")
                while line := self.rfile.readline():
                    verb = line.decode(errors="replace").strip().split(" ", 1)[0].upper()
                    if verb in ("EHLO", "HELO"):
                        self._send("250 test")
                    elif verb == "DATA":
                        self._send("354 end with .")
                        data = []
                        while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                            data.append(chunk[1:] if chunk.startswith(b"..") else chunk)
                        messages.append(email.message_from_bytes(b"".join(data)))
                        self._send("250 queued")
                    elif verb == "QUIT":
                        self._send("221 bye")
                        return
                    else:
                        self._send("250 ok")

            def _send(self, text: str) -> None:
                self.wfile.write(text.encode() + b"\r\n")

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def connection(self) -> str:
        """An Airflow SMTP connection (JSON) pointing at this server."""
        return json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": self.port,
                           "extra": {"disable_ssl": True, "disable_tls": True,
                                     "from_email": "airflow@localhost", "timeout": 10,
                                     "retry_limit": 0}})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
