"""The proof on a workload nobody here wrote: pgbench, captured, propagated and applied.

pgbench_history has no primary key, and changeflow refuses such a table (its updates
and deletes could not be identified). pgbench only ever inserts into it, but the
refusal is deliberate, so the setup gives it one, as the refusal's guidance says:
``ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY`` (pgbench names
its columns on insert, so it keeps working).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply import errorq
from changeflow.apply.engine import apply_once, targets_of
from changeflow.apply.postgres import apply_pg_once
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import load_config
from changeflow.propagation import propagate_once
from changeflow.queues import arrow_io
from changeflow.sites import queue_site
from changeflow.targets.read import read_table

# long: several minutes of Spark passes over pgbench's 100,000 accounts (make test-long runs
# it; tests/integration/postgres/test_truncate_apply.py keeps the TRUNCATE + reload case in
# make test)
pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow, pytest.mark.long]

TABLES = {"pgbench_accounts": "aid", "pgbench_branches": "bid", "pgbench_tellers": "tid",
          "pgbench_history": "hid"}
SECONDS = int(os.environ.get("CHANGEFLOW_PGBENCH_SECONDS", "10"))

CAPTURE_SCRIPT = (
    "import sys, logging; logging.basicConfig(level=logging.INFO);"
    "from changeflow.config import load_config;"
    "from changeflow.capture.postgres import run_pg_capture;"
    "run_pg_capture(None, load_config(sys.argv[1]), 'pgcap', follow=True, "
    "max_seconds=float(sys.argv[2]), poll_interval=0.2)"
)


def _setup(pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any) -> tuple[Any, ...]:
    tag = uuid.uuid4().hex[:8]
    src, dst = f"bench_src_{tag}", f"bench_dst_{tag}"
    monkeypatch.setenv("CF_PGBENCH_SRC", pg.createdb(src))
    monkeypatch.setenv("CF_PGBENCH_DST", pg.createdb(dst))
    for db in (src, dst):
        pg.tool("pgbench", "-q", "-i", "-I", "dtp", "-s", "1", db=db)
        pg.sql(db, "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")
    path = pipeline_file(workdir, f"""
        queues:
          - {{name: strm.cq, site: s1}}
          - {{name: strm.aq, site: s2}}
        captures:
          - name: pgcap
            queue: strm.cq@s1
            source: {{type: postgres, database: PG1.EXAMPLE.COM, url_env: CF_PGBENCH_SRC,
                      slot: pgbench_{tag}, schemas: [public], batch_changes: 20000}}
        propagations:
          - {{name: p12, source_queue: strm.cq@s1, destination_queue: strm.aq@s2}}
        applies:
          - name: topg
            queue: strm.aq@s2
            target: {{type: postgres, url_env: CF_PGBENCH_DST}}
          - {{name: toparquet, queue: strm.aq@s2}}
    """)
    return load_config(path), path, src, dst


def _pgbench(pg: Any, db: str, seconds: int) -> subprocess.Popen[str]:
    argv = pg.argv("pgbench", "-n", "-c", "4", "-j", "2", "-T", str(seconds), db=db)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _drain_and_apply(spark: Any, cfg: Any) -> None:
    run_pg_capture(None, cfg, "pgcap")
    rt, queue = queue_site(cfg, "strm.cq@s1")
    pending = rt.catalog.pending(queue, "propagation:p12")
    lcrs = arrow_io.read_arrow_batches(pending)
    ids = lcrs.column("msg_id").to_pylist()
    assert len(ids) == len(set(ids)), "the capture enqueued a change twice"
    propagate_once(spark, cfg, "p12")
    applied = apply_pg_once(None, cfg, "topg")
    assert applied.errors == 0
    result = apply_once(spark, cfg, "toparquet")
    rt, _ = queue_site(cfg, "strm.aq@s2")
    failed = [f"{e.error_kind}: {e.error_message}" for e in errorq.entries(rt.store)]
    assert result.errors == 0 and not failed, f"the Parquet apply failed: {failed[:3]}"


def _compare(pg: Any, spark: Any, cfg: Any, src: str, dst: str) -> None:
    catalog = targets_of(cfg, cfg.component("apply", "toparquet"))
    with pg.connect(src) as s, pg.connect(dst) as d:
        for table, key in TABLES.items():
            expected = s.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
            assert d.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall() == expected, \
                f"{table} differs in the PostgreSQL target"
            cols = [c.name for c in s.execute(f"SELECT * FROM {table} LIMIT 0").description]
            parquet = read_table(spark, catalog, f"public.{table}").select(*cols).collect()
            assert sorted(tuple(r) for r in parquet) == sorted(expected), \
                f"{table} differs in the Parquet target"
            assert expected, f"{table} is empty: the workload did not run"


def test_pgbench_end_to_end_and_capture_killed(
    pg: Any, spark: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any
) -> None:
    cfg, path, src, dst = _setup(pg, workdir, pipeline_file, monkeypatch)
    run_pg_capture(None, cfg, "pgcap")  # creates the slot: capture from the start
    pg.tool("pgbench", "-q", "-i", "-I", "g", "-s", "1", db=src)

    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            run_pg_capture(None, cfg, "pgcap", max_seconds=2)

    capturing = threading.Thread(target=follow)
    capturing.start()
    bench = _pgbench(pg, src, SECONDS)
    out, _ = bench.communicate(timeout=SECONDS + 60)
    stop.set()
    capturing.join()
    assert bench.returncode == 0, out
    _drain_and_apply(spark, cfg)
    _compare(pg, spark, cfg, src, dst)

    # Second run: SIGKILL the capture process at a random moment, then restart it.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    bench = _pgbench(pg, src, max(SECONDS // 2, 5))
    proc = subprocess.Popen([sys.executable, "-c", CAPTURE_SCRIPT, str(path), "120"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(random.uniform(1.0, max(SECONDS // 2 - 1, 2)))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    restarted = subprocess.Popen([sys.executable, "-c", CAPTURE_SCRIPT, str(path), "5"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
    out, _ = bench.communicate(timeout=SECONDS + 60)
    assert bench.returncode == 0, out
    _, err = restarted.communicate(timeout=120)
    assert restarted.returncode == 0, err[-2000:]
    _drain_and_apply(spark, cfg)
    _compare(pg, spark, cfg, src, dst)
