"""The queue catalog's safety rules: source ranges, pass limits, dropped queues, quarantine."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.errors import QueueDroppedError, RangeConflictError, TerminalError
from changeflow.queues import NewBatch, QueueCatalog
from changeflow.queues.quarantine import quarantine, quarantined, release
from changeflow.state import StateStore

Q = "strmadmin.streams_queue"


@pytest.fixture
def catalog(tmp_path: Path) -> QueueCatalog:
    cat = QueueCatalog(StateStore(f"sqlite:///{tmp_path}/state.db"), str(tmp_path / "staging"))
    cat.create_queue(Q)
    return cat


def _batch(cat: QueueCatalog, n: int = 1, first: int | None = None, last: int | None = None,
           producer: str = "propagation:p") -> NewBatch:
    bid, path = cat.new_batch_path(Q)
    return NewBatch(bid, path, n, 10 * n, producer, dedup_key=f"{producer}:{last}" if last
                    else None, source_first_seq=first, source_last_seq=last)


def test_overlapping_source_ranges_never_both_commit(catalog: QueueCatalog) -> None:
    # Run A read source batches 1..3 and committed; run B had read 1..4.
    assert catalog.commit_batch(Q, _batch(catalog, 3, 1, 3)) is not None
    with pytest.raises(RangeConflictError, match="up to 3"):
        catalog.commit_batch(Q, _batch(catalog, 4, 1, 4))
    # A range inside what is there is a replay: a no-op, not an error.
    assert catalog.commit_batch(Q, _batch(catalog, 2, 2, 3)) is None
    # The next range flows.
    assert catalog.commit_batch(Q, _batch(catalog, 1, 4, 4)) is not None
    assert catalog.info(Q).depth == 4


def test_pass_limits_cap_the_work_but_always_take_one_batch(catalog: QueueCatalog) -> None:
    catalog.add_consumer(Q, "apply:a")
    seqs = [catalog.commit_batch(Q, _batch(catalog, n, producer="cap")) for n in (5, 5, 5, 50)]
    assert [b.seq for b in catalog.pending(Q, "apply:a", max_messages=10)] == seqs[:2]
    assert [b.seq for b in catalog.pending(Q, "apply:a", max_bytes=1)] == seqs[:1]
    catalog.ack(Q, "apply:a", seqs[2])
    assert [b.seq for b in catalog.pending(Q, "apply:a", max_messages=10)] == seqs[3:]


def test_a_dropped_queue_stays_dropped(catalog: QueueCatalog) -> None:
    catalog.add_consumer(Q, "apply:a")
    catalog.commit_batch(Q, _batch(catalog, 2, producer="cap"))
    with pytest.raises(TerminalError, match="still holds 2 messages"):
        catalog.drop_queue(Q)
    assert catalog.exists(Q)
    held = catalog.drop_queue(Q, force=True)
    assert [b.n_messages for b in held] == [2]
    assert catalog.create_queue(Q) is False  # what open_pipeline does: nothing comes back
    assert not catalog.exists(Q)
    with pytest.raises(QueueDroppedError, match="was dropped"):
        catalog.new_batch_path(Q)
    assert catalog.create_queue(Q, recreate_dropped=True) is True
    assert catalog.exists(Q) and catalog.info(Q).depth == 0


def test_quarantine_skips_a_batch_and_release_returns_it_to_waiting_consumers_only(
        catalog: QueueCatalog) -> None:
    catalog.add_consumer(Q, "fast")
    catalog.add_consumer(Q, "slow")
    s1 = catalog.commit_batch(Q, _batch(catalog, 3, producer="cap"))
    s2 = catalog.commit_batch(Q, _batch(catalog, 4, producer="cap"))
    catalog.ack(Q, "fast", s1)  # "fast" read batch s1 before it was set aside
    rec = quarantine(catalog, Q, s1, "corrupt footer")
    assert rec.waiting_consumers == ["slow"]
    assert [b.seq for b in catalog.pending(Q, "slow")] == [s2]
    assert catalog.purgeable(Q) == []  # its files are kept while it is set aside
    with pytest.raises(TerminalError, match="already quarantined"):
        quarantine(catalog, Q, s1, "again")
    new = release(catalog, Q, s1)
    assert [b.seq for b in catalog.pending(Q, "slow")] == [s2, new]
    assert [b.seq for b in catalog.pending(Q, "fast")] == [s2]  # not twice for "fast"
    assert quarantined(catalog, Q) == []
    [done] = quarantined(catalog, Q, include_released=True)
    assert done.released_seq == new
    with pytest.raises(TerminalError, match="not quarantined"):
        release(catalog, Q, s1)


def test_quarantine_needs_a_reason_and_a_real_batch(catalog: QueueCatalog) -> None:
    s1 = catalog.commit_batch(Q, _batch(catalog, 1, producer="cap"))
    with pytest.raises(TerminalError, match="reason"):
        quarantine(catalog, Q, s1, "  ")
    with pytest.raises(TerminalError, match="no batch 999"):
        quarantine(catalog, Q, 999, "typo")
