"""The state store: reads never wait for a writer on SQLite; unreachable stores are transient."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from changeflow.errors import StateStoreError, is_transient
from changeflow.state import StateStore, schema


def test_a_read_does_not_wait_for_an_open_write_transaction(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path}/s.db")
    store.next_counter("c")
    holding, release = threading.Event(), threading.Event()

    def writer() -> None:
        with store.begin() as conn:
            store.next_counter("c", conn)
            holding.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert holding.wait(10)
    try:
        started = time.monotonic()
        with store.read() as conn:
            value = conn.execute(select(schema.counters.c.value)).scalar_one()
        waited = time.monotonic() - started
    finally:
        release.set()
        t.join()
    assert value == 1  # the writer's uncommitted 2 is not visible
    assert waited < 2.0  # a write lock taken by the read would wait for the writer (10 s)
    assert store.next_counter("c") == 3


def test_an_unreachable_store_is_a_transient_error() -> None:
    with pytest.raises(StateStoreError) as info:
        StateStore("postgresql+psycopg://nobody:secret@127.0.0.1:1/none")
    assert is_transient(info.value)
    assert "secret" not in str(info.value) and "127.0.0.1:1" in str(info.value)
