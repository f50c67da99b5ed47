"""A real Kafka for tests and for a person to try: a KRaft broker and Kafka Connect.

Both are the Apache Kafka jars that ``make setup`` copies from Maven Central into
``jars/kafka/`` (``jvm/kafka/pom.xml``, with Debezium's PostgreSQL connector), started
as plain JVM processes on free loopback ports, as :mod:`.pg_cluster` starts PostgreSQL;
no container runtime. Their class path is the ``kafka`` set alone, never Spark's.

* :class:`KafkaBroker`: one node that is both controller and broker (KRaft), topics
  created on first use with one partition; console producer and consumer helpers;
* :class:`KafkaConnect`: a standalone Connect worker (JSON converter, offsets in a
  file) whose REST API adds connectors (:meth:`KafkaConnect.add`).

``python -m changeflow.testing.kafka`` (``make kafka``) starts both and waits.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from changeflow.jvm import jars
from changeflow.testing.pg_cluster import free_port

_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p %c{{1}} %m%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


def _java(root: Path, name: str, main: str, args: list[str], heap: str = "384m",
          level: str = "WARN", tuned: bool = False) -> list[str]:
    """The command line of a Kafka JVM: the ``kafka`` jars, a small heap, a log file.

    Tests start faster with the JIT's first tier only; ``tuned`` (benchmarks) gives the
    JIT all its tiers and the heap twice its size, as a server would run.
    """
    log4j = root / f"{name}-log4j2.properties"
    log4j.write_text(_LOG4J.format(log=root / f"{name}.log", level=level))
    classpath = os.pathsep.join(jars("kafka"))
    if tuned:
        heap = f"{int(heap[:-1]) * 2}{heap[-1]}"
    jit = [] if tuned else ["-XX:TieredStopAtLevel=1"]
    return ["java", f"-Xmx{heap}", "-XX:+UseSerialGC", *jit,
            f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath, main, *args]


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path,
               timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: "
                               f"{_tail(log)}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} in {timeout:.0f} s: "
                       f"{_tail(log)}")


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 20.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cluster_id(draw: Callable[[], uuid.UUID] = uuid.uuid4) -> str:
    """A random KRaft cluster id that the storage tool's arguments accept.

    Kafka ids are URL-safe base64, which may begin with ``-``; the tool's
    argument parser then reads the id as an option and refuses the format
    (one start in 64 failed so).  Like Kafka's own ``Uuid.randomUuid``, draw
    again until the id does not begin with ``-``.

    >>> ids = iter([uuid.UUID(bytes=b"\\xf8" + bytes(15)), uuid.UUID(int=7)])
    >>> cluster_id(lambda: next(ids))
    'AAAAAAAAAAAAAAAAAAAABw'
    """
    while True:
        text = base64.urlsafe_b64encode(draw().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaBroker:
    """A single-node KRaft broker on 127.0.0.1: :meth:`start` it, :meth:`stop` it.

    ``tuned``: the JVM a benchmark measures (all JIT tiers, a larger heap).
    """

    def __init__(self, root: Path | None = None, port: int | None = None,
                 tuned: bool = False):
        self.root = root or Path(tempfile.mkdtemp(prefix="changeflow-kafka-"))
        self.port = port or free_port()
        self.controller_port = free_port()
        self.tuned = tuned
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` of this broker."""
        return f"127.0.0.1:{self.port}"

    def _properties(self) -> Path:
        props = {
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.root / "logs"), "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "share.coordinator.state.topic.replication"
            ".factor": "1", "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "true",
            "log.retention.check.interval.ms": "1000", "log.segment.delete.delay.ms": "0",
            "log.cleaner.backoff.ms": "1000",
        }
        path = self.root / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def start(self) -> KafkaBroker:
        """Format the storage and start the broker; returns when it listens."""
        self.root.mkdir(parents=True, exist_ok=True)
        props = self._properties()
        cluster = cluster_id()
        done = subprocess.run(_java(self.root, "storage", "kafka.tools.StorageTool",
                                    ["format", "-t", cluster, "-c", str(props)]),
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"formatting the Kafka storage failed: {done.stderr[-2000:]}")
        self.proc = subprocess.Popen(_java(self.root, "broker", "kafka.Kafka", [str(props)],
                                           heap="512m", level="INFO", tuned=self.tuned),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        _wait_port(self.port, self.proc, "the Kafka broker", self.root / "broker.log")
        return self

    def stop(self) -> None:
        """Stop the broker and delete its files."""
        _stop(self.proc)
        shutil.rmtree(self.root, ignore_errors=True)

    def tool(self, main: str, *args: str, stdin: str | None = None,
             timeout: float = 120.0) -> str:
        """Run a Kafka command-line tool (a main class of ``kafka-tools``) and return
        its output."""
        done = subprocess.run(_java(self.root, "tool", main, list(args), heap="256m"),
                              input=stdin, capture_output=True, text=True, check=False,
                              timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{main} {args} failed: {done.stderr[-2000:]}")
        return done.stdout

    def create_topic(self, topic: str, partitions: int = 1, **config: str) -> None:
        """Create a topic (``config``: topic properties, dots written as ``_``)."""
        extra = [x for k, v in config.items() for x in ("--config", f"{k.replace('_', '.')}={v}")]
        self.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap,
                  "--create", "--topic", topic, "--partitions", str(partitions), *extra)

    def topics(self) -> list[str]:
        """Every topic's name."""
        out = self.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                        self.bootstrap, "--list")
        return sorted(x for x in out.split() if x)

    def produce(self, topic: str, records: list[tuple[str | None, str]]) -> None:
        """Write ``(key, value)`` records, in order, to partition 0 of ``topic``."""
        lines = "".join(f"{k if k is not None else ''}\x1f{v}\n" for k, v in records)
        self.tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server",
                  self.bootstrap, "--topic", topic, "--reader-property", "parse.key=true",
                  "--reader-property", "key.separator=\x1f", "--producer-property",
                  "acks=all", "--producer-property", "linger.ms=0", stdin=lines)

    def consume(self, topic: str, *, expect: int | None = None,
                timeout_ms: int = 8000) -> list[dict[str, Any]]:
        """Every record of ``topic`` from the beginning: ``partition``, ``offset``,
        ``key`` and ``value`` (``None`` for a tombstone), as the console consumer
        prints them. ``expect``: stop after that many."""
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic, "--from-beginning",
                "--timeout-ms", str(timeout_ms), "--formatter-property", "print.key=true",
                "--formatter-property", "print.partition=true", "--formatter-property",
                "print.offset=true", "--formatter-property", "key.separator=\x1f",
                "--formatter-property", "line.separator=\x1e\n"]
        if expect is not None:
            args += ["--max-messages", str(expect)]
        try:
            out = self.tool("org.apache.kafka.tools.consumer.ConsoleConsumer", *args)
        except RuntimeError as exc:  # the timeout ends the consumer with a failure code
            if "TimeoutException" not in str(exc):
                raise
            out = ""
        return [_record(r) for r in out.split("\x1e\n") if r.strip()]


