"""The queue catalog in the state store: batches, consumers, positions, retention."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.errors import QueueNotFoundError
from changeflow.queues import NewBatch, QueueCatalog
from changeflow.state import StateStore


@pytest.fixture
def catalog(tmp_path: Path) -> QueueCatalog:
    store = StateStore(f"sqlite:///{tmp_path}/state.db")
    cat = QueueCatalog(store, str(tmp_path / "staging"))
    cat.create_queue("strmadmin.streams_queue")
    return cat


def batch(cat: QueueCatalog, n: int, dedup: str | None = None) -> NewBatch:
    bid, path = cat.new_batch_path("strmadmin.streams_queue")
    return NewBatch(bid, path, n, 100 * n, "test", dedup_key=dedup)


def test_consumers_see_only_committed_batches_in_order(catalog: QueueCatalog) -> None:
    q = "strmadmin.streams_queue"
    catalog.add_consumer(q, "apply:a", "apply")
    s1 = catalog.commit_batch(q, batch(catalog, 3))
    s2 = catalog.commit_batch(q, batch(catalog, 2))
    assert [b.seq for b in catalog.pending(q, "apply:a")] == [s1, s2]
    catalog.ack(q, "apply:a", s1)
    assert [b.seq for b in catalog.pending(q, "apply:a")] == [s2]
    catalog.ack(q, "apply:a", s1 - 1)  # positions never move backwards
    assert catalog.position(q, "apply:a") == s1


def test_dedup_key_makes_a_rerun_a_noop(catalog: QueueCatalog) -> None:
    q = "strmadmin.streams_queue"
    assert catalog.commit_batch(q, batch(catalog, 1, "capture:c:snap=1")) is not None
    assert catalog.commit_batch(q, batch(catalog, 1, "capture:c:snap=1")) is None
    assert catalog.info(q).depth == 1


def test_retention_waits_for_every_consumer(catalog: QueueCatalog) -> None:
    q = "strmadmin.streams_queue"
    catalog.add_consumer(q, "propagation:p", "propagation")
    catalog.add_consumer(q, "apply:a", "apply")
    s1 = catalog.commit_batch(q, batch(catalog, 5))
    assert s1 is not None
    catalog.ack(q, "propagation:p", s1)
    assert catalog.purgeable(q) == []
    catalog.ack(q, "apply:a", s1)
    assert [b.seq for b in catalog.purgeable(q)] == [s1]
    info = catalog.info(q)
    assert info.depth == 5
    assert {c.consumer: c.position for c in info.consumers} == {"apply:a": s1, "propagation:p": s1}


def test_unknown_queue_is_named(catalog: QueueCatalog) -> None:
    with pytest.raises(QueueNotFoundError, match="hr.nope"):
        catalog.pending("hr.nope", "x")


def test_counter_is_transactional(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path}/s.db")
    assert [store.next_counter("scn:X") for _ in range(3)] == [1, 2, 3]
