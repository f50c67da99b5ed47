"""Every destination outage is a counted failure with the exact 30 s retry, an alert and
recovery: real Spark, real files, a real PostgreSQL destination store, real receivers.

Each case provokes an outage, runs a window with a fast-forward clock (the loop's waits
pass instantly; the passes are real), and repairs the outage 15 s (clock time) after the
failure: the retry must come exactly 30 s after the failure, succeed and deliver.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.config import AlertsConfig, EmailAlerts, PipelineConfig, load_config
from changeflow.schedules import probe
from changeflow.schedules.window import ensure_schedule, run_window
from changeflow.sites import queue_site
from changeflow.testing.pg_cluster import PG_BIN, PgCluster, _as_pg_user

pytestmark = [pytest.mark.spark, pytest.mark.slow]
T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
SRC, DST = "strmadmin.q@site1", "strmadmin.q@site2"


class RepairingClock:
    """Fake time; runs ``repair`` once when time passes ``at``."""

    def __init__(self) -> None:
        self.t = T0
        self.at: dt.datetime | None = None
        self.repair: Callable[[], None] | None = None

    def now(self) -> dt.datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += dt.timedelta(seconds=seconds)
        if self.repair is not None and self.at is not None and self.t >= self.at:
            repair, self.repair = self.repair, None
            repair()


@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster]:
    cluster = PgCluster().start()
    yield cluster
    cluster.stop()


def pg_ctl(pg: PgCluster, action: str) -> None:
    opts = (f"-c port={pg.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories="
            f"{pg.sock} -c fsync=off")
    args = [str(PG_BIN / "pg_ctl"), "-D", str(pg.data), "-w", "-m", "fast", action]
    if action == "start":
        args[1:1] = ["-o", opts, "-l", str(pg.root / "server.log")]
    subprocess.run(_as_pg_user(args), check=True, capture_output=True)


@pytest.fixture
def cfg(tmp_path: Path, pg: PgCluster, smtp_server: Any, webhook_server: Any) -> PipelineConfig:
    db = f"dst_{os.urandom(4).hex()}"
    pg.createdb(db)
    url = pg.url(db).replace("postgresql://", "postgresql+psycopg://")
    (tmp_path / "p.yaml").write_text(f"""
version: 1
sites:
  site1: {{staging_root: s1/staging, target_root: s1/t, state_url: "sqlite:///s1/state.db", database: DBS1.EXAMPLE.COM}}
  site2: {{staging_root: s2/staging, target_root: s2/t, state_url: "{url}", database: DBS2.EXAMPLE.COM}}
queues:
  - {{name: strmadmin.q, site: site1}}
  - {{name: strmadmin.q, site: site2}}
propagations:
  - {{name: p, source_queue: {SRC}, destination_queue: {DST}, schedule: {{latency: 5}}}}
applies:
  - {{name: ap, queue: {DST}}}
