"""get_changes / ack_change / put_back: order, holds, retries, the bulk lane, ownership."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select, update

from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.model import (
    AlreadyAckedError,
    BadChangeError,
    McqError,
    NotYourEntryError,
    UnknownListenerError,
)
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import queue


def drain(mcq: MetaChangeQueue, listener: str, tname: str | None = None) -> list[str | None]:
    got = []
    while not (rec := mcq.get_changes(listener, tname)).is_end:
        got.append(rec.pkey_string)
        mcq.ack_change(rec)
    return got


def test_changes_come_in_entry_order_then_the_end_record(mcq: MetaChangeQueue) -> None:
    for name in ("a", "b", "c"):
        mcq.log_update("LOGINS", pkey_string=name)
    assert drain(mcq, "ADSI") == ["a", "b", "c"]
    end = mcq.get_changes("ADSI")
    assert end.change_type is None and end.tname is None and end.is_end
    assert drain(mcq, "LDAP") == ["a", "b", "c"]  # each listener has its own entries


def test_ack_clears_queue_name_and_sets_proc_date(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    rec = mcq.get_changes("ADSI")
    mcq.ack_change(rec)
    with mcq.store.read() as conn:
        row = conn.execute(select(queue).where(queue.c.entry_number == rec.entry_number)).one()
    assert row.queue_name is None and row.proc_name == "ADSI" and row.proc_date is not None


def test_a_table_filter(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    mcq.log_update("PERSON", "Telephone", person_id=1, pkey_string="p")
    mcq.log_update("LOGINS", pkey_string="b")
    assert drain(mcq, "LDAP", "PERSON") == ["p"]
    assert drain(mcq, "LDAP") == ["a", "b"]


def test_held_entries_are_skipped_until_their_time(mcq: MetaChangeQueue) -> None:
    for name in ("a", "b"):
        mcq.log_update("LOGINS", pkey_string=name)
    with mcq.store.begin() as conn:
        conn.execute(update(queue).where(queue.c.pkey_string == "a").values(
            hold_until=utcnow() + dt.timedelta(hours=1)))
    assert drain(mcq, "ADSI") == ["b"]
    with mcq.store.begin() as conn:
        conn.execute(update(queue).where(queue.c.pkey_string == "a").values(
            hold_until=utcnow() - dt.timedelta(seconds=1)))
    assert drain(mcq, "ADSI") == ["a"]


def test_put_back_raises_retry_count_and_holds(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    rec = mcq.get_changes("ADSI")
    until = mcq.put_back(rec, delay=3600)
    assert until is not None and until > utcnow() + dt.timedelta(minutes=59)
    assert mcq.get_changes("ADSI").is_end
    with mcq.store.begin() as conn:
        conn.execute(update(queue).where(queue.c.entry_number == rec.entry_number).values(
            hold_until=utcnow() - dt.timedelta(seconds=1)))
    again = mcq.get_changes("ADSI")
    assert again.entry_number == rec.entry_number and again.retry_count == 1
    mcq.put_back(again)  # no hold: at once
    third = mcq.get_changes("ADSI")
    assert third.retry_count == 2 and third.entry_number == rec.entry_number


def test_a_put_back_into_the_past_is_refused(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    rec = mcq.get_changes("ADSI")
    with pytest.raises(BadChangeError, match="in the past"):
        mcq.put_back(rec, utcnow() - dt.timedelta(minutes=5))
    with pytest.raises(BadChangeError, match="negative"):
        mcq.put_back(rec, delay=-1)
    with mcq.store.read() as conn:
        row = conn.execute(select(queue).where(queue.c.entry_number == rec.entry_number)).one()
    assert row.retry_count == 0 and row.claimed_by == rec.claimed_by
    mcq.ack_change(rec)  # still the caller's


def test_ack_of_another_listeners_entry_is_refused(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    ldap = mcq.get_changes("LDAP")
    adsi_worker = mcq.worker("ADSI")
    with pytest.raises(NotYourEntryError, match="belongs to listener 'LDAP'"):
        adsi_worker.ack_change(ldap)
    forged = ldap.with_(proc_name="ADSI")
    adsi_worker.get_changes()
    with pytest.raises(NotYourEntryError, match="belongs to listener 'LDAP'"):
        adsi_worker.ack_change(forged)
    mcq.ack_change(ldap)


def test_ack_of_another_workers_entry_and_double_ack(mcq: MetaChangeQueue) -> None:
    mcq.add_listener("ADSI", frequency="5s", workers=2)  # claims hold for the others
    mcq.log_update("LOGINS", pkey_string="a")
    w1, w2 = mcq.worker("ADSI"), mcq.worker("ADSI")
    rec = w1.get_changes()
    assert w2.get_changes().is_end  # claimed by w1
    with pytest.raises(NotYourEntryError, match=f"held by {w1.id}"):
        w2.ack_change(rec)
    w1.ack_change(rec)
    with pytest.raises(AlreadyAckedError, match="already processed"):
        w1.ack_change(rec)
    with pytest.raises(AlreadyAckedError):
        w1.put_back(rec)
    with pytest.raises(McqError, match="end-of-queue"):
        w1.ack_change(w1.get_changes())


def test_a_claim_that_times_out_is_handed_out_again(mcq: MetaChangeQueue) -> None:
    mcq.add_listener("ADSI", frequency="5s", claim_timeout=1)
    mcq.log_update("LOGINS", pkey_string="a")
    w1, w2 = mcq.worker("ADSI"), mcq.worker("ADSI")
    rec = w1.get_changes()
    with mcq.store.begin() as conn:  # a second later
        conn.execute(update(queue).where(queue.c.entry_number == rec.entry_number).values(
            hold_until=utcnow() - dt.timedelta(milliseconds=1)))
    again = w2.get_changes()
    assert again.entry_number == rec.entry_number
    with pytest.raises(NotYourEntryError, match="handed out again"):
        w1.ack_change(rec)
    w2.ack_change(again)


def test_bulk_entries_flow_only_when_no_realtime_entry_is_pending(mcq: MetaChangeQueue) -> None:
    for i in range(3):
        mcq.log_update("LOGINS", pkey_string=f"bulk{i}", bulk=True)
    mcq.log_update("LOGINS", pkey_string="rt1")
    rec = mcq.get_changes("ADSI")
    assert rec.pkey_string == "rt1" and not rec.bulk
    mcq.ack_change(rec)
    first_bulk = mcq.get_changes("ADSI")
    assert first_bulk.pkey_string == "bulk0" and first_bulk.bulk
    mcq.ack_change(first_bulk)
    mcq.log_update("LOGINS", pkey_string="rt2")  # arrives during the backfill: goes first
    assert drain(mcq, "ADSI") == ["rt2", "bulk1", "bulk2"]


def test_a_held_realtime_entry_lets_bulk_flow(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="rt")
    mcq.log_update("LOGINS", pkey_string="bulk", bulk=True)
    mcq.put_back(mcq.get_changes("ADSI"), delay=600)
    assert drain(mcq, "ADSI") == ["bulk"]


def test_unknown_listener(mcq: MetaChangeQueue) -> None:
    with pytest.raises(UnknownListenerError, match="'Applix'.*registered: ADSI, BEST, LDAP"):
        mcq.get_changes("Applix")


def test_ack_without_a_get_in_this_caller(mcq: MetaChangeQueue, store: object) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    rec = mcq.get_changes("ADSI")
    other = MetaChangeQueue(mcq.store)
    with pytest.raises(NotYourEntryError, match="never got changes"):
        other.ack_change(rec)