def _record(text: str) -> dict[str, Any]:
    """One record as the console consumer prints it: ``Partition:<p>``, ``Offset:<o>``,
    key and value, separated by the key separator (``\x1f``)."""
    parts = text.split("\x1f")
    fields: dict[str, str] = {}
    while parts and parts[0].split(":", 1)[0] in ("Partition", "Offset", "CreateTime"):
        name, value = parts.pop(0).split(":", 1)
        fields[name] = value
    key, value = parts[0], "\x1f".join(parts[1:])
    return {"partition": int(fields["Partition"]), "offset": int(fields["Offset"]),
            "key": None if key == "null" else key, "value": None if value == "null" else value}


class KafkaConnect:
    """A standalone Kafka Connect worker with a REST API on 127.0.0.1 (``tuned``: the
    JVM a benchmark measures, as :class:`KafkaBroker`'s)."""

    def __init__(self, broker: KafkaBroker, root: Path | None = None,
                 schemas: bool = True, tuned: bool = False):
        self.broker = broker
        self.root = root or broker.root / "connect"
        self.port = free_port()
        self.schemas = schemas
        self.tuned = tuned
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The REST API's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> KafkaConnect:
        """Start the worker; returns when its REST API answers."""
        self.root.mkdir(parents=True, exist_ok=True)
        enabled = "true" if self.schemas else "false"
        props = {
            "bootstrap.servers": self.broker.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": enabled, "value.converter.schemas.enable": enabled,
            "offset.storage.file.filename": str(self.root / "offsets"),
            "offset.flush.interval.ms": "1000", "listeners": f"http://127.0.0.1:{self.port}",
            "plugin.discovery": "only_scan", "task.shutdown.graceful.timeout.ms": "2000",
        }
        worker = self.root / "worker.properties"
        worker.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc = subprocess.Popen(
            _java(self.root, "connect", "org.apache.kafka.connect.cli.ConnectStandalone",
                  [str(worker)], heap="512m", level="INFO", tuned=self.tuned),
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        _wait_port(self.port, self.proc, "Kafka Connect", self.root / "connect.log",
                   timeout=120.0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.request("GET", "/connectors")
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        raise RuntimeError(f"Kafka Connect's REST API did not answer: "
                           f"{_tail(self.root / 'connect.log')}")

    def stop(self) -> None:
        """Stop the worker (its files go with the broker's)."""
        _stop(self.proc)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One REST call; the decoded JSON answer (None when empty)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
        return json.loads(text) if text else None

    def add(self, name: str, config: dict[str, str], timeout: float = 90.0) -> None:
        """Add a connector and wait until it and its task run."""
        self.request("PUT", f"/connectors/{name}/config", {"name": name, **config})
        deadline = time.monotonic() + timeout
        state: Any = None
        while time.monotonic() < deadline:
            try:
                state = self.request("GET", f"/connectors/{name}/status")
            except urllib.error.HTTPError:
                time.sleep(0.5)
                continue
            tasks = state.get("tasks") or []
            if any(t.get("state") == "FAILED" for t in tasks) \
                    or state["connector"]["state"] == "FAILED":
                raise RuntimeError(f"connector {name} failed: {json.dumps(state)[:3000]}")
            if state["connector"]["state"] == "RUNNING" and tasks \
                    and all(t.get("state") == "RUNNING" for t in tasks):
                return
            time.sleep(0.5)
        raise RuntimeError(f"connector {name} did not run in {timeout:.0f} s: {state}")

    def remove(self, name: str) -> None:
        """Delete a connector."""
        self.request("DELETE", f"/connectors/{name}")


def debezium_postgres(name: str, *, port: int, dbname: str, prefix: str,
                      tables: list[str], **extra: str) -> dict[str, str]:
    """The configuration of Debezium's PostgreSQL connector for a database of a
    :class:`~changeflow.testing.pg_cluster.PgCluster` (``extra``: more properties)."""
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1", "database.hostname": "127.0.0.1", "database.port": str(port),
        "database.user": "postgres", "database.password": "", "database.dbname": dbname,
        "topic.prefix": prefix, "plugin.name": "pgoutput", "slot.name": f"dbz_{name}",
        "publication.name": f"dbz_{name}", "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables), "snapshot.mode": "initial",
        "poll.interval.ms": "100", "status.update.interval.ms": "1000", **extra,
    }


def main() -> None:  # pragma: no cover  (make kafka: runs until stopped)
    """Start a broker and a Connect worker, print where they are, wait for Ctrl-C."""
    broker = KafkaBroker().start()
    connect = KafkaConnect(broker).start()
    print(f"Kafka broker (KRaft):  bootstrap.servers={broker.bootstrap}")
    print(f"Kafka Connect REST:    {connect.url}   (files and logs under {broker.root})")
    print("Ctrl-C stops both and removes their files.")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        connect.stop()
        broker.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
