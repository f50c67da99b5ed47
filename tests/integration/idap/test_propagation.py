"""HTTP propagation between two local changeflow servers' sites, exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.config import load_config
from changeflow.errors import DestinationUnavailableError
from changeflow.idap.server import Running
from changeflow.messaging import connect
from changeflow.propagation import propagate_once
from changeflow.schedules.outages import check_destination
from changeflow.schedules.probe import arrived, enqueue_probes
from changeflow.sites import site

from .conftest import running, write_yaml

DST = """
version: 1
sites:
  site2: {staging_root: s2/st, target_root: s2/t, state_url: "sqlite:///s2/state.db", database: DB2}
queues:
  - {name: ws.booked, site: site2, queue_table: ws.orders_qt}
messaging:
  queue_tables:
    - {name: ws.orders_qt, site: site2, payload_type: RAW, multiple_consumers: true}
  subscribers:
    - {queue: ws.booked@site2, name: all}
idap:
  users: [{name: prop, password_env: PROP_PW}]
"""

SRC = """
version: 1
sites:
  site1: {{staging_root: s1/st, target_root: s1/t, state_url: "sqlite:///s1/state.db", database: DB1}}
queues:
  - {{name: oe.booked, site: site1, queue_table: oe.orders_qt}}
propagations:
  - {{name: oe_to_ws, source_queue: oe.booked@site1, destination_queue: ws.booked@dba}}
messaging:
  queue_tables: [{{name: oe.orders_qt, site: site1, payload_type: RAW, multiple_consumers: true}}]
  subscribers:
    - {{queue: oe.booked@site1, name: local}}
    - {{queue: oe.booked@site1, address: ws.booked@dba}}
idap:
  remote_sites:
    dba: {{url: "{url}", username_env: PROP_USER, password_env: PROP_PW, max_messages: 2}}
