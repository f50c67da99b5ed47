"""Benchmark: Advanced Queuing for applications, against one-statement queues in the same run.

Payload: a typed message of about 1 KB (an object type of five fields). Stores: the
embedded default (a SQLite file, default pragmas: WAL, synchronous FULL) and a
throwaway PostgreSQL 15 (:class:`~changeflow.testing.pg_cluster.PgCluster`). For each:

* enqueue+commit and dequeue REMOVE+commit throughput, one message per transaction,
  with 1 client and with 4 client processes (``enqueue(..., commit=True)``,
  ``dequeue(..., commit=True)``); and with 100 messages per transaction
  (``enqueue_array``/``dequeue_array``);
* enqueue-to-dequeue latency p50/p95 for a consumer waiting in ``dequeue(wait=...)``
  while a producer process sends 100 messages/s;
* the same on the usual alternatives, in the same run with the same durability:
  - a plain queue table (``id``, ``payload``) through the raw driver, **one autocommit
    statement per message**: ``INSERT`` to enqueue, ``DELETE ... WHERE id = (SELECT ...
    ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING`` to dequeue (SQLite
    serialises writers: its plain table deletes the oldest row); 100 messages are one
    ``executemany`` in a transaction / one ``DELETE`` of 100 rows;
  - on PostgreSQL, **PGMQ** (its SQL-only install, shipped in the ``pgmq`` package on
    PyPI): ``pgmq.send`` / ``pgmq.pop``, one autocommit statement each
    (``pgmq.send_batch`` / ``pgmq.pop(q, 100)`` for arrays).

All sides run in the same run in alternating rounds (8 per throughput figure, 4 for the
latency; the order rotates each round), with worker processes started once per side, so
load from other work on the machine falls on every side alike. A side's rate is its
messages over the sum of its rounds' seconds. Targets: >= 0.5 x the one-statement table
and >= 0.5 x PGMQ on PostgreSQL (SQLite's ratios are reported), >= 2,000 messages/s for
one client, p95 <= 50 ms.

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

from bench.results import entry, skipped

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
def _aq_worker(s: Any, url: str, op: str, n: int, batch: int, barrier: Any, out: Any) -> None:
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

    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"),
                           autocommit=True)


def _plain_worker(conn: Any, url: str, op: str, n: int, batch: int, barrier: Any,
                  out: Any) -> None:
    """One autocommit statement per message (``batch`` 1), or one transaction per batch."""
    sqlite = url.startswith("sqlite")
    text = json.dumps(payload(0))
    insert = "INSERT INTO plain_q (payload) VALUES (?)" if sqlite else \
        "INSERT INTO plain_q (payload) VALUES (%s)"
    barrier.wait()
    started = time.perf_counter()
    done = 0
    while done < n:
        k = min(batch, n - done)
        if op == "enqueue" and k == 1:
            conn.execute(insert, (text,))
        elif op == "enqueue":  # a batch is one executemany in one transaction
            if sqlite:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(insert, [(text,)] * k)
                conn.execute("COMMIT")
            else:
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(insert, [(text,)] * k)
        else:  # one DELETE of up to k rows, autocommit
            got = len(conn.execute(_PLAIN_DEQUEUE[sqlite].format(k=k)).fetchall())
            if not got:
                break
            k = got
        done += k
    out.put((started, time.perf_counter(), done))


def _pgmq_worker(conn: Any, url: str, op: str, n: int, batch: int, barrier: Any,
                 out: Any) -> None:
    """PGMQ's SQL functions, one autocommit statement per call."""
    from psycopg.types.json import Jsonb

    doc = Jsonb(payload(0))
    barrier.wait()
    started = time.perf_counter()
    done = 0
    while done < n:
        k = min(batch, n - done)
        if op == "enqueue" and k == 1:
            conn.execute("SELECT pgmq.send(%s, %s)", (PGMQ_QUEUE, doc))
        elif op == "enqueue":
            conn.execute("SELECT pgmq.send_batch(%s, %s)", (PGMQ_QUEUE, [doc] * k))
        else:
            got = len(conn.execute("SELECT msg_id, message FROM pgmq.pop(%s, %s)",
                                   (PGMQ_QUEUE, k)).fetchall())
            if not got:
                break
            k = got
        done += k
    out.put((started, time.perf_counter(), done))


