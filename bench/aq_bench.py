"""Benchmark: Advanced Queuing for applications, against a plain queue table in the same run.

Payload: a typed message of about 1 KB (an object type of five fields). Stores: the
embedded default (a SQLite file, default pragmas: WAL, synchronous FULL) and a
throwaway PostgreSQL 15 (:class:`~changeflow.testing.pg_cluster.PgCluster`). For each:

* enqueue+commit and dequeue REMOVE+commit throughput, one message per transaction,
  with 1 client and with 4 client processes (``enqueue(..., commit=True)``,
  ``dequeue(..., commit=True)``); and with 100 messages per transaction
  (``enqueue_array``/``dequeue_array``);
* enqueue-to-dequeue latency p50/p95 for a consumer waiting in ``dequeue(wait=...)``
  while a producer process sends 100 messages/s;
* the same on the usual alternative, measured in the same run with the same
  durability: a plain queue table (``id``, ``payload``) written with one INSERT per
  transaction and consumed with ``DELETE ... WHERE id = (SELECT ... ORDER BY id LIMIT 1
  FOR UPDATE SKIP LOCKED) RETURNING`` (PostgreSQL; SQLite serialises writers, so its
  plain table simply deletes the oldest row), through the raw driver.

Each entry's ratio is AQ / plain table (throughput) or plain p95 / AQ p95 (latency):
above 1 means AQ is faster. Targets: >= 2,000 messages/s each way for one client,
p95 <= 50 ms, on PostgreSQL >= 0.5 x the SKIP LOCKED table.

Run it alone with ``python -m bench.aq_bench [small|full]``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = {"small": {"n": 2000, "latency": 300}, "full": {"n": 10000, "latency": 1000}}
FIELDS = {"id": "INTEGER", "customer": "VARCHAR2(100)", "note": "VARCHAR2(2000)",
          "amount": "NUMBER", "placed": "TIMESTAMP"}
QUEUE = "bench.orders"


def payload(i: int) -> dict[str, Any]:
    """One ~1 KB order."""
    return {"id": i, "customer": f"customer {i % 997}", "note": "x" * 900,
            "amount": f"{i % 1000}.25", "placed": "2024-02-01T10:00:00"}


def _setup_aq(url: str) -> None:
    from changeflow.messaging import admin
    from changeflow.state import StateStore

    store = StateStore(url)
    admin.create_type(store, "bench.order_t", FIELDS, if_not_exists=True)
    admin.create_queue_table(store, "bench.orders_qt", "bench.order_t", if_not_exists=True)
    admin.create_queue(store, QUEUE, "bench.orders_qt", start=True, if_not_exists=True)


# -- workers (run in their own processes) -------------------------------------------------
def _aq_worker(url: str, op: str, n: int, batch: int, barrier: Any, out: Any) -> None:
    from changeflow.messaging import connect

    s = connect(url)
    barrier.wait()
    started = time.perf_counter()
    done = 0
    if op == "enqueue":
        for i in range(0, n, batch):
            items = [payload(j) for j in range(i, min(n, i + batch))]
            if batch == 1:
                s.enqueue(QUEUE, items[0], commit=True)
            else:
                s.enqueue_array(QUEUE, items, commit=True)
            done += len(items)
    else:
        while done < n:
            if batch == 1:
                got = 1 if s.dequeue(QUEUE, wait=0, commit=True) else 0
            else:
                got = len(s.dequeue_array(QUEUE, min(batch, n - done), wait=0, commit=True))
            if not got:
                break
            done += got
    out.put((started, time.perf_counter(), done))


def _plain_connect(url: str) -> Any:
    if url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url.split("///", 1)[1], timeout=60, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn
    import psycopg

    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))


def _plain_worker(url: str, op: str, n: int, batch: int, barrier: Any, out: Any) -> None:
    conn = _plain_connect(url)
    sqlite = url.startswith("sqlite")
    text = json.dumps(payload(0))
    barrier.wait()
    started = time.perf_counter()
    done = 0
    while done < n:
        k = min(batch, n - done)
        if sqlite:
            conn.execute("BEGIN IMMEDIATE")
        if op == "enqueue":  # a batch is one executemany
            sql = "INSERT INTO plain_q (payload) VALUES (?)" if sqlite else \
                "INSERT INTO plain_q (payload) VALUES (%s)"
            (conn if sqlite else conn.cursor()).executemany(sql, [(text,)] * k)
            done += k
        else:  # a batch is one DELETE of up to k rows
            got = len(conn.execute(_PLAIN_DEQUEUE[sqlite].format(k=k)).fetchall())
            done += got
            if not got:
                conn.execute("COMMIT") if sqlite else conn.commit()
                break
        conn.execute("COMMIT") if sqlite else conn.commit()
    out.put((started, time.perf_counter(), done))


_PLAIN_DEQUEUE = {
    True: "DELETE FROM plain_q WHERE id IN (SELECT id FROM plain_q ORDER BY id LIMIT {k}) "
          "RETURNING payload",
    False: "DELETE FROM plain_q WHERE id IN (SELECT id FROM plain_q ORDER BY id LIMIT {k} "
           "FOR UPDATE SKIP LOCKED) RETURNING payload",
}


def _plain_setup(url: str) -> None:
    conn = _plain_connect(url)
    if url.startswith("sqlite"):
        conn.execute("CREATE TABLE IF NOT EXISTS plain_q (id INTEGER PRIMARY KEY "
                     "AUTOINCREMENT, payload TEXT NOT NULL)")
    else:
        conn.execute("CREATE TABLE IF NOT EXISTS plain_q (id bigserial PRIMARY KEY, "
                     "payload text NOT NULL)")
        conn.commit()
    conn.close()


def _collect(out: Any, procs: list[Any]) -> list[Any]:
    """Every worker's result; a worker that died fails the measurement at once."""
    import queue as queue_mod

    results: list[Any] = []
    deadline = time.monotonic() + 900
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=1))
        except queue_mod.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"a benchmark worker failed (exit codes {dead})") from None
    return results