""")
    base = load_config(tmp_path / "p.yaml")
    alerts = AlertsConfig(
        email=EmailAlerts(host="127.0.0.1", port=smtp_server.server_address[1], to=["ops@x"]),
        webhook_url=f"http://127.0.0.1:{webhook_server.server_address[1]}/hook")
    return base.model_copy(update={"alerts": alerts})


def outage_window(spark: Any, cfg: PipelineConfig, provoke: Callable[[], None],
                  repair: Callable[[], None], msg: str) -> Any:
    store = ensure_schedule(cfg, "p", T0)
    store.alter("p", start=T0, duration=60.0, next_time=3600.0)
    probe.enqueue_probes(cfg, SRC, [msg], scn=abs(hash(msg)) % 10_000)
    provoke()
    clock = RepairingClock()
    clock.at, clock.repair = T0 + dt.timedelta(seconds=15), repair
    report = run_window(spark, cfg, "p", start=T0, end=T0 + dt.timedelta(seconds=60),
                        clock=clock)
    return report, store.require("p")


def check_recovered(cfg: PipelineConfig, report: Any, row: Any, msg: str, smtp: Any,
                    hook: Any, *words: str) -> None:
    assert len(report.errors) == 1, report.errors
    for w in words:
        assert w in report.errors[0], report.errors[0]
    [failed] = [m for m in hook.messages if m["event"] == "window_failed"]
    assert failed["failures"] == 1 and failed["propagation"] == "p"
    assert dt.datetime.fromisoformat(failed["next_retry"]) == T0 + dt.timedelta(seconds=30)
    assert any("window of p failed" in m["Subject"] for m in smtp.messages)
    assert report.ok and report.passes >= 2 and report.messages >= 1
    assert row.state.failures == 0 and row.state.last_error_msg == report.errors[0]
    assert probe.arrived(cfg, DST, "apply:ap").count(msg) == 1


def test_destination_state_store_unreachable(spark: Any, cfg: PipelineConfig, pg: PgCluster,
                                             smtp_server: Any, webhook_server: Any) -> None:
    report, row = outage_window(spark, cfg, lambda: pg_ctl(pg, "stop"),
                                lambda: pg_ctl(pg, "start"), "pg-down")
    check_recovered(cfg, report, row, "pg-down", smtp_server, webhook_server,
                    "DestinationUnavailableError", "site2", DST)


def test_destination_staging_root_not_writable(spark: Any, cfg: PipelineConfig,
                                               smtp_server: Any, webhook_server: Any) -> None:
    rt, _ = queue_site(cfg, DST)
    root = Path(rt.spec.staging_root)

    def provoke() -> None:  # the root is a file: nothing can be created under it
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        root.write_text("not a directory")

    def repair() -> None:
        root.unlink()
        root.mkdir()

    report, row = outage_window(spark, cfg, provoke, repair, "ro")
    check_recovered(cfg, report, row, "ro", smtp_server, webhook_server,
                    "DestinationUnavailableError", "site2", DST, str(root), "not a directory")


def test_destination_staging_root_missing_under_live_batches(
        spark: Any, cfg: PipelineConfig, smtp_server: Any, webhook_server: Any) -> None:
    rt, _ = queue_site(cfg, DST)
    root = Path(rt.spec.staging_root)
    moved = root.with_name("staging.unmounted")
    probe.enqueue_probes(cfg, SRC, ["first"], scn=1)
    past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    first = run_window(spark, cfg, "p", start=past, end=past + dt.timedelta(hours=1))
    assert first.ok and probe.arrived(cfg, DST, "apply:ap") == ["first"]
    report, row = outage_window(spark, cfg, lambda: root.rename(moved),
                                lambda: moved.rename(root), "gone")
    check_recovered(cfg, report, row, "gone", smtp_server, webhook_server,
                    "is missing", "site2", DST, "staged batches")


def test_dropped_destination_queue_marks_messages_undeliverable(
        spark: Any, cfg: PipelineConfig, smtp_server: Any, webhook_server: Any) -> None:
    from changeflow.sites import open_pipeline

    open_pipeline(cfg)
    rt, q = queue_site(cfg, DST)
    rt.catalog.drop_queue(q, force=True)
    probe.enqueue_probes(cfg, SRC, ["lost"], scn=5)
    store = ensure_schedule(cfg, "p", T0)
    past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    report = run_window(spark, cfg, "p", start=past, end=past + dt.timedelta(hours=1))
    assert report.undeliverable == 1 and report.ok
    [rec] = store.undeliverable("p")
    assert rec["state"] == "UNDELIVERABLE" and DST.split("@")[0] in rec["error_message"]
    assert [m["event"] for m in webhook_server.messages] == ["messages_undeliverable"]
    assert store.require("p").state.failures == 0


def test_moved_staging_root_is_refused_at_start_up(spark: Any, cfg: PipelineConfig,
                                                    webhook_server: Any) -> None:
    from changeflow.errors import ConfigError
    from changeflow.sites import open_pipeline

    open_pipeline(cfg)
    sites = dict(cfg.sites)
    sites["site1"] = sites["site1"].model_copy(
        update={"staging_root": sites["site1"].staging_root + "-moved"})
    moved = cfg.model_copy(update={"sites": sites})
    with pytest.raises(ConfigError, match="staging_root"):
        run_window(spark, moved, "p", start=T0, end=T0 + dt.timedelta(seconds=60))
    assert ensure_schedule(cfg, "p", T0).require("p").state.failures == 0
    assert webhook_server.messages == []
