"""The chaos suite's rig: a pipeline in a directory, its figures and invariants.

:class:`Rig` builds the chaos pipeline (HR snapshots at site 1 → capture → queue@s1 →
propagation → queue@s2 → apply into Iceberg targets), runs its stages in-process or as
separate processes, and checks the invariants (:meth:`Rig.check`); :class:`Figures`
counts what the trials did and found. The trials themselves are in
:mod:`changeflow.testing.chaos` (kills, concurrent runs, outages) and
:mod:`changeflow.testing.chaos_cluster` (a Spark worker lost mid-stage).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[3]
AUDIT = "audit:chaos"
STAGES = ("capture", "propagation", "apply")
NAMES = {"capture": "cap", "propagation": "p12", "apply": "ap"}

PIPELINE = """
version: 1
sites:
  s1: {staging_root: s1/staging, target_root: s1/targets, state_url: "STATE1",
       database: DBS1.EXAMPLE.COM}
  s2: {staging_root: s2/staging, target_root: s2/targets, state_url: "STATE2",
       database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.streams_queue, site: s1}
  - {name: strmadmin.streams_queue, site: s2}
captures:
  - name: cap
    queue: strmadmin.streams_queue@s1
    source:
      type: snapshot
      database: DBS1.EXAMPLE.COM
      root: source
      tables:
        - {name: hr.departments, key: [department_id]}
        - {name: hr.employees, key: [employee_id]}
        - {name: hr.job_history, key: [employee_id, start_date]}
propagations:
  - name: p12
    source_queue: strmadmin.streams_queue@s1
    destination_queue: strmadmin.streams_queue@s2
    limits: {max_messages: 400}
applies:
  - {name: ap, queue: strmadmin.streams_queue@s2, buckets: 4}
"""


@dataclass
class Figures:
    """What the trials did and what they found."""

    trials: int = 0
    kills: int = 0
    finished_before_kill: int = 0
    messages: int = 0
    lost: int = 0
    duplicated: int = 0
    target_mismatches: int = 0
    by_scenario: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    progress: bool = field(default=False, repr=False)
    started: float = field(default_factory=time.monotonic, repr=False)
    #: Called with the figures after each trial (the long size saves partial results).
    on_trial: Any = field(default=None, repr=False)

    def count(self, scenario: str) -> None:
        self.trials += 1
        self.by_scenario[scenario] = self.by_scenario.get(scenario, 0) + 1
        if self.progress:  # the long size runs for an hour: say where it is
            print(f"[{time.monotonic() - self.started:7.0f} s] trial {self.trials}: {scenario}"
                  f" (kills {self.kills}, lost {self.lost}, duplicated {self.duplicated},"
                  f" failures {len(self.failures)})", file=sys.stderr, flush=True)
        if self.on_trial is not None:
            self.on_trial(self)

    def as_dict(self) -> dict[str, Any]:
        """The figures without the run's private fields."""
        out = {k: v for k, v in asdict(self).items()
               if k not in ("progress", "started", "on_trial")}
        return {**out, "ok": self.ok, "seconds": round(time.monotonic() - self.started)}

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.target_mismatches or self.failures)