def _throughput(worker: Any, url: str, op: str, n: int, clients: int, batch: int) -> float:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(clients), ctx.Queue()
    share = n // clients
    procs = [ctx.Process(target=worker, args=(url, op, share, batch, barrier, out))
             for _ in range(clients)]
    for p in procs:
        p.start()
    results = _collect(out, procs)
    for p in procs:
        p.join()
    total = sum(r[2] for r in results)
    seconds = max(r[1] for r in results) - min(r[0] for r in results)
    return total / seconds


# -- latency ---------------------------------------------------------------------------------
def _aq_producer(url: str, n: int, barrier: Any) -> None:
    from changeflow.messaging import connect

    s = connect(url)
    barrier.wait()
    for i in range(n):
        s.enqueue(QUEUE, payload(i), correlation=repr(time.time()), commit=True)
        time.sleep(0.01)


def _plain_producer(url: str, n: int, barrier: Any) -> None:
    conn = _plain_connect(url)
    sqlite = url.startswith("sqlite")
    barrier.wait()
    for i in range(n):
        doc = json.dumps({**payload(i), "sent": time.time()})
        if sqlite:
            conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO plain_q (payload) VALUES (?)" if sqlite else
                     "INSERT INTO plain_q (payload) VALUES (%s)", (doc,))
        conn.execute("COMMIT") if sqlite else conn.commit()
        time.sleep(0.01)


def _latency_aq(url: str, n: int) -> list[float]:
    from changeflow.messaging import connect

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    prod = ctx.Process(target=_aq_producer, args=(url, n, barrier))
    prod.start()
    s = connect(url)
    barrier.wait()
    lags = []
    for _ in range(n):
        m = s.dequeue(QUEUE, wait=30, commit=True)
        if m is None:
            break
        lags.append(time.time() - float(m.correlation or 0))
    prod.join()
    return lags


