"""A throwaway Spark standalone cluster from the installed pyspark: a master and workers.

pyspark ships ``bin/spark-class`` but not the ``sbin/start-*.sh`` scripts, so the
daemons are started as ``spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker`` processes, each with its own log, on free ports of
127.0.0.1. Workers are small (one core, 1 GiB each by default): this machine has two
cores.

>>> SparkStandalone(workers=2).master_url.startswith("spark://127.0.0.1:")
True
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from changeflow.testing.pg_cluster import free_port


def spark_home() -> Path:
    """The installed pyspark's Spark home (``$SPARK_HOME`` wins)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


class SparkStandalone:
    """A master and ``workers`` workers: :meth:`start`, use :attr:`master_url`, :meth:`stop`."""

    def __init__(self, workers: int = 2, *, cores: int = 1, memory: str = "1g",
                 root: Path | None = None):
        self.root = root or Path(tempfile.mkdtemp(prefix="changeflow-spark-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        self.workers, self.cores, self.memory = workers, cores, memory
        self.procs: list[subprocess.Popen[bytes]] = []
        self.worker_procs: dict[int, subprocess.Popen[bytes]] = {}
        self.worker_ui: dict[int, int] = {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def _spawn(self, name: str, *args: str) -> None:
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_WORKER_DIR": str(self.root / "work"), "SPARK_LOG_DIR": str(self.root)}
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115  (kept open by the child)
        self.procs.append(subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args], stdout=log,
            stderr=subprocess.STDOUT, env=env, start_new_session=True))

    def _spawn_worker(self, i: int) -> None:
        self.worker_ui[i] = free_port()
        self._spawn(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host",
                    "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                    "--webui-port", str(self.worker_ui[i]), "--work-dir",
                    str(self.root / f"work{i}"), self.master_url)
        self.worker_procs[i] = self.procs[-1]

    def busy_worker(self) -> int | None:
        """The index of a live worker running an executor (cores in use), if any."""
        for w in self._workers():
            if w.get("state") != "ALIVE" or not int(w.get("coresused", 0)):
                continue
            for i, port in self.worker_ui.items():
                if str(w.get("webuiaddress", "")).endswith(f":{port}") and \
                        self.worker_procs[i].poll() is None:
                    return i
        return None

    def kill_worker(self, i: int) -> None:
        """SIGKILL a worker and the executors it launched (its process group): a lost node."""
        proc = self.worker_procs[i]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def restart_worker(self, i: int, timeout: float = 90.0) -> None:
        """Start a killed worker again; wait until the master has registered it."""
        before = {w.get("id") for w in self._workers()}
        self._spawn_worker(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(w.get("id") not in before and w.get("state") == "ALIVE"
                   for w in self._workers()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"worker {i} did not register again; logs in {self.root}")

    def _workers(self) -> list[dict[str, Any]]:
        try:
            return list(self.status().get("workers", []))
        except OSError:
            return []

    def alive_workers(self) -> int:
        """How many workers the master lists as alive."""
        try:
            return len([w for w in self.status().get("workers", [])
                        if w.get("state") == "ALIVE"])
        except OSError:
            return 0

    def start(self, timeout: float = 90.0) -> SparkStandalone:
        """Start the daemons and wait until every worker has registered."""
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            self._spawn_worker(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if len([w for w in self.status().get("workers", [])
                        if w.get("state") == "ALIVE"]) >= self.workers:
                    return self
            except OSError:
                pass
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(1)
        self.stop(keep_logs=True)
        raise RuntimeError(f"Spark standalone cluster did not start; logs in {self.root}")

    def status(self) -> dict[str, Any]:
        """The master's JSON status: workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as r:
            data: dict[str, Any] = json.loads(r.read())
        return data

    def stop(self, *, keep_logs: bool = False) -> None:
        """Stop the daemons (workers first) and remove the work directory."""
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = []
        if not keep_logs:
            shutil.rmtree(self.root, ignore_errors=True)
