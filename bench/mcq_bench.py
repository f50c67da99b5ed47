"""Benchmark: the Meta Change Queue on the embedded store (SQLite) and on PostgreSQL.

Figures (each a ratio against a baseline measured in the same run):

1. **log_update throughput** with the seed's deployment: 7 listeners (Table 5) and 16
   (table, subtype) pairs (Table 2), each listener interested in some of them (about
   3 entries per call). One log call per transaction, the normal case. Baseline: the
   same entries written as plain ``INSERT``s of the same rows, one transaction per
   call, through the raw driver (sqlite3 / psycopg), into a table with the same columns
   and no index: the floor of writing those rows.
2. **get_changes + ack_change per second** for one listener with 1 million pending
   entries (``--size small``: 100,000). Baseline: a plain PostgreSQL table polled with
   ``SELECT ... ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`` and ``DELETE`` in one
   transaction per entry (raw psycopg), with as many rows. Target >= 0.5 on PostgreSQL.
3. **An empty poll as processed entries pile up**: the time of ``get_changes`` on an
   empty queue with 10 million processed entries (``small``: 1 million) over its time
   with none, same store. Target <= 1.5 (the partial pending index).
4. **Trigger overhead** (PostgreSQL): single-row ``UPDATE``s of a source table with the
   log trigger installed (direct mode, 2 interested listeners) over the same updates
   without it.

Run it alone with ``python -m bench.mcq_bench [small|full]``.
"""

from __future__ import annotations

import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import update

from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.store import sqlalchemy_url
from changeflow.state import StateStore
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import queue
from changeflow.testing.pg_cluster import PgCluster

SCALES = {"small": {"pending": 100_000, "processed": 1_000_000, "logs": 2_000, "polls": 3_000},
          "full": {"pending": 1_000_000, "processed": 10_000_000, "logs": 5_000,
                   "polls": 10_000}}
PAIRS = [("BUILDINGS", ""), ("DEPARTMENT", ""), ("GROUPS", ""), ("GROUP_MEM", ""),
         ("INSITE_FLOOR", ""), ("INSITE_SITE", ""), ("LOCATIONS", ""), ("LOGINS", ""),
         ("PERSON", "Address"), ("PERSON", "Dir_Orgn"), ("PERSON", "Merge"),
         ("PERSON", "PEOPLE"), ("PERSON", "Status"), ("PERSON", "Telephone"),
         ("PERSON", "UDI"), ("UNITY_VMAIL", "")]
LISTENERS = {"ADSI": "5s", "Applix": "daily", "BEST": "daily", "CMMS": "daily",
             "Insite": "daily", "LDAP": "5s", "Unity": "3min"}
COLS = ("tname", "subtype", "rrowid", "change_type", "person_id", "pkey_string", "pkey_number",
        "aux_string", "entry_date", "lane", "queue_name", "proc_name")


def deployment(store: StateStore) -> MetaChangeQueue:
    """The seed's 16 pairs and 7 listeners; listener i wants every pair j with (i+j)%7 < 3."""
    from changeflow.mcq import registry

    with store.begin() as conn:
        for t, s in PAIRS:
            registry.add_table(store, t, s, conn=conn)
        for i, (name, freq) in enumerate(LISTENERS.items()):
            registry.add_listener(store, name, frequency=freq, conn=conn)
            for j, (t, s) in enumerate(PAIRS):
                if (i + j) % 7 < 3:
                    registry.add_interest(store, name, t, s, conn=conn)
    return MetaChangeQueue(store)


def _log_rate(mcq: MetaChangeQueue, n: int) -> tuple[float, int]:
    entries = 0
    start = time.perf_counter()
    for i in range(n):
        t, s = PAIRS[i % len(PAIRS)]
        entries += mcq.log_update(t, s or None, person_id=i, pkey_string=f"k{i}",
                                  aux_string="bench")
    return entries / (time.perf_counter() - start), entries


def _fanout(store: StateStore, n: int) -> list[list[tuple[Any, ...]]]:
    """The rows each of ``n`` log calls writes (for the plain-insert baseline)."""
    from changeflow.mcq.registry import list_interests

    who: dict[tuple[str, str], list[str]] = {}
    for r in list_interests(store):
        who.setdefault((r["tname"], r["subtype"]), []).append(r["proc_name"])
    calls = []
    for i in range(n):
        t, s = PAIRS[i % len(PAIRS)]
        calls.append([(t, s, None, "C", i, f"k{i}", None, "bench", "2024-01-01 00:00:00", 0,
                       p, p) for p in who.get((t, s), [])])
    return calls


