"""On a PostgreSQL state store, commit order equals sequence order for every queue.

Sequence numbers come from a database sequence, visibility from commit. Without the
queue's row lock, a writer that took number N and commits after a writer with N+1
would be skipped by a consumer that already acknowledged N+1: a lost batch. These
tests run real concurrent writers (threads and processes) against a throwaway
PostgreSQL while a consumer acknowledges what it sees, and check nothing is missed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from changeflow.queues import NewBatch, QueueCatalog
from changeflow.state import StateStore

pytestmark = [pytest.mark.postgres]
Q = "strmadmin.streams_queue"

WRITER = """
import sys, uuid
from changeflow.queues import NewBatch, QueueCatalog
from changeflow.state import StateStore
cat = QueueCatalog(StateStore(sys.argv[1]), "/unused")
for i in range(int(sys.argv[2])):
    bid = uuid.uuid4().hex
    cat.commit_batch("strmadmin.streams_queue", NewBatch(bid, "/x/" + bid, 1, 1, sys.argv[3]))
"""


def _store(pg: Any, name: str) -> StateStore:
    url = pg.createdb(name).replace("postgresql://", "postgresql+psycopg://", 1)
    return StateStore(url)


class Consumer(threading.Thread):
    """Polls the queue, remembers what it saw and acknowledges it, like an apply."""

    def __init__(self, cat: QueueCatalog):
        super().__init__(daemon=True)
        self.cat, self.seen, self.stop = cat, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            time.sleep(0.005)

    def poll(self) -> None:
        batches = self.cat.pending(Q, "apply:a")
        if batches:
            self.seen += [b.batch_id for b in batches]
            self.cat.ack(Q, "apply:a", batches[-1].seq)


def test_a_slow_committer_is_never_skipped(pg: Any) -> None:
    store = _store(pg, "ordered_slow")
    cat = QueueCatalog(store, "/unused")
    cat.create_queue(Q)
    cat.add_consumer(Q, "apply:a")
    consumer = Consumer(cat)
    consumer.start()
    inserted = threading.Event()

    def slow() -> None:
        with store.begin() as conn:  # takes its number, then commits a second later
            cat.commit_batch(Q, NewBatch("slow", "/x/slow", 1, 1, "a"), conn)
            inserted.set()
            time.sleep(1.0)

    t = threading.Thread(target=slow)
    t.start()
    assert inserted.wait(10)
    cat.commit_batch(Q, NewBatch("fast", "/x/fast", 1, 1, "b"))  # waits for "slow"
    t.join()
    time.sleep(0.3)
    consumer.stop.set()
    consumer.join()
    consumer.poll()
    assert sorted(consumer.seen) == ["fast", "slow"]


def test_concurrent_writer_processes_lose_nothing(pg: Any) -> None:
    store = _store(pg, "ordered_many")
    cat = QueueCatalog(store, "/unused")
    cat.create_queue(Q)
    cat.add_consumer(Q, "apply:a")
    consumer = Consumer(cat)
    consumer.start()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, store.url, "60", f"w{i}"])
               for i in range(4)]
    for w in writers:
        assert w.wait(timeout=300) == 0
    time.sleep(0.3)
    consumer.stop.set()
    consumer.join()
    consumer.poll()
    assert len(consumer.seen) == 240 and len(set(consumer.seen)) == 240
