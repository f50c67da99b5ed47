"""Capture reading its slot one batch ahead from a temporary copy (capture/pg_prefetch.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from changeflow.capture.pg_prefetch import SlotPrefetch, open_prefetch
from changeflow.capture.pg_stream import StreamError
from changeflow.capture.postgres import recorded_position, run_pg_capture
from changeflow.sites import queue_site

from .test_pg_stream import (
    _messages,
    _no_copies,
    _slots,
    _workload,
    killed_then_rerun,
    same_lcrs_and_positions,
)
from .test_pg_stream import _setup as _stream_setup

pytestmark = pytest.mark.postgres
_SOURCES: list[str] = []


def _setup(pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> tuple[Any, str]:
    cfg, src = _stream_setup(pg, workdir, pipeline_file, monkeypatch)
    _SOURCES.append(src)
    return cfg, src


@pytest.fixture(autouse=True)
def _drop_slots(pg: Any) -> Any:
    """The session's cluster has 20 replication slots for every test: free this test's."""
    yield
    while _SOURCES:
        src = _SOURCES.pop()
        deadline = time.monotonic() + 10
        with pg.connect(src) as c:
            while time.monotonic() < deadline:
                c.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                          " WHERE database = current_database() AND NOT active")
                if not c.execute("SELECT count(*) FROM pg_replication_slots WHERE "
                                 "database = current_database()").fetchone()[0]:
                    break
                time.sleep(0.1)

CAPTURE = """
import sys
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import load_config
run_pg_capture(None, load_config(sys.argv[1]), sys.argv[2])
"""


def test_read_ahead_and_peek_capture_the_same_lcrs(pg: Any, workdir: Path,
                                                   pipeline_file: Any,
                                                   monkeypatch: Any) -> None:
    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    _workload(pg, src)
    ahead = run_pg_capture(None, cfg, "cap_a")  # the default
    peeked = run_pg_capture(None, cfg, "cap_b", read_ahead=False)
    assert ahead.prefetched == ahead.batches >= 4 and ahead.streamed == 0
    assert peeked.prefetched == peeked.streamed == 0 and peeked.batches >= 4
    assert ahead.messages == peeked.messages == 200
    assert _no_copies(pg, src, cfg)  # the copy is gone
    same_lcrs_and_positions(pg, cfg, src)
    assert run_pg_capture(None, cfg, "cap_a").messages == 0  # nothing twice


def test_max_batches_leaves_the_rest_in_the_slot(pg: Any, workdir: Path, pipeline_file: Any,
                                                 monkeypatch: Any) -> None:
    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    _workload(pg, src)
    first = run_pg_capture(None, cfg, "cap_a", max_batches=1)
    assert first.batches == 1 and 0 < first.messages < 200
    spec = cfg.component("capture", "cap_a")
    rt, _ = queue_site(cfg, spec.queue)
    assert _no_copies(pg, src, cfg)  # read ahead, but only the copy consumed it
    assert _slots(pg, src)[spec.source.slot] == recorded_position(rt, spec)
    rest = run_pg_capture(None, cfg, "cap_a")
    assert first.messages + rest.messages == 200
    msgs = _messages(cfg, "strm.qa@s1")
    assert len(msgs) == 200 and len({m["msg_id"] for m in msgs}) == 200


def test_killed_after_commit_before_advance_loses_and_repeats_nothing(
        pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> None:
    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    again = killed_then_rerun(pg, cfg, src, CAPTURE,
                              lambda: run_pg_capture(None, cfg, "cap_a"))
    assert again.prefetched >= 1


def test_following_reads_later_changes(pg: Any, workdir: Path, pipeline_file: Any,
                                       monkeypatch: Any) -> None:
    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    later = threading.Timer(1.0, _workload, (pg, src))
    later.start()
    try:
        got = run_pg_capture(None, cfg, "cap_a", follow=True, max_seconds=6.0,
                             poll_interval=0.1)
    finally:
        later.join()
    assert got.messages == 200 and got.prefetched >= 1
    assert _no_copies(pg, src, cfg)


def test_a_prefetch_that_cannot_start_says_why_and_the_capture_peeks(
        pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> None:
    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    url = os.environ[cfg.component("capture", "cap_a").source.url_env]
    with pytest.raises(StreamError, match="no_such_slot"):
        SlotPrefetch(url, "no_such_slot", ["format-version", "2"], batch_rows=10,
                     follow=False).start()
    assert open_prefetch(url, "no_such_slot", ["format-version", "2"], batch_rows=10,
                         follow=False, poll=0.1, capture="c") is None
    assert _no_copies(pg, src, cfg)
    _workload(pg, src)
    monkeypatch.setattr("changeflow.capture.postgres.open_prefetch",
                        lambda *a, **k: None)  # e.g. no free replication slot
    got = run_pg_capture(None, cfg, "cap_a")
    assert got.messages == 200 and got.prefetched == 0 and got.batches >= 4


def test_a_failed_read_hands_over_nothing_and_the_capture_peeks_on(
        pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> None:
    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    _workload(pg, src)
    real = SlotPrefetch._put
    handed = [0]

    def put(self: SlotPrefetch, item: Any, final: bool = False, **kw: Any) -> None:
        if not final:
            handed[0] += 1
            if handed[0] == 2:  # the second read fails: its slot copy is dropped
                self._conn.execute("SELECT pg_drop_replication_slot(%s)", (self.copy,))
                raise RuntimeError("read failed")
        real(self, item, final, **kw)

    monkeypatch.setattr(SlotPrefetch, "_put", put)
    got = run_pg_capture(None, cfg, "cap_a")
    assert got.messages == 200 and got.prefetched == 1 and got.batches >= 4
    msgs = _messages(cfg, "strm.qa@s1")
    assert len(msgs) == 200 and len({m["msg_id"] for m in msgs}) == 200


def test_a_read_joined_out_of_order_is_refused_and_the_capture_peeks(
        pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> None:
    """The read's aggregates have no ORDER BY; their order is checked instead. A read
    the server joined in another order (here: made to, in reverse) is not used."""
    from changeflow.capture import pg_prefetch

    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    _workload(pg, src)
    scan = "pg_logical_slot_get_changes(%s, NULL, %s, VARIADIC %s::text[])\n" \
           "     WITH ORDINALITY AS c(lsn, xid, data, n)"
    assert scan in pg_prefetch._GET_SQL
    monkeypatch.setattr(pg_prefetch, "_GET_SQL", pg_prefetch._GET_SQL.replace(
        scan, f"(SELECT * FROM {scan} ORDER BY n DESC) AS c"))
    got = run_pg_capture(None, cfg, "cap_a")
    assert got.messages == 200 and got.prefetched == 0 and got.batches >= 4
    assert run_pg_capture(None, cfg, "cap_b", read_ahead=False).messages == 200
    same_lcrs_and_positions(pg, cfg, src)
    assert _no_copies(pg, src, cfg)


def test_multibyte_text_is_read_as_bytes_and_cut_by_its_bytes(
        pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> None:
    """From a UTF-8 database a read comes as bytes and is cut by ``octet_length``:
    with characters of two to four bytes, counting characters would cut elsewhere."""
    from changeflow.capture.pg_source import SlotReader

    cfg, src = _setup(pg, workdir, pipeline_file, monkeypatch)
    for i in range(20):  # 20 transactions of 10 changes, as _workload, multibyte values
        pg.sql(src, "BEGIN; " + "".join(
            f"INSERT INTO t VALUES ({i * 10 + k}, 'é{i}日本🙂{k}', {k}.25); " for k in range(8))
            + f"UPDATE t SET v = 'ü€' WHERE id = {i * 10}; DELETE FROM t WHERE id = {i * 10 + 1};"
            " COMMIT")
    spec = cfg.component("capture", "cap_a")
    with pg.connect(src) as conn:
        options = SlotReader(conn, spec.source, "cap_a").options()
    with SlotPrefetch(os.environ[spec.source.url_env], spec.source.slot, options,
                      batch_rows=70, follow=False).start() as ahead:
        first = ahead.next()
    assert first is not None and isinstance(first.text, bytes)
    assert "日本🙂".encode() in first.text and first.rows < 200
    # options psycopg cannot send as ASCII keep the text path: cut by characters, the same
    wide = [o + ",public.tñ" if prev == "add-tables" else o
            for prev, o in zip([None, *options[:-1]], options, strict=True)]
    assert wide != options
    with SlotPrefetch(os.environ[spec.source.url_env], spec.source.slot, wide,
                      batch_rows=70, follow=False).start() as ahead:
        as_text = ahead.next()
    assert as_text is not None and isinstance(as_text.text, str)
    assert (as_text.text.encode(), as_text.commit_lsns, as_text.rows) == (
        first.text, first.commit_lsns, first.rows)
    got = run_pg_capture(None, cfg, "cap_a")
    assert got.prefetched == got.batches >= 4
    assert run_pg_capture(None, cfg, "cap_b", read_ahead=False).messages == got.messages == 200
    same_lcrs_and_positions(pg, cfg, src)