def _latency_plain(url: str, n: int) -> list[float]:
    """A plain polling consumer, with the same backoff as AQ's waiting dequeue."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    prod = ctx.Process(target=_plain_producer, args=(url, n, barrier))
    prod.start()
    conn = _plain_connect(url)
    sqlite = url.startswith("sqlite")
    barrier.wait()
    lags: list[float] = []
    while len(lags) < n:
        pause = 0.002
        while True:
            if sqlite:
                conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(_PLAIN_DEQUEUE[sqlite].format(k=1)).fetchone()
            conn.execute("COMMIT") if sqlite else conn.commit()
            if row is not None:
                lags.append(time.time() - json.loads(row[0])["sent"])
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
    prod.join()
    return lags


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- one store --------------------------------------------------------------------------------
def _store_entries(label: str, aq_url: str, plain_url: str, n: int, lat_n: int) -> list[dict]:
    _setup_aq(aq_url)
    _plain_setup(plain_url)
    entries = []
    for clients, batch in ((1, 1), (4, 1), (1, 100)):
        tag = f"{clients}c" + (f"_x{batch}" if batch > 1 else "")
        count = n if batch > 1 or clients > 1 else n // 2
        for op in ("enqueue", "dequeue"):
            aq = _throughput(_aq_worker, aq_url, op, count, clients, batch)
            plain = _throughput(_plain_worker, plain_url, op, count, clients, batch)
            target = 2000.0 if clients == 1 else None
            entries.append({
                "name": f"aq_{label}_{op}_{tag}", "ratio": round(aq / plain, 3),
                "baseline": f"plain queue table {round(plain)} msg/s",
                "target": f">= 2000 msg/s{' and >= 0.5x' if label == 'pg' else ''}"
                if target else (">= 0.5x" if label == "pg" else None),
                "figures": {"aq_msg_per_s": round(aq), "plain_msg_per_s": round(plain),
                            "messages": count, "clients": clients,
                            "messages_per_transaction": batch,
                            "meets_2000": aq >= 2000 if target else None},
            })
    aq_lags, plain_lags = _latency_aq(aq_url, lat_n), _latency_plain(plain_url, lat_n)
    p95, plain_p95 = _pct(aq_lags, 0.95), _pct(plain_lags, 0.95)
    entries.append({
        "name": f"aq_{label}_latency", "ratio": round(plain_p95 / p95, 3),
        "baseline": f"plain polling consumer p95 {plain_p95 * 1000:.1f} ms",
        "target": "p95 <= 50 ms",
        "figures": {"p50_ms": round(statistics.median(aq_lags) * 1000, 2),
                    "p95_ms": round(p95 * 1000, 2),
                    "plain_p50_ms": round(statistics.median(plain_lags) * 1000, 2),
                    "plain_p95_ms": round(plain_p95 * 1000, 2), "messages": len(aq_lags),
                    "send_rate_per_s": 100},
    })
    return entries


def run(spark: Any, size: str = "small") -> list[dict[str, Any]]:
    """Run both stores; ``spark`` is not used (no JVM on this path)."""
    from changeflow.testing.pg_cluster import PgCluster

    params = SIZES.get(size, SIZES["small"])
    root = Path(tempfile.mkdtemp(prefix="changeflow-aqbench-"))
    entries = []
    try:
        entries += _store_entries("sqlite", f"sqlite:///{root}/aq.db",
                                  f"sqlite:///{root}/plain.db", params["n"], params["latency"])
        pg = PgCluster().start()
        try:
            aq_url = pg.createdb("aq").replace("postgresql://", "postgresql+psycopg://")
            plain_url = pg.createdb("plain")
            entries += _store_entries("pg", aq_url, plain_url, params["n"], params["latency"])
        finally:
            pg.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return entries


if __name__ == "__main__":
    size = sys.argv[1] if len(sys.argv) > 1 else "small"
    for e in run(None, size):
        print(json.dumps(e, default=str))
