"""Benchmark: the Meta Change Queue on the embedded store (SQLite) and on PostgreSQL.

Figures (each a ratio against a baseline measured in the same run):

1. **log_update throughput** with the seed's deployment: 7 listeners (Table 5) and 16
   (table, subtype) pairs (Table 2), each listener interested in some of them (about
   3 entries per call). One log call per transaction, the normal case. Baseline: the
   same entries written as plain ``INSERT``s of the same rows, one transaction per
   call, through the raw driver (sqlite3 / psycopg), into a table with the same columns
   and no index: the floor of writing those rows.
2. **get_changes + ack_change per second** for one listener with 1 million pending
   entries (``--size small``: 100,000). Baseline: the same claim + ack protocol on a
   plain PostgreSQL table of as many rows, in two autocommit statements (raw psycopg):
   ``UPDATE ... SET claimed = now() WHERE id = (SELECT id ... WHERE claimed IS NULL
   ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING`` to claim, ``DELETE`` by id
   to ack (a partial index on the unclaimed ids, as the MCQ's pending index). Target
   >= 0.5 on PostgreSQL.
   The two run in alternating rounds of a few hundred operations (each side's rate is
   its operations over the sum of its rounds' times), so load from other work on the
   machine falls on both sides alike instead of on whichever ran during it.
3. **An empty poll as processed entries pile up**: the time of ``get_changes`` on an
   empty queue with 10 million processed entries (``small``: 1 million) over its time
   on a store of the same kind, same registrations, without any entries (the medians
   of alternating rounds of 100 polls). Target <= 1.5 (the partial pending index).
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

from bench.results import entry
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


def _skip_locked_table(url: str, table: str, pending: int) -> None:
    """The baseline's queue: a plain table of ``pending`` rows with a bigserial key."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, person_id bigint, "
                     "created timestamptz NOT NULL DEFAULT now(), claimed timestamptz)")
        conn.execute(f"INSERT INTO {table} (person_id) SELECT g FROM generate_series(1, "
                     f"{pending}) g")
        conn.execute(f"CREATE INDEX {table}_unclaimed ON {table} (id) WHERE claimed IS NULL")
        conn.execute(f"VACUUM ANALYZE {table}")


def _skip_locked_round(conn: Any, table: str, n: int) -> float:
    """``n`` claim + ack of the baseline, two autocommit statements each (seconds)."""
    claim = (f"UPDATE {table} SET claimed = now() WHERE id = (SELECT id FROM {table} "
             "WHERE claimed IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
             "RETURNING id, person_id")
    ack = f"DELETE FROM {table} WHERE id = %s"
    start = time.perf_counter()
    for _ in range(n):
        row = conn.execute(claim).fetchone()
        assert row is not None
        conn.execute(ack, (row[0],))
    return time.perf_counter() - start


def _mcq_round(w: Any, n: int) -> float:
    """``n`` get_changes + ack_change of one worker (seconds taken)."""
    start = time.perf_counter()
    for _ in range(n):
        rec = w.get_changes()
        assert not rec.is_end
        w.ack_change(rec)
    return time.perf_counter() - start


def _consume_vs_skip_locked(mcq: MetaChangeQueue, listener: str, url: str, table: str,
                            ops: int, round_ops: int = 250) -> tuple[float, float]:
    """get+ack/s of the MCQ and of the plain SKIP LOCKED table, in alternating rounds."""
    import psycopg

    w = mcq.worker(listener)
    spent = {"mcq": 0.0, "plain": 0.0}
    with psycopg.connect(url, autocommit=True) as conn:
        _mcq_round(w, 20)  # first call: registry read, monitor mark
        _skip_locked_round(conn, table, 20)
        done = 0
        while done < ops:
            n = min(round_ops, ops - done)
            spent["mcq"] += _mcq_round(w, n)
            spent["plain"] += _skip_locked_round(conn, table, n)
            done += n
    return ops / spent["mcq"], ops / spent["plain"]


