"""Buffered user messages (issue 32, item 7; seed 001 buffered queues, SPEC §3).

In the memory of the process that enqueued them, not in the queue table; dequeued with
``delivery_mode`` BUFFERED or PERSISTENT_OR_BUFFERED; spilled to the store under memory
pressure (then any process finds them); lost with their process otherwise, by design.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from changeflow.messaging import admin, connect, views
from changeflow.messaging.errors import MessagePropertyError
from changeflow.messaging.session import Session, Settings
from changeflow.state import StateStore

from .conftest import make_queue, rows

B = "BUFFERED"


def depth(store: StateStore, queue: str = "app.q") -> tuple[int, int, int]:
    (q,) = views.queues(store, queue)
    return q["READY"], q["buffered"], q["spilled"]


def test_a_buffered_message_lives_in_memory_and_only_buffered_dequeues_see_it(
        store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    mid = s.enqueue("app.q", b"fast", delivery_mode=B)
    assert rows(store) == [] and depth(store) == (0, 1, 0)  # nothing written to the store
    assert s.dequeue("app.q", wait=0) is None  # PERSISTENT (the default) does not see it
    browsed = s.dequeue("app.q", wait=0, mode="BROWSE", delivery_mode=B)
    assert browsed.msg_id == mid and browsed.delivery_mode == B
    m = s.dequeue("app.q", wait=0, delivery_mode=B)
    assert (m.msg_id, m.payload, m.as_dict()["delivery_mode"]) == (mid, b"fast", B)
    assert s.dequeue("app.q", wait=0, delivery_mode=B) is None
    assert depth(store) == (0, 0, 0)


def test_persistent_or_buffered_takes_both(store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    s.enqueue("app.q", b"p", commit=True)
    s.enqueue("app.q", b"b", delivery_mode=B)
    got = [s.dequeue("app.q", wait=0, delivery_mode="PERSISTENT_OR_BUFFERED")
           for _ in range(2)]
    s.commit()
    assert [(m.payload, m.delivery_mode) for m in got] == [(b"b", B), (b"p", "PERSISTENT")]
    assert s.dequeue("app.q", wait=0, delivery_mode="PERSISTENT_OR_BUFFERED") is None


def test_buffered_messages_are_not_transactional(store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    s.enqueue("app.q", b"kept", delivery_mode=B)
    s.rollback()  # an enqueue of a buffered message is not part of the transaction
    assert s.dequeue("app.q", wait=0, delivery_mode=B).payload == b"kept"
    s.rollback()  # nor is its dequeue: it does not come back
    assert s.dequeue("app.q", wait=0, delivery_mode=B) is None


def test_each_recipient_gets_its_copy(store: StateStore) -> None:
    make_queue(store, multi=True)
    for name in ("a", "b"):
        admin.add_subscriber(store, "app.q", name)
    s = connect(store)
    mid = s.enqueue("app.q", b"x", delivery_mode=B)
    assert s.dequeue("app.q", consumer="a", wait=0, delivery_mode=B).msg_id == mid
    assert s.dequeue("app.q", consumer="a", wait=0, delivery_mode=B) is None
    assert s.dequeue("app.q", consumer="b", wait=0, delivery_mode=B).msg_id == mid


def test_what_buffered_messages_do_not_support(store: StateStore) -> None:
    make_queue(store)
    make_queue(store, "app.g", grouping="transactional")
    s = connect(store)
    for kw, what in (({"delay": 5}, "delay"), ({"expiration": 5}, "expiration")):
        with pytest.raises(MessagePropertyError, match=f"{what} is not supported for buffered"):
            s.enqueue("app.q", b"x", delivery_mode=B, **kw)
    with pytest.raises(MessagePropertyError, match="not transactional"):
        s.enqueue("app.g", b"x", delivery_mode=B)
    with pytest.raises(MessagePropertyError, match="LOCKED is not supported"):
        s.dequeue("app.q", wait=0, mode="LOCKED", delivery_mode=B)
    with pytest.raises(MessagePropertyError, match="unknown delivery mode"):
        s.enqueue("app.q", b"x", delivery_mode="MEMORY")
    assert depth(store) == (0, 0, 0) and rows(store) == []


SPILLER = textwrap.dedent("""
    import os, signal, sys
    from changeflow.messaging.session import Session, Settings
    from changeflow.state import StateStore
    url, n, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    s = Session(StateStore(url), settings=Settings(buffer_max_bytes=limit))
    for i in range(n):
        s.enqueue("app.q", b"%03d" % i + b"." * 997, delivery_mode="BUFFERED")
    print("enqueued", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # a crash: what is in memory is gone
""")


def crash_after_enqueue(tmp_path: Path, url: str, n: int, limit: int) -> None:
    script = tmp_path / "spiller.py"
    script.write_text(SPILLER)
    done = subprocess.run([sys.executable, str(script), url, str(n), str(limit)],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "enqueued", done.stderr[-2000:]
    assert done.returncode == -9


def drain(s: Session) -> list[bytes]:
    out = []
    while (m := s.dequeue("app.q", wait=0, delivery_mode=B)) is not None:
        out.append(m.payload[:3])
    return out


def test_memory_pressure_spills_to_the_store_and_a_crash_loses_only_memory(
        store_url: str, tmp_path: Path) -> None:
    store = StateStore(store_url)
    make_queue(store)
    crash_after_enqueue(tmp_path, store_url, 10, 4000)  # ~1 KB each, 4 KB of memory
    spilled = depth(store)[2]
    assert 6 <= spilled < 10  # the oldest spilled; the newest were in the dead process
    got = drain(connect(store))  # another process finds what spilled, oldest first
    assert got == [b"%03d" % i for i in range(spilled)]
    crash_after_enqueue(tmp_path, store_url, 3, 1_000_000)  # under the limit: all lost
    assert drain(connect(store)) == [] and depth(store) == (0, 0, 0)


def test_spilled_and_buffered_come_in_queue_order(store: StateStore) -> None:
    make_queue(store, sort="priority")
    s = Session(store, settings=Settings(buffer_max_bytes=2500))
    for i, prio in enumerate([5, 1, 3, 2, 4]):
        s.enqueue("app.q", b"%d" % i + b"." * 999, priority=prio, delivery_mode=B)
    assert depth(store)[1:] != (5, 0)  # some spilled
    got = []
    while (m := s.dequeue("app.q", wait=0, delivery_mode=B)) is not None:
        got.append(m.priority)
    assert got == [1, 2, 3, 4, 5]
    assert s.dequeue("app.q", wait=0) is None  # never a persistent message
    assert depth(store) == (0, 0, 0)
