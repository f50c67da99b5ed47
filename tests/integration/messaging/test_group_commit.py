"""Threads of one process writing to one SQLite file: grouped commits (``wire.write``).

Each test runs real threads on a real SQLite file. The group is made deterministic
by holding the file's write turn while the threads submit, so they all join one batch.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from changeflow.messaging import connect, wire
from changeflow.state import StateStore

from .conftest import make_queue


def _table(path: Path) -> StateStore:
    store = StateStore(f"sqlite:///{path}")
    with wire.transaction(store) as cursor:
        cursor.execute("CREATE TABLE t (x INTEGER)")
    return store


def _grouped(store: StateStore, jobs: list[Any]) -> list[Any]:
    """Run ``jobs`` from one thread each while the turn is held, so they form one batch;
    each thread's result or exception."""
    committer = wire._committers.get(store.engine) or wire._Committer()
    wire._committers[store.engine] = committer
    out: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            out[i] = wire.write(store, jobs[i])
        except Exception as exc:  # noqa: BLE001  (the test looks at it)
            out[i] = exc

    committer.turn.acquire()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    try:
        for t in threads:
            t.start()
        while True:  # every thread has joined the open batch
            with committer.lock:
                if committer.open is not None and len(committer.open.jobs) == len(jobs):
                    break
    finally:
        committer.turn.release()
    for t in threads:
        t.join(timeout=30)
    return out


def test_a_batch_commits_every_job_once_and_undoes_only_the_failing_one(
        tmp_path: Path) -> None:
    store = _table(tmp_path / "g.db")
    runs: list[tuple[Any, int]] = []

    def insert(x: int, fail: bool = False) -> Any:
        def job(cursor: Any) -> int:
            runs.append((cursor, x))
            cursor.execute("INSERT INTO t VALUES (?)", (x,))
            if fail:
                raise ValueError(f"job {x} failed")
            return x
        return job

    out = _grouped(store, [insert(1), insert(2, fail=True), insert(3), insert(4)])
    # the run without savepoints stopped at job 2; the batch ran again, job by job
    last = runs[-4:]
    assert sorted(x for _, x in last) == [1, 2, 3, 4]
    assert len({id(c) for c, _ in last}) == 1, "the jobs did not share one transaction"
    assert out[0] == 1 and out[2] == 3 and out[3] == 4
    assert isinstance(out[1], ValueError) and "job 2 failed" in str(out[1])
    with sqlite3.connect(tmp_path / "g.db") as raw:
        assert sorted(r[0] for r in raw.execute("SELECT x FROM t")) == [1, 3, 4]


def test_a_batch_without_failures_runs_each_job_once_in_one_transaction(
        tmp_path: Path) -> None:
    store = _table(tmp_path / "once.db")
    runs: list[tuple[Any, int]] = []
    statements: list[str] = []

    def insert(x: int) -> Any:
        def job(cursor: Any) -> int:
            runs.append((cursor, x))
            cursor.execute("INSERT INTO t VALUES (?)", (x,))
            return x
        return job

    committer = wire._committers.get(store.engine) or wire._Committer()
    wire._committers[store.engine] = committer
    with store.engine.connect() as c:  # the pool's connection: trace what it runs
        c.connection.driver_connection.set_trace_callback(statements.append)
    for spare in wire._spares_of(store.engine).free:  # and the hot path's spare ones
        spare.driver_connection.set_trace_callback(statements.append)
    out = _grouped(store, [insert(x) for x in range(1, 6)])
    assert out == [1, 2, 3, 4, 5]
    assert sorted(x for _, x in runs) == [1, 2, 3, 4, 5], "a job ran more than once"
    assert len({id(c) for c, _ in runs}) == 1
    assert [s for s in statements if s.startswith("INSERT")], "the trace saw nothing"
    assert not [s for s in statements if "SAVEPOINT" in s.upper()], statements
    with sqlite3.connect(tmp_path / "once.db") as raw:
        assert sorted(r[0] for r in raw.execute("SELECT x FROM t")) == [1, 2, 3, 4, 5]


def test_a_broken_transaction_fails_every_job_of_the_batch(tmp_path: Path) -> None:
    store = _table(tmp_path / "b.db")

    def ok(cursor: Any) -> None:
        cursor.execute("INSERT INTO t VALUES (1)")

    def broken(cursor: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    out = _grouped(store, [ok, broken, ok])
    assert all(isinstance(o, Exception) for o in out), out
    assert "disk I/O error" in str(out[1])
    with sqlite3.connect(tmp_path / "b.db") as raw:
        assert raw.execute("SELECT count(*) FROM t").fetchone()[0] == 0


@pytest.mark.parametrize("threads", [8])
def test_threads_enqueue_and_dequeue_every_message_exactly_once(tmp_path: Path,
                                                                 threads: int) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'q.db'}")
    make_queue(store, "app.q")
    per = 40
    errors: list[BaseException] = []
    got: list[bytes] = []
    lock = threading.Lock()

    def produce(k: int) -> None:
        try:
            s = connect(store)
            for i in range(per):
                s.enqueue("app.q", f"{k}:{i}".encode(), commit=True)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def consume() -> None:
        try:
            s = connect(store)
            while (m := s.dequeue("app.q", wait=0, commit=True)) is not None:
                with lock:
                    got.append(m.payload)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    for target, args in ((produce, lambda k: (k,)), (consume, lambda k: ())):
        ts = [threading.Thread(target=target, args=args(k)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
    assert not errors, errors
    expected = sorted(f"{k}:{i}".encode() for k in range(threads) for i in range(per))
    assert sorted(got) == expected
