"""The chaos suite: kill stages, overlap runs, cut destinations off; count lost and duplicated.

The product promises that a message is neither lost nor duplicated. This module proves
it on a real pipeline (HR snapshots at site 1 → capture → queue@s1 → propagation →
queue@s2 → apply into Iceberg targets), with real processes:

* :func:`kill_trial` adds a round of source changes, then runs the three stages in
  order; one of them runs as its job entry point (``jobs/<kind>.py``) in a separate
  process that dies with ``kill -9`` semantics, either at a named crash point (before,
  between or after its commits: :mod:`changeflow.faults`) or by a real ``SIGKILL`` at a
  random moment while it holds its lease (during its work). The stage is then re-run
  to completion and the invariants are checked.
* :func:`concurrency_trial` starts two or three runs of one component at once, from
  different entry points (the job file, the ``changeflow run`` command, in-process).
* :func:`outage_trial` makes the destination unwritable for a whole series of
  windows: the backlog is kept, the 16th failure disables the schedule, and after it
  is enabled the backlog drains completely.
* ``--cluster-kills N`` (:mod:`changeflow.testing.chaos_cluster`): the propagation and
  the apply run on a Spark standalone cluster over an object store, and a worker is
  killed while their executors work.

Invariants, checked after every trial (:meth:`Rig.check`): every captured message id
is in queue@s1 once; every one of them reached queue@s2 exactly once (audit consumers
keep both queues' batches for counting); the targets equal the source's final state.

``make chaos`` runs the long size (``python -m changeflow.testing.chaos``) and writes
its figures to ``chaos-results.json``; the test suite runs a few trials per stage.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changeflow.testing.chaos_rig import (
    ROOT,
    STAGES,
    Figures,
    Rig,
    reap,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CRASH_POINTS = {
    "capture": ["capture.after_commit"],
    "propagation": ["propagation.before_destination_commit",
                    "propagation.after_destination_commit", "propagation.after_source_ack"],
    "apply": ["apply.before_commit", "apply.during_commit", "apply.after_commit"],
}


def kill_trial(rig: Rig, figures: Figures, kind: str, *, point: str | None = None,
               rng: random.Random | None = None, targets: bool = True) -> None:
    """One round of changes with ``kind`` killed once: at ``point``, or at random."""
    rng = rng or random.Random()
    rig.new_round()
    for stage in STAGES:
        if stage != kind:
            rig.run(stage)
            continue
        proc = rig.job(kind, crash_at=point)
        if point is None:  # a real SIGKILL at a random moment of the work
            deadline = time.monotonic() + 240
            while rig.lease_holder(kind) is None and proc.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 2.5))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        code, err = reap(proc)
        if code in (137, -9):
            figures.kills += 1
        elif code == 0:
            figures.finished_before_kill += 1  # the point was not reached, or it was too fast
        else:
            figures.failures.append(f"{kind} at {point or 'random'}: exit {code}: {err[-800:]}")
        rig.run(kind)  # recovery: the next run of the stage
    figures.count(f"kill {kind}")
    rig.check(figures, f"kill {kind} at {point or 'random'}", targets=targets)


def concurrency_trial(rig: Rig, figures: Figures, kind: str, runs: int = 2, *,
                      targets: bool = True) -> None:
    """``runs`` simultaneous runs of one component from different entry points."""
    rig.new_round()
    for stage in STAGES[:STAGES.index(kind)]:
        rig.run(stage)
    procs = [rig.job(kind, entry="job")]
    if runs >= 3:
        procs.append(rig.job(kind, entry="cli"))
    errors: list[BaseException] = []

    def inproc() -> None:
        try:
            rig.run(kind)
        except BaseException as exc:  # noqa: BLE001  (reported as a trial failure)
            errors.append(exc)

    t = threading.Thread(target=inproc)
    t.start()
    t.join()
    for p in procs:
        code, err = reap(p)
        if code not in (0, 75):  # 75: waited for the lease and gave up cleanly
            figures.failures.append(f"concurrent {kind}: exit {code}: {err[-800:]}")
    figures.failures += [f"concurrent {kind} in-process: {e!r}" for e in errors]
    figures.count(f"{runs} concurrent {kind}")
    rig.check(figures, f"{runs} concurrent {kind}", targets=targets)


class FastClock:
    """A clock whose sleeps pass at once and ``speed`` times longer: days of retries in seconds.

    The window waits for a retry in short slices (to notice ``alter`` and ``disable``), so
    each slice is stretched: one second of waiting passes an hour by default.
    """

    def __init__(self, speed: float = 3600.0) -> None:
        self.t = dt.datetime.now(dt.UTC)
        self.speed = speed

    def now(self) -> dt.datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += dt.timedelta(seconds=max(0.0, seconds) * self.speed)


def outage_trial(rig: Rig, figures: Figures) -> dict[str, Any]:
    """The destination is unwritable for 16 failed windows; then it drains completely."""
    from changeflow.schedules.window import ensure_schedule, run_window
    from changeflow.sites import consumer_name, queue_site

    rig.new_round()
    rig.run("capture")
    src_rt, src_q = queue_site(rig.cfg, "strmadmin.streams_queue@s1")
    backlog = sum(b.n_messages for b in src_rt.catalog.pending(src_q, consumer_name(
        "propagation", "p12")))
    dst_rt, dst_q = queue_site(rig.cfg, "strmadmin.streams_queue@s2")
    qdir = Path(dst_rt.catalog.queue_path(dst_q))
    qdir.mkdir(parents=True, exist_ok=True)
    moved = qdir.with_name(qdir.name + ".away")
    qdir.rename(moved)
    qdir.write_text("not a directory: the destination is unwritable")
    clock = FastClock()
    store = ensure_schedule(rig.cfg, "p12", clock.now())
    report = run_window(rig.spark, rig.cfg, "p12", start=clock.now(),
                        end=clock.now() + dt.timedelta(days=30), clock=clock)  # type: ignore[arg-type]
    row = store.require("p12")
    kept = sum(b.n_messages for b in src_rt.catalog.pending(src_q, consumer_name(
        "propagation", "p12")))
    out = {"backlog": backlog, "kept": kept, "failures": row.state.failures,
           "disabled": row.disabled, "reason": row.disabled_reason,
           "alerts": [a["event"] for a in report.alerts], "errors": report.errors[:1]}
    if not (row.disabled and row.disabled_reason == "failures" and row.state.failures == 16
            and kept == backlog):
        figures.failures.append(f"outage: {out}")
    qdir.unlink()
    moved.rename(qdir)
    store.set_disabled("p12", False)
    past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    run_window(rig.spark, rig.cfg, "p12", start=past, end=past + dt.timedelta(minutes=30))
    out["left_after_enable"] = sum(b.n_messages for b in src_rt.catalog.pending(
        src_q, consumer_name("propagation", "p12")))
    if out["left_after_enable"]:
        figures.failures.append(f"outage: backlog did not drain: {out}")
    figures.count("outage")
    rig.check(figures, "outage")
    return out


def run_suite(spark: SparkSession, root: Path, *, kill_rounds: int, concurrency_rounds: int,
              outage: bool, seed: int, state_urls: tuple[str, str] | None = None,
              pgbench_seconds: int = 0, progress: bool = False,
              on_trial: Any = None) -> dict:
    """Run the trials in a fresh rig under ``root``. Returns the figures as a dict.

    ``on_trial`` is called with the :class:`Figures` after every trial.
    """
    rng = random.Random(seed)
    figures = Figures(progress=progress, on_trial=on_trial)
    rig = Rig(root, spark, state_urls=state_urls)
    rig.run("capture")
    rig.check(figures, "initial load")
    extra: dict[str, Any] = {}
    for i in range(kill_rounds):
        for kind in STAGES:
            points = [*CRASH_POINTS[kind], None]
            kill_trial(rig, figures, kind, point=points[i % len(points)] if i < len(points)
                       else rng.choice(points), rng=rng, targets=kind == "apply")
    for i in range(concurrency_rounds):
        for kind in STAGES:
            concurrency_trial(rig, figures, kind, runs=2 + (i % 2))
    if outage:
        extra["outage"] = outage_trial(rig, figures)
    if pgbench_seconds:
        from changeflow.testing.chaos_pgbench import pgbench_trial

        pg_root = root / "pgbench"
        pg_root.mkdir()
        extra["pgbench"] = pgbench_trial(spark, pg_root, figures, seconds=pgbench_seconds,
                                         rng=rng, state_urls=None)
    return {**figures.as_dict(), **extra}


def main(argv: list[str] | None = None) -> int:
    """``make chaos``: the long size; figures in a results file."""
    p = argparse.ArgumentParser(prog="python -m changeflow.testing.chaos", description=__doc__)
    p.add_argument("--kill-rounds", type=int, default=17,
                   help="rounds of kills; each kills capture, propagation and apply once")
    p.add_argument("--concurrency-rounds", type=int, default=2)
    p.add_argument("--postgres", action="store_true",
                   help="state stores on a throwaway PostgreSQL (besides SQLite)")
    p.add_argument("--postgres-only", action="store_true",
                   help="only the PostgreSQL state stores (implies --postgres)")
    p.add_argument("--pgbench-seconds", type=int, default=60,
                   help="pgbench workload with a random kill of every stage (0: skip)")
    p.add_argument("--cluster-kills", type=int, default=0,
                   help="worker kills on a standalone cluster over an object store (each "
                        "round kills a worker during the propagation and during the apply)")
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--out", default=str(ROOT / "chaos-results.json"))
    args = p.parse_args(argv)
    from changeflow.spark import get_session

    spark = get_session("changeflow-chaos")
    spark.sparkContext.setLogLevel("ERROR")
    results: dict[str, Any] = {"seed": args.seed, "started": dt.datetime.now(dt.UTC).isoformat()}
    stores: list[tuple[str, tuple[str, str] | None]] = [] if args.postgres_only else [
        ("sqlite", None)]
    cluster = None
    if args.postgres or args.postgres_only:
        from changeflow.testing.pg_cluster import PgCluster

        cluster = PgCluster().start()
        s1, s2 = (cluster.createdb(f"chaos_s{i}").replace(
            "postgresql://", "postgresql+psycopg://", 1) for i in (1, 2))
        stores.append(("postgres", (s1, s2)))
    try:
        for label, urls in stores:
            work = Path(tempfile.mkdtemp(prefix=f"changeflow-chaos-{label}-"))

            def save(figures: Figures, label: str = label) -> None:  # partial, after each trial
                results[label] = {**figures.as_dict(), "complete": False}
                Path(args.out).write_text(json.dumps(results, indent=2, default=str))

            try:
                results[label] = run_suite(spark, work, kill_rounds=args.kill_rounds,
                                           concurrency_rounds=args.concurrency_rounds,
                                           outage=True, seed=args.seed, state_urls=urls,
                                           pgbench_seconds=args.pgbench_seconds
                                           if label == "sqlite" else 0, progress=True,
                                           on_trial=save)
                results[label]["complete"] = True
            finally:
                shutil.rmtree(work, ignore_errors=True)
            Path(args.out).write_text(json.dumps(results, indent=2, default=str))
            r = results[label]
            print(f"{label}: {r['trials']} trials, {r['kills']} kills, {r['messages']} messages, "
                  f"{r['lost']} lost, {r['duplicated']} duplicated, "
                  f"{r['target_mismatches']} target mismatches: {'OK' if r['ok'] else 'FAILED'}")
    finally:
        if cluster is not None:
            cluster.stop()
    if args.cluster_kills:
        from changeflow.testing.chaos_cluster import run_cluster_trials

        results["cluster"] = run_cluster_trials(spark, rounds=args.cluster_kills,
                                                seed=args.seed, progress=True)
        stores.append(("cluster", None))
    results["finished"] = dt.datetime.now(dt.UTC).isoformat()
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    return 0 if all(results[label]["ok"] for label, _ in stores) else 1


if __name__ == "__main__":
    sys.exit(main())
