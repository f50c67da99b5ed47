"""Benchmark: the IDAP SOAP service against the in-process messaging API, in the same run.

1 KB RAW messages through ``changeflow serve`` (a separate uvicorn process on the
embedded SQLite store), HTTP/1.1 keep-alive, with 1 client and with 8 concurrent client
processes: ``AQXmlSend`` with ``<AQXmlCommit/>`` (send+commit) and ``AQXmlReceive`` with
``<AQXmlCommit/>`` (receive+commit), one message per request. The baseline is the
messaging API in one process on the same kind of store: ``enqueue(..., commit=True)``
and ``dequeue(..., commit=True)``. Each entry's ratio is service rate / in-process rate;
p95 is the request latency seen by the clients. Targets: >= 0.3x with 8 clients,
p95 <= 50 ms.

Run it alone with ``python -m bench.idap_bench [small|full]``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = {"small": 800, "full": 4000}
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


def _in_process(url: str, n: int) -> dict[str, float]:
    from changeflow.messaging import connect

    s = connect(url)
    started = time.perf_counter()
    for _ in range(n):
        s.enqueue(QUEUE, PAYLOAD, commit=True)
    enq = n / (time.perf_counter() - started)
    started = time.perf_counter()
    got = 0
    while s.dequeue(QUEUE, wait=0, commit=True) is not None:
        got += 1
    deq = got / (time.perf_counter() - started)
    assert got == n, f"dequeued {got} of {n}"
    return {"enqueue": enq, "dequeue": deq}


def _client(url: str, body: bytes, n: int, barrier: Any, out: Any) -> None:
    import httpx

    lat = []
    with httpx.Client(auth=("aq", PASSWORD), headers={"Content-Type": "text/xml"},
                      timeout=60) as c:
        c.post(url, content=RECEIVE.replace(b"<AQXmlCommit/>", b""))  # open the session
        barrier.wait()
        started = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            r = c.post(url, content=body)
            lat.append(time.perf_counter() - t)
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        out.put((started, time.perf_counter(), lat))


def _through_service(url: str, body: bytes, clients: int, n: int) -> tuple[float, float]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(clients), ctx.Queue()
    per = n // clients
    procs = [ctx.Process(target=_client, args=(url, body, per, barrier, out))
             for _ in range(clients)]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    start = min(r[0] for r in results)
    end = max(r[1] for r in results)
    lat = sorted(x for r in results for x in r[2])
    p95 = lat[int(0.95 * (len(lat) - 1))]
    return per * clients / (end - start), p95 * 1000


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
        base = _in_process(base_url, n)
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
                for op, body, key in (("send_commit", SEND, "enqueue"),
                                      ("receive_commit", RECEIVE, "dequeue")):
                    rate, p95 = _through_service(url, body, clients, n)
                    entries.append({
                        "name": f"idap_{op}_{clients}c", "ratio": round(rate / base[key], 3),
                        "target": ">= 0.3x in-process (8 clients), p95 <= 50 ms",
                        "baseline": f"in-process {key}+commit {base[key]:.0f}/s",
                        "rate_per_s": round(rate, 1), "p95_ms": round(p95, 2),
                        "clients": clients, "messages": n, "payload_bytes": len(PAYLOAD)})
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
