"""Capture through a replication stream of a temporary slot copy (capture/pg_stream.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from changeflow.capture.pg_stream import SlotStream, StreamError, open_stream
from changeflow.capture.postgres import recorded_position, run_pg_capture
from changeflow.config import load_config
from changeflow.pgconn import lsn_to_int
from changeflow.queues import arrow_io
from changeflow.sites import queue_site

pytestmark = pytest.mark.postgres

CAPTURE = """
import sys
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import load_config
run_pg_capture(None, load_config(sys.argv[1]), sys.argv[2], stream_changes=True)
"""


def _setup(pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> tuple[Any, str]:
    tag = uuid.uuid4().hex[:8]
    src = f"src_{tag}"
    monkeypatch.setenv(f"CF_SRC_{tag}", pg.createdb(src))
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, v text, n numeric(10,2))")
    body = "queues:\n  - {name: strm.qa, site: s1}\n  - {name: strm.qb, site: s1}\ncaptures:\n"
    for name, q in (("cap_a", "strm.qa"), ("cap_b", "strm.qb")):
        body += (f"  - name: {name}\n    queue: {q}@s1\n"
                 f"    source: {{type: postgres, database: PG1.EXAMPLE.COM, url_env: "
                 f"CF_SRC_{tag}, slot: {name}_{tag}, tables: [public.t], "
                 f"batch_changes: 70}}\n")
    cfg = load_config(pipeline_file(workdir, body))
    for name in ("cap_a", "cap_b"):
        run_pg_capture(None, cfg, name)  # creates the slots
    return cfg, src


def _workload(pg: Any, src: str) -> None:
    for i in range(20):  # 20 transactions of 10 changes: four batches of 70 documents
        pg.sql(src, "BEGIN; " + "".join(
            f"INSERT INTO t VALUES ({i * 10 + k}, 'v{i}', {k}.25); " for k in range(8))
            + f"UPDATE t SET v = 'u' WHERE id = {i * 10}; DELETE FROM t WHERE id = {i * 10 + 1};"
            " COMMIT")


def _messages(cfg: Any, queue: str) -> list[dict[str, Any]]:
    rt, name = queue_site(cfg, queue)
    rt.catalog.add_consumer(name, "x")  # starts before the oldest batch
    table = arrow_io.read_arrow_batches(rt.catalog.pending(name, "x", max_batches=10_000))
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: r["msg_id"])


def _slots(pg: Any, src: str) -> dict[str, int]:
    with pg.connect(src) as c:
        return {r[0]: lsn_to_int(r[1]) for r in c.execute(
            "SELECT slot_name::text, confirmed_flush_lsn::text FROM pg_replication_slots "
            "WHERE database = current_database()").fetchall()}


def same_lcrs_and_positions(pg: Any, cfg: Any, src: str) -> None:
    """Both captures enqueued the same 200 LCRs, and each slot was advanced to what its
    capture recorded."""
    a, b = _messages(cfg, "strm.qa@s1"), _messages(cfg, "strm.qb@s1")
    assert len({m["msg_id"] for m in a}) == 200
    for m in a + b:
        m.pop("enq_time", None)
    assert a == b
    slots = _slots(pg, src)
    for spec in cfg.captures:
        rt, _ = queue_site(cfg, spec.queue)
        assert slots[spec.source.slot] == recorded_position(rt, spec)


def test_stream_and_peek_capture_the_same_lcrs(pg: Any, workdir: Path, pipeline_file: Any,
                                               monkeypatch: Any) -> None:
    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    _workload(pg, src)
    streamed = run_pg_capture(None, cfg, "cap_a", stream_changes=True)
    peeked = run_pg_capture(None, cfg, "cap_b")
    assert streamed.streamed == streamed.batches >= 4 and peeked.streamed == 0
    assert streamed.messages == peeked.messages == 200
    # the copy is gone already
    assert sorted(_slots(pg, src)) == sorted(s.source.slot for s in cfg.captures)
    same_lcrs_and_positions(pg, cfg, src)


def test_the_stream_reads_its_slot_past_1023_open_files(pg: Any, workdir: Path,
                                                       pipeline_file: Any,
                                                       monkeypatch: Any) -> None:
    """A process with many files open (a long-lived worker) hands the replication
    connection a descriptor past select()'s limit of 1023: the stream still reads."""
    import os

    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    _workload(pg, src)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        streamed = run_pg_capture(None, cfg, "cap_a", stream_changes=True)
    finally:
        for fd in held:
            os.close(fd)
    assert streamed.streamed == streamed.batches >= 4
    assert streamed.messages == 200


def _no_copies(pg: Any, src: str, cfg: Any) -> bool:
    """Only the captures' own slots are left (waits up to 10 s for a temporary copy)."""
    deadline = time.monotonic() + 10
    while len(_slots(pg, src)) > len(cfg.captures) and time.monotonic() < deadline:
        time.sleep(0.1)  # a closed session's temporary copy goes with its backend
    return sorted(_slots(pg, src)) == sorted(s.source.slot for s in cfg.captures)


def killed_then_rerun(pg: Any, cfg: Any, src: str, code: str, rerun: Any) -> Any:
    """Kill capture ``cap_a`` (``code`` run as a process) after its second commit,
    before it advances its slot; check what is left, then ``rerun()`` it and check
    that every change arrived once. Returns what the re-run returned."""
    spec = cfg.component("capture", "cap_a")
    rt, _ = queue_site(cfg, spec.queue)
    before = _slots(pg, src)[spec.source.slot]
    _workload(pg, src)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
           "CHANGEFLOW_CRASH_AT": "capture.after_commit:2"}
    done = subprocess.run([sys.executable, "-c", code, str(cfg.source_path), "cap_a"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 137, done.stderr[-2000:]
    recorded = recorded_position(rt, spec)
    assert recorded is not None and recorded > before
    assert _no_copies(pg, src, cfg)  # the killed session's copy went with its backend
    # the second batch was committed but the slot not advanced past it (reading a copy,
    # the capture advances its slot every ADVANCE_EVERY seconds and at the end)
    assert before <= _slots(pg, src)[spec.source.slot] < recorded
    again = rerun()
    msgs = _messages(cfg, "strm.qa@s1")
    assert len(msgs) == 200 and len({m["msg_id"] for m in msgs}) == 200
    assert _slots(pg, src)[spec.source.slot] == recorded_position(rt, spec)
    return again


def test_killed_after_commit_before_advance_loses_and_repeats_nothing(
        pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> None:
    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    again = killed_then_rerun(pg, cfg, src, CAPTURE,
                              lambda: run_pg_capture(None, cfg, "cap_a", stream_changes=True))
    assert again.streamed >= 1


def test_a_stream_that_cannot_start_says_why(pg: Any, workdir: Path, pipeline_file: Any,
                                             monkeypatch: Any) -> None:
    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    url = os.environ[cfg.component("capture", "cap_a").source.url_env]
    with pytest.raises(StreamError, match="no_such_slot"):
        SlotStream(url, "no_such_slot", ["format-version", "2"], batch_rows=10,
                   end_lsn=None).start()
    assert open_stream(url, "no_such_slot", ["format-version", "2"], batch_rows=10,
                       end_lsn=None, capture="c") is None
    assert sorted(_slots(pg, src)) == sorted(s.source.slot for s in cfg.captures)
