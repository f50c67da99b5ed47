"""The chaos suite's pgbench trial: a PostgreSQL source under load, every stage killed once.

Part of ``make chaos`` (:func:`changeflow.testing.chaos.run_suite`).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changeflow.testing.chaos_rig import AUDIT, NAMES, Figures, Rig, reap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


PG_PIPELINE = """
version: 1
sites:
  s1: {staging_root: s1/staging, target_root: s1/targets, state_url: "STATE1",
       database: PG1.EXAMPLE.COM}
  s2: {staging_root: s2/staging, target_root: s2/targets, state_url: "STATE2",
       database: PG2.EXAMPLE.COM}
queues:
  - {name: strm.cq, site: s1}
  - {name: strm.aq, site: s2}
captures:
  - name: pgcap
    queue: strm.cq@s1
    source: {type: postgres, database: PG1.EXAMPLE.COM, url_env: CF_CHAOS_PG_SRC,
             slot: chaos_slot, schemas: [public], batch_changes: 5000}
propagations:
  - {name: p12, source_queue: strm.cq@s1, destination_queue: strm.aq@s2}
applies:
  - {name: topg, queue: strm.aq@s2, target: {type: postgres, url_env: CF_CHAOS_PG_DST}}
  - {name: toparquet, queue: strm.aq@s2}
"""
PG_TABLES = {"pgbench_accounts": "aid", "pgbench_branches": "bid", "pgbench_tellers": "tid",
             "pgbench_history": "hid"}


def pgbench_trial(spark: SparkSession, root: Path, figures: Figures, *, seconds: int,
                  rng: random.Random, state_urls: tuple[str, str] | None = None) -> dict:
    """pgbench on a PostgreSQL source for ``seconds``, each stage SIGKILLed once meanwhile.

    Then every stage runs to completion; both targets (PostgreSQL and Parquet) must
    equal the source, and every message id must have crossed exactly once.
    """
    from changeflow.config import load_config
    from changeflow.sites import open_pipeline, queue_site
    from changeflow.testing.pg_cluster import PgCluster

    pg = PgCluster().start()
    try:
        os.environ["CF_CHAOS_PG_SRC"] = pg.createdb("chaos_src")
        os.environ["CF_CHAOS_PG_DST"] = pg.createdb("chaos_dst")
        for db in ("chaos_src", "chaos_dst"):
            pg.tool("pgbench", "-q", "-i", "-I", "dtp", "-s", "1", db=db)
            pg.sql(db, "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")
        s1, s2 = state_urls or ("sqlite:///s1/state.db", "sqlite:///s2/state.db")
        path = root / "pg-pipeline.yaml"
        path.write_text(textwrap.dedent(PG_PIPELINE).replace("STATE1", s1).replace(
            "STATE2", s2))
        cfg = load_config(path)
        open_pipeline(cfg)
        for ref in ("strm.cq@s1", "strm.aq@s2"):
            rt, q = queue_site(cfg, ref)
            rt.catalog.add_consumer(q, AUDIT, "audit")
        rig = _PgRig(root, spark, cfg, path)
        rig.run("capture", "pgcap")  # creates the slot: capture from the start
        pg.tool("pgbench", "-q", "-i", "-I", "g", "-s", "1", db="chaos_src")
        bench = subprocess.Popen(pg.argv("pgbench", "-n", "-c", "4", "-j", "2", "-T",
                                         str(seconds), "-R", "300", db="chaos_src"),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        killed = []
        for kind, name in (("capture", "pgcap"), ("propagation", "p12"), ("apply", "topg"),
                           ("apply", "toparquet")):
            proc = rig.job(kind, name)
            time.sleep(rng.uniform(8.0, 25.0))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                killed.append(f"{kind} {name}")
                figures.kills += 1
            else:
                figures.finished_before_kill += 1
            reap(proc)
        out, _ = bench.communicate(timeout=seconds + 120)
        for kind, name in (("capture", "pgcap"), ("propagation", "p12"), ("apply", "topg"),
                           ("apply", "toparquet")):
            rig.run(kind, name)
        figures.count("pgbench")
        return {"killed": killed, **rig.compare(pg, figures)}
    finally:
        pg.stop()


class _PgRig(Rig):
    """The pgbench pipeline: the stage runners of :class:`Rig` with other names."""

    def __init__(self, root: Path, spark: SparkSession, cfg: Any, config: Path):
        self.root, self.spark, self.cfg, self.config = root, spark, cfg, config

    def run(self, kind: str, name: str | None = None) -> Any:  # type: ignore[override]
        from changeflow.runner import run_component

        while True:
            res = run_component(self.spark, self.cfg, kind, name or NAMES[kind], lease_wait=120)
            if kind != "propagation" or not getattr(res, "more_pending", False):
                return res

    def job(self, kind: str, name: str | None = None, **_: Any) -> subprocess.Popen[str]:  # type: ignore[override]
        saved = NAMES[kind]
        NAMES[kind] = name or saved
        try:
            return super().job(kind)
        finally:
            NAMES[kind] = saved

    def compare(self, pg: Any, figures: Figures) -> dict:
        from changeflow.apply.engine import targets_of
        from changeflow.targets.read import read_table

        at1, at2 = self._ids("strm.cq@s1"), self._ids("strm.aq@s2")
        dup = sum(n - 1 for n in Counter(at1).values() if n > 1) + sum(
            n - 1 for n in Counter(at2).values() if n > 1)
        lost = len(set(at1) - set(at2))
        figures.messages += len(set(at1))
        figures.duplicated += dup
        figures.lost += lost
        targets = targets_of(self.cfg, self.cfg.component("apply", "toparquet"))
        differs = []
        with pg.connect("chaos_src") as s, pg.connect("chaos_dst") as d:
            for table, key in PG_TABLES.items():
                expected = s.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
                if d.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall() != expected:
                    differs.append(f"{table} (PostgreSQL target)")
                cols = [c.name for c in s.execute(f"SELECT * FROM {table} LIMIT 0").description]
                rows = read_table(self.spark, targets, f"public.{table}").select(*cols).collect()
                if sorted(tuple(r) for r in rows) != sorted(expected):
                    differs.append(f"{table} (Iceberg target)")
        if differs or dup or lost:
            figures.target_mismatches += bool(differs)
            figures.failures.append(f"pgbench: {lost} lost, {dup} duplicated, differ: {differs}")
        return {"messages": len(set(at1)), "lost": lost, "duplicated": dup, "differ": differs}
