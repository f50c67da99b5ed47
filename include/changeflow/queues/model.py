"""What the queue catalog hands out: committed batches, new batches, queue and consumer info.

These are plain frozen records; :class:`changeflow.queues.catalog.QueueCatalog` reads and
writes them in the state store.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

READY = "ready"
QUARANTINED = "quarantined"
#: Queue properties ``create_queue``/``alter_queue`` accept besides the name.
QUEUE_PROPERTIES = ("queue_table", "sort_order", "multiple_consumers", "queue_type",
                    "payload_type", "max_retries", "retry_delay", "retention_time", "secure",
                    "enqueue_enabled", "dequeue_enabled", "comment")


@dataclass(frozen=True)
class Batch:
    """One committed batch of a queue."""

    seq: int
    queue: str
    batch_id: str
    path: str
    n_messages: int
    n_bytes: int
    producer: str
    dedup_key: str | None
    source_last_seq: int | None
    min_commit_scn: int | None = None
    max_commit_scn: int | None = None


@dataclass(frozen=True)
class NewBatch:
    """What an enqueue hands to :meth:`QueueCatalog.commit_batch`."""

    batch_id: str
    path: str
    n_messages: int
    n_bytes: int
    producer: str
    dedup_key: str | None = None
    source_last_seq: int | None = None
    min_commit_scn: int | None = None
    max_commit_scn: int | None = None
    oldest_time: dt.datetime | None = None
    source_first_seq: int | None = None


@dataclass(frozen=True)
class ConsumerInfo:
    """A consumer of a queue and its position."""

    queue: str
    consumer: str
    kind: str
    position: int
    pending_batches: int
    pending_messages: int


@dataclass(frozen=True)
class QueueInfo:
    """A queue's depth, oldest message and consumers, as the CLI shows them."""

    name: str
    queue_table: str
    sort_order: str
    depth: int
    batches: int
    bytes: int
    oldest_time: dt.datetime | None
    consumers: list[ConsumerInfo]


def batch_from_row(row: object) -> Batch:
    """A :class:`Batch` from a ``cf_queue_batches`` row."""
    m = row._mapping  # type: ignore[attr-defined]
    return Batch(
        seq=m["seq"],
        queue=m["queue"],
        batch_id=m["batch_id"],
        path=m["path"],
        n_messages=m["n_messages"],
        n_bytes=m["n_bytes"],
        producer=m["producer"],
        dedup_key=m["dedup_key"],
        source_last_seq=m["source_last_seq"],
        min_commit_scn=m["min_commit_scn"],
        max_commit_scn=m["max_commit_scn"],
    )
