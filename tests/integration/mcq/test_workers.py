"""Two worker processes of one listener never get the same entry (PostgreSQL and SQLite);
holds, retries and the bulk lane behave the same on PostgreSQL."""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import time
from pathlib import Path

import pytest
from sqlalchemy import update

from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.model import AlreadyAckedError, BadChangeError, NotYourEntryError
from changeflow.state.schema import utcnow
from changeflow.state.schema_mcq import queue


def _work(url: str, listener: str, start: mp.synchronize.Event, out: str) -> None:
    from changeflow.state import StateStore

    mcq = MetaChangeQueue(StateStore(url))
    w = mcq.worker(listener)
    got = []
    start.wait(30)
    while True:
        rec = w.get_changes()
        if rec.is_end:
            break
        time.sleep(0.001)  # "processing": the other worker gets entries meanwhile
        w.ack_change(rec)
        got.append(rec.entry_number)
    Path(out).write_text("\n".join(map(str, got)))


def _two_workers(mcq: MetaChangeQueue, n: int, tmp_path: Path) -> None:
    mcq.add_listener("ADSI", frequency="5s", workers=2)  # redelivered after the claim only
    with mcq.batch() as b:
        for i in range(n):
            b.log_update("LOGINS", pkey_string=f"u{i}")
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    outs = [str(tmp_path / f"w{i}.txt") for i in range(2)]
    procs = [ctx.Process(target=_work, args=(mcq.store.url, "ADSI", start, o)) for o in outs]
    for p in procs:
        p.start()
    time.sleep(1.0)  # both imported and connected
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    got = [[int(x) for x in Path(o).read_text().split()] for o in outs]
    assert all(got), [len(g) for g in got]  # both did work
    assert not set(got[0]) & set(got[1])  # never the same entry
    assert len(got[0]) + len(got[1]) == n  # and nothing missed
    assert mcq.get_changes("ADSI").is_end


@pytest.mark.postgres
def test_two_worker_processes_on_postgres(pg_mcq: MetaChangeQueue, tmp_path: Path) -> None:
    _two_workers(pg_mcq, 1000, tmp_path)


def test_two_worker_processes_on_sqlite(lite_mcq: MetaChangeQueue, tmp_path: Path) -> None:
    _two_workers(lite_mcq, 300, tmp_path)


@pytest.mark.postgres
def test_holds_retries_and_bulk_lane_on_postgres(pg_mcq: MetaChangeQueue) -> None:
    mcq = pg_mcq
    mcq.log_update("LOGINS", pkey_string="bulk1", bulk=True)
    mcq.log_update("LOGINS", pkey_string="rt1")
    mcq.log_update("LOGINS", pkey_string="rt2")
    first = mcq.get_changes("ADSI")
    assert first.pkey_string == "rt1"
    with pytest.raises(BadChangeError, match="in the past"):
        mcq.put_back(first, utcnow() - dt.timedelta(hours=1))
    mcq.put_back(first, delay=3600)
    second = mcq.get_changes("ADSI")
    assert second.pkey_string == "rt2"
    other = mcq.worker("ADSI")
    with pytest.raises(NotYourEntryError):
        other.ack_change(second)
    mcq.ack_change(second)
    with pytest.raises(AlreadyAckedError):
        mcq.ack_change(second)
    third = mcq.get_changes("ADSI")  # rt1 is held: the bulk entry flows
    assert third.pkey_string == "bulk1" and third.bulk
    mcq.ack_change(third)
    assert mcq.get_changes("ADSI").is_end
    with mcq.store.begin() as conn:
        conn.execute(update(queue).where(queue.c.entry_number == first.entry_number).values(
            hold_until=utcnow() - dt.timedelta(seconds=1)))
    again = mcq.get_changes("ADSI")
    assert (again.pkey_string, again.retry_count) == ("rt1", 1)


def test_log_update_counts_its_entries_on_postgres(pg_mcq: MetaChangeQueue) -> None:
    """The first call (registry checked) and later ones (one autocommit statement) alike."""
    counts = [pg_mcq.log_update("PERSON", "Telephone", person_id=i) for i in range(3)]
    assert counts == [2, 2, 2]  # LDAP and BEST
    assert pg_mcq.log_update("LOGINS", pkey_string="finkej") == 2  # LDAP and ADSI