def _poll_round(w: Any, n: int) -> list[float]:
    """The times of ``n`` ``get_changes`` of a worker on an empty queue (seconds)."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        rec = w.get_changes()
        times.append(time.perf_counter() - t)
        assert rec.is_end
    return times


def _empty_polls(busy: MetaChangeQueue, idle: MetaChangeQueue, listener: str, polls: int,
                 round_polls: int = 100) -> tuple[float, float]:
    """Median ``get_changes`` time on an empty queue of ``busy`` (processed entries piled
    up) and of ``idle`` (a store without any), in alternating rounds (seconds)."""
    workers = {"busy": busy.worker(listener), "idle": idle.worker(listener)}
    times: dict[str, list[float]] = {"busy": [], "idle": []}
    for w in workers.values():
        _poll_round(w, 50)  # first call: registry read, monitor mark
    done = 0
    while done < polls:
        n = min(round_polls, polls - done)
        for key, w in workers.items():
            times[key] += _poll_round(w, n)
        done += n
    return statistics.median(times["busy"]), statistics.median(times["idle"])


def _entry(name: str, value: float, unit: str, baseline: float, target: float | None,
           what: str, *, direction: str = ">=", headline: bool = False,
           **extra: Any) -> dict[str, Any]:
    return entry(name, value=value, unit=unit, baseline=what, baseline_value=baseline,
                 target=target, direction=direction if target is not None else None,
                 headline=headline, figures=extra)


def _all_processed(store: StateStore) -> None:
    with store.begin() as conn:
        conn.execute(update(queue).where(queue.c.queue_name.isnot(None)).values(
            queue_name=None, proc_date=utcnow()))


_STARTED = time.monotonic()


def _progress(label: str, what: str) -> None:
    """A progress line on stderr (a full-size run takes many minutes)."""
    print(f"[mcq bench +{time.monotonic() - _STARTED:.0f}s] {label}: {what}", file=sys.stderr,
          flush=True)


def _store_suite(label: str, urls: tuple[str, str], work: Path, p: dict[str, int],
                 plain_url: str | None, skip_url: str, size: str) -> list[dict[str, Any]]:
    """The figures of one kind of store; ``urls``: the store measured, and one that stays
    without entries (the empty poll's baseline)."""
    store = StateStore(urls[0])
    mcq = deployment(store)
    calls = _fanout(store, p["logs"])
    _progress(label, f"{p['logs']:,} log_update calls and the plain-INSERT baseline")
    rate, entries = _log_rate(mcq, p["logs"])
    base = (_plain_pg(plain_url, calls) if plain_url else
            _plain_sqlite(str(work / f"plain-{label}.db"), calls))
    out = [_entry(f"mcq log_update entries/s ({label})", rate, "entries/s", base, None,
                  "plain INSERT of the same rows, one transaction per call",
                  calls=p["logs"], entries=entries)]
    _all_processed(store)  # the logged entries are another figure's: the queues start empty
    _progress(label, f"filling {p['pending']:,} pending entries and the baseline table")
    _fill(store, "BEST", p["pending"], pending=True)
    table = f"plain_q_{label.lower()}"
    _skip_locked_table(skip_url, table, p["pending"])
    ops = max(2000, p["polls"])
    _progress(label, f"{ops:,} get+ack, alternating with the SKIP LOCKED baseline")
    rate, skip_locked = _consume_vs_skip_locked(mcq, "BEST", skip_url, table, ops)
    pg = label == "PostgreSQL"
    out.append(_entry(f"mcq get+ack/s, {p['pending']:,} pending ({label})", rate, "ops/s",
                      skip_locked, 0.5 if pg else None,
                      "the same claim + ack on a plain PostgreSQL table of as many rows, two "
                      "autocommit statements (UPDATE ... FOR UPDATE SKIP LOCKED RETURNING; "
                      "DELETE), alternating rounds", headline=pg, ops=ops))
    _all_processed(store)  # everything processed: the queues are empty again
    _progress(label, f"filling {p['processed']:,} processed entries")
    _fill(store, "Unity", p["processed"], pending=False)
    _progress(label, f"{p['polls']:,} empty polls each, alternating with an idle store")
    emptyn, empty0 = _empty_polls(mcq, deployment(StateStore(urls[1])), "Unity", p["polls"])
    out.append(_entry(f"mcq empty poll, {p['processed']:,} processed vs 0 ({label})", emptyn,
                      "s", empty0, 1.5, "the same poll of a store without processed entries, "
                      "alternating rounds in the same run (medians)", direction="<=",
                      processed=p["processed"],
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
    return _entry("mcq PostgreSQL UPDATE with log trigger (per s)", with_trigger, "updates/s",
                  plain, None, "the same UPDATEs without the trigger", updates=n,
                  entries_per_update=2)


def run(spark: Any = None, scale: str = "small") -> list[dict[str, Any]]:
    """Run the benchmark and return its entries (``spark`` is not needed)."""
    p = SCALES.get(scale, SCALES["small"])
    size = "full" if scale == "full" else "small"
    work = Path(tempfile.mkdtemp(prefix="changeflow-mcqbench-"))
    pg = PgCluster().start()
    try:
        base_url = pg.createdb("plain")
        lite = (f"sqlite:///{work}/state.db", f"sqlite:///{work}/idle.db")
        out = _store_suite("SQLite", lite, work, p, None, base_url, size)
        on_pg = (sqlalchemy_url(pg.createdb("mcq")), sqlalchemy_url(pg.createdb("mcqidle")))
        out += _store_suite("PostgreSQL", on_pg, work, p, base_url, base_url, size)
        out.append(_trigger_overhead(pg, p["logs"]))
        return out
    finally:
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import json

    print(json.dumps(run(None, sys.argv[1] if len(sys.argv) > 1 else "small"), indent=2))
