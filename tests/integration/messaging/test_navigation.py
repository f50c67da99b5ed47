"""Navigation and message state as seed 003 describes them (issue 32, items 5 and 6).

NEXT_TRANSACTION skips the remainder of the current transaction group and retrieves the
first message of the next group, for REMOVE as for BROWSE; it "can only be used if
message grouping is enabled". ``message_state`` is 0 (ready) for a delayed message
whose delay has passed, whatever the dequeue mode.
"""

from __future__ import annotations

import time

import pytest

from changeflow.messaging import connect
from changeflow.messaging.constants import State
from changeflow.messaging.errors import EndOfGroupError, MessagePropertyError
from changeflow.state import StateStore

from .conftest import make_queue


def groups(store: StateStore, n: int = 3, size: int = 3) -> None:
    s = connect(store)
    for g in range(1, n + 1):
        for i in range(size):
            s.enqueue("app.q", f"g{g}m{i}".encode())
        s.commit()


@pytest.mark.parametrize("sort", ["commit_time", "enq_time"])
@pytest.mark.parametrize("mode", ["REMOVE", "BROWSE", "LOCKED"])
def test_next_transaction_moves_to_the_next_group(store: StateStore, mode: str,
                                                  sort: str) -> None:
    make_queue(store, sort=sort, grouping="transactional")
    groups(store)
    c = connect(store)

    def get(navigation: str = "NEXT_MESSAGE") -> bytes:
        m = c.dequeue("app.q", wait=0, mode=mode, navigation=navigation)
        assert m is not None
        return m.payload

    assert get("FIRST_MESSAGE") == b"g1m0"
    assert get("NEXT_TRANSACTION") == b"g2m0"  # skips the rest of group 1
    assert get() == b"g2m1"
    assert get("NEXT_TRANSACTION") == b"g3m0"  # not the rest of group 1
    assert get() == b"g3m1"
    assert get() == b"g3m2"
    with pytest.raises(EndOfGroupError):
        get()
    assert c.dequeue("app.q", wait=0, mode=mode, navigation="NEXT_TRANSACTION") is None
    c.commit()
    if mode == "REMOVE":  # what was skipped is still there, from the beginning
        assert c.dequeue("app.q", wait=0, navigation="FIRST_MESSAGE").payload == b"g1m1"
        assert c.dequeue("app.q", wait=0).payload == b"g1m2"
        with pytest.raises(EndOfGroupError):
            c.dequeue("app.q", wait=0)
        assert c.dequeue("app.q", wait=0, navigation="NEXT_TRANSACTION").payload == b"g2m2"
        assert c.dequeue("app.q", wait=0, navigation="NEXT_TRANSACTION") is None
        c.commit()


def test_next_transaction_is_refused_without_grouping(store: StateStore) -> None:
    make_queue(store)
    connect(store).enqueue("app.q", b"x", commit=True)
    c = connect(store)
    for mode in ("REMOVE", "BROWSE", "LOCKED"):
        with pytest.raises(MessagePropertyError, match="message grouping"):
            c.dequeue("app.q", wait=0, mode=mode, navigation="NEXT_TRANSACTION")
    assert c.dequeue("app.q", wait=0, commit=True).payload == b"x"  # nothing was taken


@pytest.mark.parametrize("mode", ["BROWSE", "REMOVE", "LOCKED"])
def test_a_delayed_message_past_its_delay_is_ready(store: StateStore, mode: str) -> None:
    make_queue(store)
    s = connect(store)
    s.enqueue("app.q", b"later", delay=0.2, commit=True)
    time.sleep(0.4)
    m = s.dequeue("app.q", wait=0, mode=mode)
    assert m is not None and m.state is State.READY
    assert m.as_dict()["state"] in ("READY", 0, State.READY)
    s.rollback()