PGMQ_QUEUE = "bench_q"


def pgmq_setup(url: str) -> str | None:
    """Install PGMQ's SQL into a database and create its queue; None, or why not."""
    try:
        import psycopg
        from pgmq.install import get_embedded_install_sql
    except ImportError as exc:
        return f"PGMQ is not installed (pip package pgmq): {exc}"
    try:
        with psycopg.connect(url) as conn:
            conn.execute(get_embedded_install_sql())
            conn.execute("SELECT pgmq.create(%s)", (PGMQ_QUEUE,))
            conn.commit()
    except Exception as exc:  # noqa: BLE001  (a peer that cannot run is a miss, with why)
        return f"PGMQ's SQL install failed: {type(exc).__name__}: {exc}"[:400]
    return None


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


def _collect(out: Any, procs: list[Any], want: int) -> list[Any]:
    """``want`` worker results; a worker that died fails the measurement at once."""
    import queue as queue_mod

    results: list[Any] = []
    deadline = time.monotonic() + 900
    while len(results) < want:
        try:
            results.append(out.get(timeout=1))
        except queue_mod.Empty:
            dead = [p.exitcode for p in procs if p.exitcode is not None]
            if dead or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"a benchmark worker failed (exit codes {dead})") from None
    return results


def _serve(kind: str, url: str, commands: Any, barrier: Any, out: Any) -> None:
    """A worker process kept for the whole measurement: runs rounds as it is told."""
    worker = {"aq": _aq_worker, "plain": _plain_worker, "pgmq": _pgmq_worker}[kind]
    producer = _aq_producer if kind == "aq" else _plain_producer
    handle = _aq_handle(url) if kind == "aq" else _plain_connect(url)
    while (command := commands.get()) is not None:
        op, n, batch = command
        if op == "produce":
            producer(handle, url, n, barrier)
            out.put(None)
        else:
            worker(handle, url, op, n, batch, barrier, out)


def _aq_handle(url: str) -> Any:
    from changeflow.messaging import connect

    return connect(url)


