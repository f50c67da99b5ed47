"""Parquet queues: a catalog in the state store, batches under a staging root."""

from __future__ import annotations

from changeflow.queues.catalog import Batch, ConsumerInfo, NewBatch, QueueCatalog, QueueInfo

__all__ = ["Batch", "ConsumerInfo", "NewBatch", "QueueCatalog", "QueueInfo"]