class Rig:
    """A chaos pipeline in a directory, with the session that runs its stages in-process.

    Args:
        root: an empty directory.
        spark: the session for in-process runs and checks.
        state_urls: the two sites' state stores (default: SQLite files under ``root``).
        employees: size of the HR source.
        changes: changes per round.
    """

    def __init__(self, root: Path, spark: SparkSession, *, state_urls: tuple[str, str] | None
                 = None, employees: int = 150, changes: int = 60, roots: str | None = None):
        from changeflow.config import load_config
        from changeflow.demo import hr

        self.root, self.spark, self.changes, self.employees = root, spark, changes, employees
        s1, s2 = state_urls or ("sqlite:///s1/state.db", "sqlite:///s2/state.db")
        text = PIPELINE.replace("STATE1", s1).replace("STATE2", s2)
        if roots:  # staging and target roots under a URI (an object store's bucket)
            for key in ("staging_root: ", "target_root: "):
                text = text.replace(f"{key}s", f"{key}{roots.rstrip('/')}/s")
        self.config = root / "pipeline.yaml"
        self.config.write_text(textwrap.dedent(text))
        hr.generate(str(root / "source"), rounds=0, employees=employees, changes=changes)
        self.cfg = load_config(self.config)
        self._add_auditors()

    def _add_auditors(self) -> None:
        from changeflow.sites import open_pipeline, queue_site

        open_pipeline(self.cfg)
        for ref in ("strmadmin.streams_queue@s1", "strmadmin.streams_queue@s2"):
            rt, q = queue_site(self.cfg, ref)
            rt.catalog.add_consumer(q, AUDIT, "audit")

    # -- running stages ----------------------------------------------------------------
    def new_round(self) -> None:
        """Write the next source snapshot (inserts, updates, deletes)."""
        from changeflow.demo import hr

        hr.generate(str(self.root / "source"), rounds=1, employees=self.employees,
                    changes=self.changes)

    def run(self, kind: str) -> Any:
        """Run a stage to completion in this process."""
        from changeflow.runner import run_component

        return run_component(self.spark, self.cfg, kind, NAMES[kind], lease_wait=120)

    def job(self, kind: str, *, crash_at: str | None = None, entry: str = "job",
            ) -> subprocess.Popen[str]:
        """Start a stage as a separate process: its job file, or the ``changeflow`` CLI."""
        env = {**os.environ, "CHANGEFLOW_DRIVER_MEMORY": "1g",
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        env.pop("CHANGEFLOW_CRASH_AT", None)
        if crash_at:
            env["CHANGEFLOW_CRASH_AT"] = crash_at
        if entry == "cli":
            argv = [str(Path(sys.executable).parent / "changeflow"), "run", kind, NAMES[kind],
                    "--config", str(self.config)]
        else:
            argv = [sys.executable, str(ROOT / "jobs" / f"{kind}.py"), "--config",
                    str(self.config), "--name", NAMES[kind], "--lease-wait", "120"]
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    def lease_holder(self, kind: str) -> str | None:
        """The owner of a stage's lease, when a run holds it."""
        from changeflow.sites import queue_site
        from changeflow.state.leases import holder

        spec = self.cfg.component(kind, NAMES[kind])
        ref = spec.queue if kind != "propagation" else spec.source_queue
        rt, _ = queue_site(self.cfg, ref)
        found = holder(rt.store, f"{kind}:{NAMES[kind]}")
        return None if found is None else str(found["owner"])

    # -- invariants --------------------------------------------------------------------
    def _ids(self, ref: str) -> list[str]:
        from changeflow.queues import arrow_io
        from changeflow.sites import queue_site

        rt, q = queue_site(self.cfg, ref)
        batches = rt.catalog.pending(q, AUDIT)
        if not batches:
            return []
        return [str(m) for m in arrow_io.read_arrow_batches(batches).column("msg_id")
                .to_pylist()]

    def check(self, figures: Figures, label: str, *, targets: bool = True) -> None:
        """Run every stage to completion, count lost/duplicated, compare the targets.

        Counting message ids is cheap; comparing every target with the source's final
        state runs Spark jobs, so ``targets=False`` skips it (a later check compares).
        """
        import contextlib
        import io

        from changeflow.demo.verify import verify

        for kind in STAGES:
            self.run(kind)
        at1, at2 = self._ids("strmadmin.streams_queue@s1"), self._ids("strmadmin.streams_queue@s2")
        dup = sum(n - 1 for n in Counter(at1).values() if n > 1) + sum(
            n - 1 for n in Counter(at2).values() if n > 1)
        lost = len(set(at1) - set(at2))
        figures.messages = len(set(at1))
        figures.duplicated += dup
        figures.lost += lost
        if dup or lost:
            figures.failures.append(f"{label}: {lost} lost, {dup} duplicated")
        if not targets:
            return
        with contextlib.redirect_stdout(io.StringIO()):
            result = verify(self.spark, self.cfg, "ap")
        if not result.ok:
            figures.target_mismatches += 1
            figures.failures.append(f"{label}: targets differ from the source\n{result.report()}")


def reap(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    return proc.returncode, err or ""
