"""Benchmark: the IDAP SOAP service against the in-process messaging API, in the same run.

1 KB RAW messages through ``changeflow serve`` (a separate uvicorn process on the
embedded SQLite store), HTTP/1.1 keep-alive, with 1 client and with 8 concurrent client
processes: ``AQXmlSend`` with ``<AQXmlCommit/>`` (send+commit) and ``AQXmlReceive`` with
``<AQXmlCommit/>`` (receive+commit), one message per request. The baseline is the
messaging API on the same kind of store with **as many in-process clients** (1 or 8
processes, each its own session): ``enqueue(..., commit=True)`` and ``dequeue(...,
commit=True)``. The two run in alternating rounds (8; every client process is started
once), so load from other work on the machine falls on both alike. Each entry's ratio is service rate / in-process rate, each the messages of its
rounds over the sum of their seconds (the median per-round ratio is recorded too);
p95 is the request latency seen by the clients. Targets: >= 0.3x with 8 clients,
p95 <= 50 ms.

Run it alone with ``python -m bench.idap_bench [small|full]``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.results import entry

SIZES = {"small": 800, "full": 4000}
ROUNDS = 8
QUEUE = "bench.q"
PAYLOAD = b"x" * 1024
PASSWORD = "bench-password"
SOAP = "http://schemas.xmlsoap.org/soap/envelope/"
IDAP = "http://ns.oracle.com/AQ/schemas/access"
SEND = (f'<Envelope xmlns="{SOAP}"><Body><AQXmlSend xmlns="{IDAP}"><producer_options>'
        f"<destination>{QUEUE}</destination></producer_options><message_set><message>"
        "<message_header><sender_id><agent_name>aq</agent_name></sender_id></message_header>"
        f"<message_payload><raw>{PAYLOAD.hex()}</raw></message_payload></message>"
        "</message_set><AQXmlCommit/></AQXmlSend></Body></Envelope>").encode()
RECEIVE = (f'<Envelope xmlns="{SOAP}"><Body><AQXmlReceive xmlns="{IDAP}"><consumer_options>'
           f"<destination>{QUEUE}</destination><wait_time>0</wait_time></consumer_options>"
           "<AQXmlCommit/></AQXmlReceive></Body></Envelope>").encode()


def _setup(url: str) -> None:
    from changeflow.messaging import admin
    from changeflow.state import StateStore

    store = StateStore(url)
    admin.create_queue_table(store, "bench.q_qt", "RAW", if_not_exists=True)
    admin.create_queue(store, QUEUE, "bench.q_qt", start=True, if_not_exists=True)


def _in_process_client(url: str, commands: Any, barrier: Any, out: Any) -> None:
    """An in-process client: its own session of the messaging API on the store."""
    from changeflow.messaging import connect

    s = connect(url)
    while (command := commands.get()) is not None:
        op, n = command
        barrier.wait()
        started = time.perf_counter()
        for _ in range(n):
            if op == "enqueue":
                s.enqueue(QUEUE, PAYLOAD, commit=True)
            elif s.dequeue(QUEUE, wait=0, commit=True) is None:
                raise RuntimeError("the in-process queue ran dry")
        out.put((started, time.perf_counter(), []))


def _client(url: str, commands: Any, barrier: Any, out: Any) -> None:
    """A client process kept for the whole measurement: one keep-alive connection.

    The standard library's ``http.client`` (a thin client, so that the figure is the
    service's cost more than the client's), with the session cookie sent back.
    """
    import base64
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    auth = base64.b64encode(f"aq:{PASSWORD}".encode()).decode()
    headers = {"Content-Type": "text/xml", "Authorization": f"Basic {auth}"}

    def post(body: bytes) -> bytes:
        conn.request("POST", parts.path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
        cookie = r.getheader("set-cookie")
        if cookie:
            headers["Cookie"] = cookie.split(";")[0]
        return data

    post(RECEIVE.replace(b"<AQXmlCommit/>", b""))  # open the session
    while (command := commands.get()) is not None:
        body, n = command
        lat = []
        barrier.wait()
        started = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            data = post(body)
            lat.append(time.perf_counter() - t)
            if body is RECEIVE and b"message_payload" not in data:
                raise RuntimeError(f"no message received: {data[:300]!r}")
        out.put((started, time.perf_counter(), lat))
    conn.close()


class _Clients:
    """``clients`` client processes (HTTP, or in-process API sessions), started once,
    run round by round."""

    def __init__(self, url: str, clients: int, target: Any = None) -> None:
        ctx = mp.get_context("spawn")
        self.barrier, self.out = ctx.Barrier(clients), ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(clients)]
        self.procs = [ctx.Process(target=target or _client,
                                  args=(url, q, self.barrier, self.out))
                      for q in self.commands]
        for p in self.procs:
            p.start()

    def round(self, body: Any, n: int) -> tuple[float, int, list[float]]:
        """(seconds from the first start to the last end, requests, their latencies)."""
        per = n // len(self.procs)
        for q in self.commands:
            q.put((body, per))
        results = [self.out.get(timeout=600) for _ in self.procs]
        return (max(r[1] for r in results) - min(r[0] for r in results),
                per * len(self.procs), [x for r in results for x in r[2]])

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for p in self.procs:
            p.join(timeout=60)


def _measure(url: str, base_url: str, clients: int, n: int,
             rounds: int) -> list[dict[str, Any]]:
    """Send+commit then receive+commit through the service with ``clients`` clients,
    each in alternating rounds with as many in-process clients (the order flips)."""
    groups = {"service": _Clients(url, clients),
              "in_process": _Clients(base_url, clients, _in_process_client)}
    entries = []
    try:
        per = n // rounds
        per -= per % clients
        for op, body, key in (("send_commit", SEND, "enqueue"),
                              ("receive_commit", RECEIVE, "dequeue")):
            spent = {"service": 0.0, "in_process": 0.0}
            lat: list[float] = []
            ratios = []
            for r in range(rounds):
                rate = {}
                for side in (("service", "in_process") if r % 2 == 0
                             else ("in_process", "service")):
                    seconds, done, lats = groups[side].round(
                        body if side == "service" else key, per)
                    lat += lats
                    spent[side] += seconds
                    rate[side] = done / seconds
                ratios.append(rate["service"] / rate["in_process"])
            entries += _entries(op, key, clients, per * rounds, rounds, spent, lat, ratios)
    finally:
        for g in groups.values():
            g.close()
    return entries


def _entries(op: str, key: str, clients: int, messages: int, rounds: int,
             spent: dict[str, float], lat: list[float], ratios: list[float]) -> list[dict]:
    lat.sort()
    p95 = lat[int(0.95 * (len(lat) - 1))] * 1000
    figures = {"clients": clients, "messages": messages, "rounds": rounds,
               "payload_bytes": len(PAYLOAD), "p95_ms": round(p95, 2),
               "p50_ms": round(lat[len(lat) // 2] * 1000, 2),
               "median_round_ratio": round(statistics.median(ratios), 3)}
    eight = clients == 8
    return [
        entry(f"idap_{op}_{clients}c", value=messages / spent["service"], unit="msg/s",
              baseline_value=messages / spent["in_process"],
              baseline=f"{clients} in-process client process(es), {key}+commit through the "
                       "messaging API, alternating rounds",
              target=0.3 if eight else None, direction=">=" if eight else None,
              headline=eight, figures=figures),
        entry(f"idap_{op}_{clients}c.p95", value=p95, unit="ms", judged="value",
              baseline="absolute target: request latency seen by the clients",
              target=50, direction="<=", figures=figures),
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(spark: Any = None, size: str = "small") -> list[dict[str, Any]]:
    """Measure; return the entries for bench-results.json."""
    n = SIZES.get(size, SIZES["small"])
    tmp = Path(tempfile.mkdtemp(prefix="idap-bench-"))
    try:
        base_url = f"sqlite:///{tmp}/base.db"
        _setup(base_url)
        store_url = f"sqlite:///{tmp}/served.db"
        _setup(store_url)
        port = _free_port()
        env = {**os.environ, "CHANGEFLOW_IDAP_PASSWORD": PASSWORD}
        env.pop("CHANGEFLOW_CONFIG", None)
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "changeflow"), "serve", "--store", store_url,
             "--port", str(port)], cwd=tmp, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}/aq"
        try:
            _wait(url, server)
            entries = []
            for clients in (1, 8):
                entries += _measure(url, base_url, clients, n, ROUNDS)
            return entries
        finally:
            server.terminate()
            server.wait(timeout=30)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _wait(url: str, server: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"changeflow serve exited: {server.stderr.read().decode()[-2000:]}"
                               if server.stderr else "changeflow serve exited")
        try:
            if httpx.get(url + "?wsdl", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("changeflow serve did not start within 60 s")


if __name__ == "__main__":
    for e in run(None, sys.argv[1] if len(sys.argv) > 1 else "small"):
        print(e)
