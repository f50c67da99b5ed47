"""A session's cached dictionary follows administrative changes made by other processes.

Each test lets the cache trust its entries for an hour (``cache.MAX_AGE``), so only the
dictionary version (raised by the other process's admin call, carried by the hot
statements) can make the session see the change.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from changeflow.errors import SecurityError
from changeflow.messaging import cache, connect, receive
from changeflow.messaging.errors import NotSubscribedError
from changeflow.state import StateStore

from .conftest import make_queue, rows


@pytest.fixture(autouse=True)
def _trust_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "MAX_AGE", 3600.0)
    monkeypatch.setattr(receive, "CHECK_TTL", 3600.0)


def elsewhere(url: str, code: str) -> None:
    """Run admin calls in another Python process (its own dictionary generation)."""
    script = "from changeflow.messaging import admin\nfrom changeflow.state import StateStore\n" \
             f"store = StateStore({url!r})\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def consumers_of(s, queue: str, names: list[str]) -> dict[str, list[bytes]]:  # type: ignore[no-untyped-def]
    got: dict[str, list[bytes]] = {}
    for name in names:
        while (m := s.dequeue(queue, consumer=name, wait=0, commit=True)) is not None:
            got.setdefault(name, []).append(m.payload)
    return got


def test_a_subscriber_rule_changed_elsewhere_applies_to_the_next_enqueue(
        store: StateStore) -> None:
    make_queue(store, "app.topic", multi=True)
    from changeflow.messaging import admin

    admin.add_subscriber(store, "app.topic", "east")
    s = connect(store)
    s.enqueue("app.topic", b"before", priority=1, commit=True)  # caches: east, no rule
    elsewhere(store.url, """
        admin.alter_subscriber(store, "app.topic", "east", rule="priority > 5")
        admin.add_subscriber(store, "app.topic", "west", rule="priority = 1")
    """)
    s.enqueue("app.topic", b"now", priority=1, commit=True)  # one recipient: one statement
    s.enqueue("app.topic", b"pending", priority=1)  # kept for the commit (ON_COMMIT)
    s.commit()
    got = consumers_of(connect(store), "app.topic", ["east", "west"])
    assert got == {"east": [b"before"], "west": [b"now", b"pending"]}


def test_a_privilege_revoked_elsewhere_refuses_the_next_dequeue(store: StateStore) -> None:
    make_queue(store, "hr.sq", secure=True)
    from changeflow.messaging import admin

    admin.grant_queue_privilege(store, "all", "hr.sq", "app")
    app = connect(store, user="app")
    app.enqueue_array("hr.sq", [b"1", b"2"], commit=True)
    assert app.dequeue("hr.sq", wait=0, commit=True).payload == b"1"  # check cached
    elsewhere(store.url, 'admin.revoke_queue_privilege(store, "dequeue", "hr.sq", "app")')
    before = rows(store)
    with pytest.raises(SecurityError, match="no DEQUEUE"):
        app.dequeue("hr.sq", wait=0, commit=True)
    assert rows(store) == before  # the message stays
    with pytest.raises(SecurityError, match="no DEQUEUE"):
        app.dequeue("hr.sq", wait=0, commit=True)
    app.enqueue("hr.sq", b"3", commit=True)  # ENQUEUE is still granted


def test_a_privilege_revoked_elsewhere_refuses_the_next_enqueue(store: StateStore) -> None:
    make_queue(store, "hr.sq", secure=True)
    from changeflow.messaging import admin

    admin.grant_queue_privilege(store, "enqueue", "hr.sq", "app")
    app = connect(store, user="app")
    app.enqueue("hr.sq", b"1", commit=True)  # the grant is cached
    elsewhere(store.url, 'admin.revoke_queue_privilege(store, "enqueue", "hr.sq", "app")')
    before = rows(store)
    with pytest.raises(SecurityError, match="no ENQUEUE"):
        app.enqueue("hr.sq", b"2", commit=True)
    with pytest.raises(SecurityError, match="no ENQUEUE"):
        app.enqueue("hr.sq", b"3")
    assert rows(store) == before


def test_a_subscriber_removed_elsewhere_can_no_longer_dequeue(store: StateStore) -> None:
    make_queue(store, "app.topic", multi=True)
    from changeflow.messaging import admin

    admin.add_subscriber(store, "app.topic", "east")
    admin.add_subscriber(store, "app.topic", "west")
    s = connect(store)
    s.enqueue("app.topic", b"1", commit=True)
    assert s.dequeue("app.topic", consumer="east", wait=0, commit=True).payload == b"1"
    s.enqueue("app.topic", b"2", recipients=["west"], commit=True)
    elsewhere(store.url, 'admin.remove_subscriber(store, "app.topic", "east")')
    with pytest.raises(NotSubscribedError, match="EAST is not a subscriber"):
        s.dequeue("app.topic", consumer="east", wait=0, commit=True)


def test_a_queue_stopped_elsewhere_refuses_at_once(store: StateStore) -> None:
    make_queue(store)
    s = connect(store)
    s.enqueue("app.q", b"1", commit=True)
    elsewhere(store.url, 'admin.stop_queue(store, "app.q")')
    from changeflow.messaging.errors import QueueStoppedError

    with pytest.raises(QueueStoppedError, match="stopped for enqueue"):
        s.enqueue("app.q", b"2", commit=True)
    with pytest.raises(QueueStoppedError, match="stopped for dequeue"):
        s.dequeue("app.q", wait=0, commit=True)