PLAIN = ("CREATE TABLE plain_log (tname varchar(64), subtype varchar(64), rrowid varchar(255), "
         "change_type varchar(1), person_id bigint, pkey_string varchar(255), pkey_number "
         "bigint, aux_string varchar(255), entry_date timestamp, lane smallint, "
         "queue_name varchar(64), proc_name varchar(64))")


def _plain_sqlite(path: str, calls: list[list[tuple[Any, ...]]]) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(PLAIN)
    sql = f"INSERT INTO plain_log VALUES ({', '.join('?' * len(COLS))})"
    n = 0
    start = time.perf_counter()
    for rows in calls:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, rows)
        conn.execute("COMMIT")
        n += len(rows)
    rate = n / (time.perf_counter() - start)
    conn.close()
    return rate


def _plain_pg(url: str, calls: list[list[tuple[Any, ...]]]) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PLAIN)
        sql = f"INSERT INTO plain_log VALUES ({', '.join(['%s'] * len(COLS))})"
        n = 0
        start = time.perf_counter()
        for rows in calls:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(sql, rows)
            n += len(rows)
        return n / (time.perf_counter() - start)


def _fill(store: StateStore, listener: str, n: int, pending: bool) -> None:
    """``n`` entries of one listener, pending or processed, written by SQL in the store."""
    from sqlalchemy import text

    queue_name = f"'{listener}'" if pending else "NULL"
    proc_date = "NULL" if pending else "CURRENT_TIMESTAMP"
    if store.dialect == "postgresql":
        src = f"FROM generate_series(1, {n}) AS g(x)"
        cte = ""
    else:
        src = "FROM c"
        cte = f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT {n}) "
    stmt = (f"{cte}INSERT INTO meta_change_queue (tname, subtype, change_type, person_id, "
            f"entry_date, proc_date, queue_name, proc_name, retry_count, lane) "
            f"SELECT 'PERSON', 'PEOPLE', 'C', x, CURRENT_TIMESTAMP, {proc_date}, {queue_name}, "
            f"'{listener}', 0, 0 {src}")
    with store.begin() as conn:
        conn.execute(text(stmt))
    if store.dialect == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(text("VACUUM ANALYZE meta_change_queue"))
    else:
        with store.begin() as conn:
            conn.execute(text("ANALYZE"))


def _consume_rate(mcq: MetaChangeQueue, listener: str, ops: int) -> float:
    w = mcq.worker(listener)
    start = time.perf_counter()
    for _ in range(ops):
        rec = w.get_changes()
        w.ack_change(rec)
    return ops / (time.perf_counter() - start)


def _skip_locked_rate(url: str, pending: int, ops: int) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE plain_q (id bigserial PRIMARY KEY, person_id bigint, "
                     "created timestamptz NOT NULL DEFAULT now())")
        conn.execute(f"INSERT INTO plain_q (person_id) SELECT g FROM generate_series(1, "
                     f"{pending}) g")
        conn.execute("VACUUM ANALYZE plain_q")
        start = time.perf_counter()
        for _ in range(ops):
            with conn.transaction():
                row = conn.execute("SELECT id, person_id FROM plain_q ORDER BY id LIMIT 1 "
                                   "FOR UPDATE SKIP LOCKED").fetchone()
                assert row is not None
                conn.execute("DELETE FROM plain_q WHERE id = %s", (row[0],))
        return ops / (time.perf_counter() - start)


def _empty_poll(mcq: MetaChangeQueue, listener: str, polls: int) -> float:
    """The median time of a ``get_changes`` on an empty queue (seconds)."""
    w = mcq.worker(listener)
    for _ in range(50):
        assert w.get_changes().is_end
    times = []
    for _ in range(polls):
        t = time.perf_counter()
        w.get_changes()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _entry(name: str, value: float, unit: str, baseline: float, target: str | None,
           *, time_ratio: bool = False, **extra: Any) -> dict[str, Any]:
    return {"name": name, "figures": {unit: round(value, 6), "baseline": round(baseline, 6),
                                      **extra},
            "baseline": round(baseline, 6),
            "ratio": round(value / baseline, 3) if baseline else None, "target": target,
            **({"note": "time ratio (lower is better)"} if time_ratio else {})}