class _Side:
    """One side's worker processes (AQ or the plain table), started once, run per round."""

    def __init__(self, kind: str, url: str, clients: int) -> None:
        ctx = mp.get_context("spawn")
        self.clients = clients
        self.barrier, self.out = ctx.Barrier(clients), ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(clients)]
        self.procs = [ctx.Process(target=_serve, args=(kind, url, q, self.barrier, self.out))
                      for q in self.commands]
        for p in self.procs:
            p.start()

    def round(self, op: str, n: int, batch: int) -> tuple[float, int]:
        """Run ``n`` operations over the clients; (seconds from first start to last end, done)."""
        for q in self.commands:
            q.put((op, n // self.clients, batch))
        results = _collect(self.out, self.procs, self.clients)
        return max(r[1] for r in results) - min(r[0] for r in results), sum(r[2] for r in results)

    def produce(self, n: int) -> None:
        """Tell the first worker to send ``n`` messages at 100/s (returns at once)."""
        self.commands[0].put(("produce", n, 1))

    def produced(self) -> None:
        """Wait for :meth:`produce` to finish."""
        _collect(self.out, self.procs, 1)

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for p in self.procs:
            p.join(timeout=60)


def _rounds(sides: dict[str, _Side], op: str, total: int, batch: int, rounds: int
            ) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Alternating rounds of every side (the order rotates each round): their rates,
    msg/s, each side's messages over the sum of its rounds' seconds; and per baseline
    side, the per-round ratios AQ / that side."""
    names = list(sides)
    spent = dict.fromkeys(sides, 0.0)
    done = dict.fromkeys(sides, 0)
    ratios: dict[str, list[float]] = {k: [] for k in names if k != "aq"}
    per = max(total // rounds, 1)
    for r in range(rounds):
        rate = {}
        order = names[r % len(names):] + names[:r % len(names)]
        for key in (order if r % 2 == 0 else order[::-1]):
            seconds, count = sides[key].round(op, per, batch)
            spent[key] += seconds
            done[key] += count
            rate[key] = count / seconds if seconds else 0.0
        for k in ratios:
            if rate[k]:
                ratios[k].append(rate["aq"] / rate[k])
    return {k: done[k] / spent[k] for k in sides}, ratios


# -- latency ---------------------------------------------------------------------------------
def _aq_producer(s: Any, url: str, n: int, barrier: Any) -> None:
    barrier.wait()
    for i in range(n):
        s.enqueue(QUEUE, payload(i), correlation=repr(time.time()), commit=True)
        time.sleep(0.01)


def _plain_producer(conn: Any, url: str, n: int, barrier: Any) -> None:
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


def _latency_aq(s: Any, n: int) -> list[float]:
    """A consumer waiting in ``dequeue(wait=...)`` for ``n`` messages."""
    lags = []
    for _ in range(n):
        m = s.dequeue(QUEUE, wait=30, commit=True)
        if m is None:
            break
        lags.append(time.time() - float(m.correlation or 0))
    return lags


def _latency_plain(conn: Any, url: str, n: int) -> list[float]:
    """A plain polling consumer, with the same backoff as AQ's waiting dequeue."""
    sqlite = url.startswith("sqlite")
    lags: list[float] = []
    while len(lags) < n:
        pause = 0.002
        while True:
            row = conn.execute(_PLAIN_DEQUEUE[sqlite].format(k=1)).fetchone()  # autocommit
            if row is not None:
                lags.append(time.time() - json.loads(row[0])["sent"])
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
    return lags


def _latency(aq_url: str, plain_url: str, n: int, rounds: int = 4
             ) -> tuple[list[float], list[float]]:
    """Both consumers' lags, in alternating rounds of ``n / rounds`` messages."""
    from changeflow.messaging import connect

    sides = {"aq": _Side("aq", aq_url, 1), "plain": _Side("plain", plain_url, 1)}
    s, conn = connect(aq_url), _plain_connect(plain_url)
    lags: dict[str, list[float]] = {"aq": [], "plain": []}
    try:
        per = max(n // rounds, 1)
        for r in range(rounds):
            for key in (("aq", "plain") if r % 2 == 0 else ("plain", "aq")):
                sides[key].produce(per)
                lags[key] += (_latency_aq(s, per) if key == "aq"
                              else _latency_plain(conn, plain_url, per))
                sides[key].produced()
    finally:
        for side in sides.values():
            side.close()
        conn.close()
    return lags["aq"], lags["plain"]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- one store --------------------------------------------------------------------------------
def _store_entries(label: str, urls: dict[str, str], n: int, lat_n: int,
                   pgmq_missing: str | None) -> list[dict]:
    """Every figure of one store; ``urls``: AQ's, the plain table's (and PGMQ's)."""
    _setup_aq(urls["aq"])
    _plain_setup(urls["plain"])
    entries = []
    for clients, batch in ((1, 1), (4, 1), (1, 100)):
        tag = f"{clients}c" + (f"_x{batch}" if batch > 1 else "")
        count = n if batch > 1 or clients > 1 else n // 2
        rounds = 8 if batch == 1 else 4
        count -= count % (rounds * clients * batch)
        sides = {k: _Side(k, u, clients) for k, u in urls.items()}
        try:
            for op in ("enqueue", "dequeue"):
                rate, ratios = _rounds(sides, op, count, batch, rounds)
                entries += _entries(label, op, tag, clients, batch, count, rounds, rate,
                                    ratios, pgmq_missing)
        finally:
            for side in sides.values():
                side.close()
    aq_lags, plain_lags = _latency(urls["aq"], urls["plain"], lat_n)
    p95, plain_p95 = _pct(aq_lags, 0.95), _pct(plain_lags, 0.95)
    entries.append(entry(
        f"aq_{label}_latency_p95", value=p95 * 1000, unit="ms", judged="value",
        baseline="the plain table's polling consumer (same backoff), alternating rounds",
        baseline_value=plain_p95 * 1000, target=50, direction="<=",
        headline=label == "pg", figures={
            "p50_ms": round(statistics.median(aq_lags) * 1000, 2),
            "max_ms": round(max(aq_lags) * 1000, 2),
            "plain_p50_ms": round(statistics.median(plain_lags) * 1000, 2),
            "messages": len(aq_lags), "send_rate_per_s": 100, "rounds": 4}))
    return entries


def _entries(label: str, op: str, tag: str, clients: int, batch: int, count: int,
             rounds: int, rate: dict[str, float], ratios: dict[str, list[float]],
             pgmq_missing: str | None) -> list[dict[str, Any]]:
    """An operation's entries: vs the plain table, vs PGMQ, and the absolute rate."""
    pg = label == "pg"
    figures = {"messages": count, "rounds": rounds, "clients": clients,
               "messages_per_transaction": batch,
               **{f"{k}_msg_per_s": round(v) for k, v in rate.items()},
               **{f"median_round_ratio_vs_{k}": round(statistics.median(v), 3)
                  for k, v in ratios.items() if v}}
    name = f"aq_{label}_{op}_{tag}"
    how = ("one autocommit statement per message" if batch == 1 else
           f"{batch} messages per transaction")
    out = [entry(name, value=rate["aq"], unit="msg/s", baseline_value=rate["plain"],
                 baseline=f"plain queue table, {how} (SKIP LOCKED on PostgreSQL), "
                          "alternating rounds", target=0.5 if pg else None,
                 direction=">=" if pg else None, figures=figures,
                 headline=pg and tag == "1c")]
    if pg and "pgmq" in rate:
        out.append(entry(f"{name}.vs_pgmq", value=rate["aq"], unit="msg/s",
                         baseline_value=rate["pgmq"],
                         baseline=f"PGMQ's pgmq.send / pgmq.pop, {how}, alternating rounds",
                         target=0.5, direction=">=", figures=figures,
                         headline=tag == "1c"))
    elif pg:
        out.append(skipped(f"{name}.vs_pgmq", pgmq_missing or "PGMQ did not run",
                           unit="msg/s", baseline="PGMQ", target=0.5, direction=">=",
                           value=rate["aq"]))
    if clients == 1:
        out.append(entry(f"{name}.rate", value=rate["aq"], unit="msg/s", judged="value",
                         baseline="absolute target, one client", target=2000,
                         direction=">=", figures=figures))
    return out


def run(spark: Any, size: str = "small") -> list[dict[str, Any]]:
    """Run both stores; ``spark`` is not used (no JVM on this path)."""
    from changeflow.testing.pg_cluster import PgCluster

    params = SIZES.get(size, SIZES["small"])
    root = Path(tempfile.mkdtemp(prefix="changeflow-aqbench-"))
    entries = []
    try:
        entries += _store_entries("sqlite", {"aq": f"sqlite:///{root}/aq.db",
                                             "plain": f"sqlite:///{root}/plain.db"},
                                  params["n"], params["latency"], None)
        pg = PgCluster().start()
        try:
            urls = {"aq": pg.createdb("aq").replace("postgresql://", "postgresql+psycopg://"),
                    "plain": pg.createdb("plain")}
            pgmq_url = pg.createdb("pgmq")
            missing = pgmq_setup(pgmq_url)
            if missing is None:
                urls["pgmq"] = pgmq_url
            entries += _store_entries("pg", urls, params["n"], params["latency"], missing)
        finally:
            pg.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return entries


if __name__ == "__main__":
    size = sys.argv[1] if len(sys.argv) > 1 else "small"
    for e in run(None, size):
        print(json.dumps(e, default=str))
