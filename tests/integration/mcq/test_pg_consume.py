"""get_changes and ack_change on PostgreSQL, where they run on the driver's connection
(prepared statements, no SQLAlchemy per call): the records, the table filter, and a
connection the server drops."""

from __future__ import annotations

import datetime as dt
import gc
import threading

import psycopg
import pytest
from sqlalchemy import select

from changeflow.errors import StateStoreError, is_transient
from changeflow.mcq import conn as mcq_conn
from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.store import libpq_url
from changeflow.state.schema_mcq import queue

pytestmark = pytest.mark.postgres


def test_records_and_the_table_filter(pg_mcq: MetaChangeQueue) -> None:
    mcq = pg_mcq
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    mcq.log_update("LOGINS", pkey_string="finkej")
    mcq.log_insert("PERSON", "Telephone", rrowid="AAAx1", person_id=1001, pkey_string="k",
                   pkey_number=7, aux_string="campus")
    w = mcq.worker("LDAP")
    for i in range(7):  # past psycopg's prepare threshold (5): prepared statements answer
        rec = w.get_changes("person")  # the filter is case-insensitive, like the log calls
        assert (rec.tname, rec.subtype, rec.rrowid, rec.change_type) == (
            "PERSON", "Telephone", "AAAx1", "I")
        assert (rec.person_id, rec.pkey_string, rec.pkey_number, rec.aux_string) == (
            1001, "k", 7, "campus")
        assert rec.entry_date is not None and rec.entry_date > before
        assert rec.entry_date.tzinfo is not None
        assert (rec.queue_name, rec.claimed_by, rec.retry_count, rec.bulk) == (
            "LDAP", w.id, i, False)
        w.put_back(rec)  # available again at once: the next get returns it
    rec = w.get_changes("PERSON")
    assert rec.retry_count == 7
    w.ack_change(rec)
    assert w.get_changes("PERSON").is_end
    other = w.get_changes()
    assert (other.tname, other.pkey_string) == ("LOGINS", "finkej")
    w.ack_change(other)
    assert w.get_changes().is_end
    with mcq.store.read() as conn:
        rows = conn.execute(select(queue).where(queue.c.proc_name == "LDAP")).all()
    assert len(rows) == 2
    assert all(r.queue_name is None and r.proc_date is not None and r.hold_until is None
               for r in rows)
    assert {r.retry_count for r in rows} == {0, 7}


def _kill_backends(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()
    assert killed is not None
    return int(killed[0])


def test_a_dropped_connection_is_transient_and_the_next_call_reconnects(
        pg_mcq: MetaChangeQueue) -> None:
    mcq = pg_mcq
    for i in range(3):
        mcq.log_update("LOGINS", pkey_string=f"u{i}")
    w = mcq.worker("ADSI")
    first = w.get_changes()
    assert _kill_backends(libpq_url(mcq.store.url)) >= 1
    with pytest.raises(StateStoreError) as err:
        w.ack_change(first)
    assert is_transient(err.value)
    w.ack_change(first)  # a new connection; the entry was still this worker's
    assert _kill_backends(libpq_url(mcq.store.url)) >= 1
    with pytest.raises(StateStoreError):
        w.get_changes()
    for want in ("u1", "u2"):  # what the failed call may have claimed comes back at once
        rec = w.get_changes()
        assert rec.pkey_string == want
        w.ack_change(rec)
    assert w.get_changes().is_end


def test_held_connections_plan_once_and_never_return_to_the_pool(
        pg_mcq: MetaChangeQueue) -> None:
    """The hot statements' session setting stays on the MCQ's own connections: one left
    behind by a finished thread is closed, not handed to the store's other users."""
    mcq = pg_mcq
    mcq.log_update("LOGINS", pkey_string="a")
    seen: list[str] = []

    def work() -> None:
        w = mcq.worker("ADSI")
        w.ack_change(w.get_changes())
        with mcq_conn.driver(mcq.store) as raw:
            seen.append(raw.execute("SHOW plan_cache_mode").fetchone()[0])

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    gc.collect()
    assert seen == ["force_generic_plan"]
    engine = mcq.store.engine
    conns = [engine.connect() for _ in range(engine.pool.checkedin() + 1)]  # every pooled one
    try:
        assert [c.exec_driver_sql("SHOW plan_cache_mode").scalar() for c in conns] == (
            ["auto"] * len(conns))
    finally:
        for c in conns:
            c.close()
