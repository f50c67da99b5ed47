"""Retention: deleting what every consumer has acknowledged, and orphaned writes.

A batch is deleted once every consumer's position has passed it (quarantined batches
are kept until released or dropped). Its catalog row stays as a tombstone when it
carries a dedup key, so a late replay of the same work is still recognised. Each
purge also sweeps the queue for orphaned batch directories (:mod:`.orphans`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from changeflow import fs
from changeflow.queues import orphans
from changeflow.queues.arrow_io import delete_batch_files
from changeflow.queues.catalog import QueueCatalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def purge(spark: SparkSession | None, catalog: QueueCatalog, queue: str) -> int:
    """Delete batches every consumer has acknowledged. Returns how many.

    Args:
        spark: deletes through Hadoop's file systems when given; otherwise pyarrow's.
    """
    done = catalog.purgeable(queue)
    for b in done:
        if b.path:
            if spark is not None:
                fs.delete(spark, b.path)
            else:
                delete_batch_files(b.path)
    catalog.forget(done)
    orphans.sweep(catalog, queue)
    return len(done)