"""


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Running]]:
    root: Path = tmp_path_factory.mktemp("http-prop")
    mp = pytest.MonkeyPatch()
    mp.setenv("PROP_USER", "prop")
    (root / "s1").mkdir()
    (root / "s2").mkdir()
    dst = load_config(write_yaml(root / "dst.yaml", DST))
    with running(dst, dst.idap) as server:
        src = load_config(write_yaml(root / "src.yaml", SRC.format(url=server.url)))
        site(dst, "site2").catalog.add_consumer("ws.booked", "reader")
        yield src, dst, server
    mp.undo()


def test_lcr_batches_and_user_messages_cross_once(sites: tuple[Any, Any, Running]) -> None:
    src, dst, _ = sites
    s = connect(src)
    mid = s.enqueue("oe.booked", b"hello", correlation="c-1", priority=2)
    s.commit()
    enqueue_probes(src, "oe.booked@site1", ["p1", "p2", "p3"], 100)
    enqueue_probes(src, "oe.booked@site1", ["p4"], 200)
    res = propagate_once(None, src, "oe_to_ws")
    assert res.messages_propagated == 4 + 1  # 4 LCRs in one destination batch, 1 user message
    assert res.destination_seq is not None
    assert arrived(dst, "ws.booked@site2", "reader") == ["p1", "p2", "p3", "p4"]
    d = connect(dst)
    m = d.dequeue("ws.booked", consumer="all", wait=0)
    assert (m.msg_id, m.payload, m.correlation, m.priority) == (mid, b"hello", "c-1", 2)
    d.commit()
    again = propagate_once(None, src, "oe_to_ws")
    assert (again.batches_read, again.messages_propagated) == (0, 0)
    assert connect(src).dequeue("oe.booked", consumer="local", wait=0).msg_id == mid


def test_a_range_resent_after_a_crash_is_recognised(sites: tuple[Any, Any, Running],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    src, dst, _ = sites
    before = arrived(dst, "ws.booked@site2", "reader")
    enqueue_probes(src, "oe.booked@site1", ["q1", "q2"], 300)
    rt = site(src, "site1")
    real_ack = type(rt.catalog).ack

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("killed between the destination commit and the source ack")

    monkeypatch.setattr(type(rt.catalog), "ack", crash)
    with pytest.raises(RuntimeError, match="killed"):
        propagate_once(None, src, "oe_to_ws")
    monkeypatch.setattr(type(rt.catalog), "ack", real_ack)
    assert arrived(dst, "ws.booked@site2", "reader") == [*before, "q1", "q2"]
    enqueue_probes(src, "oe.booked@site1", ["q3"], 400)  # the re-sent range grows
    res = propagate_once(None, src, "oe_to_ws")
    assert res.messages_propagated == 1  # only q3 is new at the destination
    assert arrived(dst, "ws.booked@site2", "reader") == [*before, "q1", "q2", "q3"]


def test_an_unreachable_endpoint_is_a_transient_failure(tmp_path: Path,
                                                       sites: tuple[Any, Any, Running]) -> None:
    (tmp_path / "s1").mkdir()
    cfg = load_config(write_yaml(tmp_path / "src.yaml",
                                 SRC.format(url="http://127.0.0.1:9/aq")))
    with pytest.raises(DestinationUnavailableError, match="unreachable"):
        check_destination(cfg, "oe_to_ws")
    enqueue_probes(cfg, "oe.booked@site1", ["x1"], 1)
    with pytest.raises(DestinationUnavailableError):
        propagate_once(None, cfg, "oe_to_ws")
    rt = site(cfg, "site1")
    assert len(rt.catalog.pending("oe.booked", "propagation:oe_to_ws")) == 1  # kept


def test_a_remote_destination_passes_config_validation(sites: tuple[Any, Any, Running]) -> None:
    src, _, _ = sites
    assert src.idap.remote(src.propagations[0].destination_queue).url.endswith("/aq")


class _Clock:
    def __init__(self, t: Any) -> None:
        self.t = t

    def now(self) -> Any:
        return self.t

    def sleep(self, seconds: float) -> None:
        import datetime as dt

        self.t += dt.timedelta(seconds=seconds)


def test_schedule_windows_back_off_and_count_statistics(tmp_path: Path,
                                                       sites: tuple[Any, Any, Running]) -> None:
    import datetime as dt

    from changeflow.schedules.window import ensure_schedule, run_window

    t0 = dt.datetime.now(dt.UTC).replace(microsecond=0)
    (tmp_path / "s1").mkdir()
    down = load_config(write_yaml(tmp_path / "src.yaml", SRC.format(url="http://127.0.0.1:9/aq")))
    store = ensure_schedule(down, "oe_to_ws", t0)
    report = run_window(None, down, "oe_to_ws", start=t0,  # type: ignore[arg-type]
                        end=t0 + dt.timedelta(seconds=60), clock=_Clock(t0))
    row = store.require("oe_to_ws")
    assert not report.ok and row.state.failures == 2  # at start, then after 30 s
    assert "unreachable" in (row.state.last_error_msg or "")
    assert row.state.next_retry == t0 + dt.timedelta(seconds=30 + 60)  # 30 s, then 60 s
    assert [a["event"] for a in report.alerts] == ["window_failed", "window_failed"]
    # the live server: a window propagates and the schedule's statistics count it
    src, dst, _ = sites
    enqueue_probes(src, "oe.booked@site1", ["w1", "w2"], 900)
    live = ensure_schedule(src, "oe_to_ws", t0)
    before = live.require("oe_to_ws").stats.total_number
    report = run_window(None, src, "oe_to_ws", start=t0,  # type: ignore[arg-type]
                        end=t0 + dt.timedelta(seconds=5), clock=_Clock(t0))
    assert report.ok and report.messages == 2
    assert live.require("oe_to_ws").stats.total_number == before + 2
    assert arrived(dst, "ws.booked@site2", "reader")[-2:] == ["w1", "w2"]
