"""Latency probes: messages enqueued at a source queue and looked for downstream.

Used by the latency benchmark and the window tests. Enqueueing goes through Arrow (no
Spark job), so the probe measures the propagation, not the probe.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from changeflow import lcr
from changeflow.config import PipelineConfig
from changeflow.queues import arrow_io
from changeflow.sites import open_pipeline, queue_site


def probe_message(msg_id: str, scn: int) -> dict[str, Any]:
    """One row LCR (an INSERT into PROBE.PING) following the LCR contract."""
    msg: dict[str, Any] = {name: None for name in lcr.FIELD_NAMES}
    msg.update(schema_version=lcr.SCHEMA_VERSION, msg_id=msg_id, kind="ROW", origin="CAPTURED",
               source_database_name="PROBE", command_type="INSERT", object_owner="PROBE",
               object_name="PING", transaction_id=msg_id, commit_scn=scn,
               commit_time=dt.datetime.now(dt.UTC), position=1, key_columns=["ID"],
               new_values=[("ID", lcr.encode_value(scn))])
    return msg


def enqueue_probes(cfg: PipelineConfig, queue_ref: str, msg_ids: list[str], scn: int) -> int:
    """Enqueue probe messages as one committed batch. Returns its sequence number."""
    import pyarrow as pa

    open_pipeline(cfg)
    rt, q = queue_site(cfg, queue_ref)
    rows = [probe_message(m, scn + i) for i, m in enumerate(msg_ids)]
    table = pa.Table.from_pylist(rows, schema=lcr.arrow_schema())
    batch = arrow_io.write_arrow_batch(rt.catalog, q, table, producer="probe")
    assert batch is not None
    seq = rt.catalog.commit_batch(q, batch)
    assert seq is not None
    return seq


def arrived(cfg: PipelineConfig, queue_ref: str, consumer: str) -> list[str]:
    """The msg_ids of every message pending for ``consumer`` at a queue (duplicates kept)."""
    rt, q = queue_site(cfg, queue_ref)
    batches = rt.catalog.pending(q, consumer)
    if not batches:
        return []
    return [str(m) for m in arrow_io.read_arrow_batches(batches).column("msg_id").to_pylist()]
