"""Status rows, flush with confirmation, purge, origins; the poll's partial index."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select, text, update

from changeflow.mcq import views
from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.model import McqError, UnknownListenerError
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import queue


def by(rows: list[dict], key: str) -> dict[str, dict]:
    return {r[key]: r for r in rows}


def test_counts_per_listener_and_per_table(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    mcq.log_update("LOGINS", pkey_string="b", bulk=True)
    mcq.log_update("PERSON", "Telephone", person_id=1)
    mcq.ack_change(mcq.get_changes("ADSI"))
    mcq.put_back(mcq.get_changes("ADSI"), delay=60)
    ls = by(views.listener_rows(mcq.store), "listener")
    assert (ls["ADSI"]["pending"], ls["ADSI"]["processed"], ls["ADSI"]["bulk"],
            ls["ADSI"]["held"], ls["ADSI"]["max_retries"]) == (1, 1, 1, 1, 1)
    assert (ls["LDAP"]["pending"], ls["LDAP"]["processed"]) == (3, 0)
    assert (ls["BEST"]["pending"], ls["BEST"]["interests"]) == (1, 1)
    assert ls["LDAP"]["oldest_pending"] <= utcnow()
    assert ls["ADSI"]["last_mark"] is not None  # get_changes marked it alive
    ts = by(views.table_rows(mcq.store), "table")
    assert (ts["LOGINS"]["pending"], ts["LOGINS"]["processed"]) == (3, 1)
    assert ts["PERSON/Telephone"]["pending"] == 2
    assert ts["PERSON/Telephone"]["listeners"] == "LDAP, BEST(*)"
    assert ts["PERSON/Status"]["pending"] == 0 and ts["PERSON/Status"]["first_logged"] is None


def test_in_flight_entries(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    mcq.get_changes("ADSI")
    assert by(views.listener_rows(mcq.store), "listener")["ADSI"]["in_flight"] == 1


def test_pending_entries_in_delivery_order(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="bulk", bulk=True)
    mcq.log_update("LOGINS", pkey_string="rt")
    assert [e["pkey_string"] for e in views.pending_entries(mcq.store, "ADSI")] == ["rt", "bulk"]
    with pytest.raises(UnknownListenerError):
        views.pending_entries(mcq.store, "nope")


def test_flush_needs_the_listeners_name(mcq: MetaChangeQueue) -> None:
    for i in range(3):
        mcq.log_update("LOGINS", pkey_string=str(i))
    with pytest.raises(McqError, match="confirm"):
        views.flush(mcq.store, "ADSI", confirm="yes")
    assert by(views.listener_rows(mcq.store), "listener")["ADSI"]["pending"] == 3
    assert views.flush(mcq.store, "ADSI", confirm="ADSI") == 3
    ls = by(views.listener_rows(mcq.store), "listener")
    assert ls["ADSI"]["pending"] == 0 and ls["LDAP"]["pending"] == 3


def test_purge_removes_old_processed_entries_only(mcq: MetaChangeQueue) -> None:
    for i in range(4):
        mcq.log_update("LOGINS", pkey_string=str(i))
    for _ in range(3):
        mcq.ack_change(mcq.get_changes("ADSI"))
    with mcq.store.begin() as conn:
        conn.execute(update(queue).where(queue.c.proc_date.isnot(None)).values(
            proc_date=utcnow() - dt.timedelta(days=40)))
    assert views.purge(mcq.store, 30 * 86400, batch=2) == 3
    with mcq.store.read() as conn:
        assert conn.execute(select(func.count()).select_from(queue)).scalar() == 5


def test_origins(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    mcq.get_changes("ADSI")
    rows = {(r["kind"], r["name"]): r for r in views.origin_rows(mcq.store)}
    assert "test_origins" in rows[("table", "LOGINS")]["call_stack"]
    assert "test_origins" in rows[("listener", "ADSI")]["call_stack"]
    assert rows[("listener", "LDAP")]["call_stack"] is None


def test_the_poll_uses_the_partial_pending_index(mcq: MetaChangeQueue) -> None:
    with mcq.store.read() as conn:
        ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = "
                                "'ix_meta_change_queue_pending'")).scalar()
        assert "WHERE queue_name IS NOT NULL" in ddl
        from changeflow.mcq.consume import _CLAIM

        for immediate in (False, True):  # both redelivery modes
            compiled = _CLAIM[False, immediate].compile(conn)
            params = {"listener": "ADSI", "now": utcnow(), "until": utcnow(), "worker": "w"}
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled),
                                        tuple(compiled.construct_params(params)[k] for k in
                                              compiled.positiontup)).all()
            details = " | ".join(str(r[-1]) for r in plan)
            assert "ix_meta_change_queue_pending" in details, details
            assert "SCAN meta_change_queue" not in details, details