def _all_processed(store: StateStore) -> None:
    with store.begin() as conn:
        conn.execute(update(queue).where(queue.c.queue_name.isnot(None)).values(
            queue_name=None, proc_date=utcnow()))


def _store_suite(label: str, url: str, work: Path, p: dict[str, int],
                 plain_url: str | None, skip_locked: float, size: str) -> list[dict[str, Any]]:
    store = StateStore(url)
    mcq = deployment(store)
    calls = _fanout(store, p["logs"])
    rate, entries = _log_rate(mcq, p["logs"])
    base = (_plain_pg(plain_url, calls) if plain_url else
            _plain_sqlite(str(work / f"plain-{label}.db"), calls))
    out = [_entry(f"mcq log_update entries/s ({label})", rate, "entries_per_s", base, None,
                  calls=p["logs"], entries=entries, baseline_what="plain INSERT of the rows")]
    _all_processed(store)  # the logged entries are another figure's: the queues start empty
    empty0 = _empty_poll(mcq, "Unity", p["polls"])
    _fill(store, "BEST", p["pending"], pending=True)
    ops = max(2000, p["polls"])
    rate = _consume_rate(mcq, "BEST", ops)
    out.append(_entry(f"mcq get+ack/s, {p['pending']:,} pending ({label})", rate, "per_s",
                      skip_locked, ">= 0.5 (PostgreSQL)", ops=ops,
                      baseline_what="plain PostgreSQL table, FOR UPDATE SKIP LOCKED"))
    _all_processed(store)  # everything processed: the queues are empty again
    _fill(store, "Unity", p["processed"], pending=False)
    emptyn = _empty_poll(mcq, "Unity", p["polls"])
    out.append(_entry(f"mcq empty poll, {p['processed']:,} processed vs 0 ({label})", emptyn,
                      "seconds", empty0, "<= 1.5", time_ratio=True, processed=p["processed"],
                      size_note=("--size small uses 1,000,000 processed entries, not 10 "
                                 "million") if size == "small" else None))
    return out


def _trigger_overhead(pg: PgCluster, n: int) -> dict[str, Any]:
    import psycopg

    from changeflow.mcq import triggers

    url = pg.createdb("trig")
    store = StateStore(sqlalchemy_url(url))
    mcq = MetaChangeQueue(store)
    mcq.add_table("PERSON", "Telephone")
    for name in ("LDAP", "ADSI"):
        mcq.add_listener(name)
        mcq.add_interest(name, "PERSON", "Telephone")
    pg.sql("trig", "CREATE TABLE phones (id int PRIMARY KEY, person_id int, phone text); "
           f"INSERT INTO phones SELECT g, g, 'x' FROM generate_series(1, {n}) g;")

    def updates(tag: str) -> float:
        with psycopg.connect(url, autocommit=True) as conn:
            start = time.perf_counter()
            for i in range(1, n + 1):
                conn.execute("UPDATE phones SET phone = %s WHERE id = %s", (f"{tag}{i}", i))
            return n / (time.perf_counter() - start)

    plain = updates("a")
    triggers.install(store, url, triggers.TriggerSpec(table="phones", tname="PERSON",
                                                      subtype="Telephone",
                                                      person_id="person_id"))
    with_trigger = updates("b")
    return _entry("mcq PostgreSQL UPDATE with log trigger (per s)", with_trigger, "per_s",
                  plain, None, updates=n, entries_per_update=2,
                  baseline_what="the same UPDATEs without the trigger")


def run(spark: Any = None, scale: str = "small") -> list[dict[str, Any]]:
    """Run the benchmark and return its entries (``spark`` is not needed)."""
    p = SCALES.get(scale, SCALES["small"])
    size = "full" if scale == "full" else "small"
    work = Path(tempfile.mkdtemp(prefix="changeflow-mcqbench-"))
    pg = PgCluster().start()
    try:
        base_url = pg.createdb("plain")
        ops = max(2000, p["polls"])
        skip_locked = _skip_locked_rate(base_url, p["pending"], ops)
        out = _store_suite("SQLite", f"sqlite:///{work}/state.db", work, p, None, skip_locked,
                           size)
        out += _store_suite("PostgreSQL", sqlalchemy_url(pg.createdb("mcq")), work, p,
                            base_url, skip_locked, size)
        out.append(_trigger_overhead(pg, p["logs"]))
        return out
    finally:
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import json

    print(json.dumps(run(None, sys.argv[1] if len(sys.argv) > 1 else "small"), indent=2))
