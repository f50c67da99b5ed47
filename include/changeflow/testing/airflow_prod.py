"""Airflow as deployed: LocalExecutor on a PostgreSQL metadata database, busy windows.

``make airflow-prod`` and ``tests/integration/airflow/test_airflow_prod.py`` run
:func:`run`: a throwaway PostgreSQL holds Airflow's metadata database and both sites'
state stores; Airflow's scheduler, DAG processor and API server run as separate
processes with the LocalExecutor (parallelism 4). The pipeline has three propagations
(``pa``, ``pb``, ``pc``: ``strmadmin.q{a,b,c}@site1`` → ``…@site2``), each on a window of
20 s every 30 s from the same start, so the three windows overlap, and an apply ``ap``
of ``strmadmin.qa@site2`` into Iceberg targets, triggered while the windows run.

Probe messages are enqueued into the three source queues all along. After the first
green window of ``pc`` its destination is made unwritable (its queue directory replaced
by a file) until the next ``pc`` run has finished, which must end red; then it is
restored, and the backlog must drain in the next window. At the end: every run's state
is what it should be, each schedule's statistics count exactly the messages that reached
its destination, and every message crossed exactly once.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from changeflow.airflow.testing import AirflowServer

ROOT = Path(__file__).resolve().parents[3]
PROPAGATIONS = ("pa", "pb", "pc")
AUDIT = "audit:prod"
PIPELINE = """
version: 1
sites:
  site1: {staging_root: s1/staging, target_root: s1/t, state_url: "STATE1",
          database: DBS1.EXAMPLE.COM}
  site2: {staging_root: s2/staging, target_root: s2/t, state_url: "STATE2",
          database: DBS2.EXAMPLE.COM}
queues:
QUEUES
propagations:
PROPS
applies:
  - {name: ap, queue: strmadmin.qa@site2, buckets: 2}
"""


def pipeline_text(state1: str, state2: str, start: str) -> str:
    """The pipeline: three overlapping window schedules and an apply."""
    queues = "\n".join(f"  - {{name: strmadmin.q{p[1]}, site: site{n}}}"
                       for p in PROPAGATIONS for n in (1, 2))
    props = "\n".join(
        f"  - {{name: {p}, source_queue: strmadmin.q{p[1]}@site1, destination_queue: "
        f"strmadmin.q{p[1]}@site2, schedule: {{start: \"{start}\", duration: 20, "
        f"next_time: 30, latency: 1}}}}" for p in PROPAGATIONS)
    return PIPELINE.replace("STATE1", state1).replace("STATE2", state2) \
        .replace("QUEUES", queues).replace("PROPS", props)


def _dag(kind: str, name: str) -> str:
    return f"changeflow_prod__{kind}__{name}"


class Enqueuer(threading.Thread):
    """Enqueues probe batches into the source queues every few seconds until stopped."""

    def __init__(self, cfg: Any, every: float = 7.0) -> None:
        super().__init__(name="probe-enqueuer", daemon=True)
        self.cfg, self.every = cfg, every
        self.sent: dict[str, list[str]] = {p: [] for p in PROPAGATIONS}
        self.stop_event = threading.Event()
        self.scn = 1

    def run(self) -> None:
        from changeflow.schedules import probe

        n = 0
        while not self.stop_event.is_set():
            for p in PROPAGATIONS:
                ids = [f"{p}-{n}-{i}" for i in range(5)]
                probe.enqueue_probes(self.cfg, f"strmadmin.q{p[1]}@site1", ids, scn=self.scn)
                self.scn += len(ids)
                self.sent[p] += ids
            n += 1
            self.stop_event.wait(self.every)


def _finished(server: AirflowServer, dag: str) -> list[dict[str, Any]]:
    return sorted((r for r in server.runs(dag) if r["state"] in ("success", "failed")),
                  key=lambda r: r.get("start_date") or "")


def _wait(pred: Any, timeout: float, what: str, server: AirflowServer) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        server._check_alive()  # noqa: SLF001
        time.sleep(2)
    raise TimeoutError(f"{what} after {timeout} s\n{server.logs()}")


def run(work: Path, *, windows: int = 3) -> dict[str, Any]:
    """Run the scenario under ``work``; returns what happened (see the module's doc)."""
    import datetime as dt

    from changeflow.airflow.render import write
    from changeflow.config import load_config
    from changeflow.schedules import probe
    from changeflow.schedules.window import schedule_store
    from changeflow.sites import open_pipeline, queue_site
    from changeflow.testing.pg_cluster import PgCluster

    work.mkdir(parents=True, exist_ok=True)
    pg = PgCluster().start()
    server = None
    enq = None
    try:
        pg.createdb("airflow")
        s1, s2 = (pg.createdb(f"prod_s{i}").replace("postgresql://", "postgresql+psycopg://", 1)
                  for i in (1, 2))
        start = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)).replace(microsecond=0)
        (work / "dags").mkdir(exist_ok=True)
        (work / "p.yaml").write_text(pipeline_text(s1, s2, start.isoformat()))
        cfg = load_config(work / "p.yaml")
        open_pipeline(cfg)
        for p in PROPAGATIONS:  # audit consumers keep every batch, to count messages
            for n in (1, 2):
                rt, q = queue_site(cfg, f"strmadmin.q{p[1]}@site{n}")
                rt.catalog.add_consumer(q, AUDIT, "audit")
        write(cfg, project_root=str(work), pipeline="prod", out_dir=str(work / "dags"))
        if not (work / "jobs").exists():
            (work / "jobs").symlink_to(ROOT / "jobs")
        where = f"postgres@127.0.0.1:{pg.port}/airflow"  # TCP: Airflow's URL takes no socket
        server = AirflowServer(work / "airflow", work / "dags", env={
            "CHANGEFLOW_CONFIG": str(work / "p.yaml"), "CHANGEFLOW_PIPELINE": "prod",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{where}",
            # Airflow's async engine would take asyncpg (not installed); psycopg 3 is async
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": f"postgresql+psycopg://{where}",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False"})
        server.start()
        for p in PROPAGATIONS:
            server.wait_for_dag(_dag("propagation", p))
        server.wait_for_dag(_dag("apply", "ap"))
        enq = Enqueuer(cfg)
        enq.start()
        # the outage: after pc's first green window, from a moment no pc run is at work
        # until the first pc run started during it has finished
        pc = _dag("propagation", "pc")
        first = _wait(lambda: [r for r in _finished(server, pc) if r["state"] == "success"],
                      600, "no green window of pc", server)
        _wait(lambda: not [r for r in server.runs(pc) if r["state"] in ("queued", "running")],
              300, "pc never idle", server)
        rt, q = queue_site(cfg, "strmadmin.qc@site2")
        qdir = Path(rt.catalog.queue_path(q))
        away = qdir.with_name(qdir.name + ".away")
        qdir.rename(away)
        qdir.write_text("the destination is unavailable")
        broken = dt.datetime.now(dt.UTC).isoformat()
        server.api("POST", f"/api/v2/dags/{_dag('apply', 'ap')}/dagRuns", {"logical_date": None})
        during = _wait(lambda: [r for r in _finished(server, pc)
                                if (r.get("start_date") or "") >= broken], 600,
                       "no pc run during the outage", server)
        qdir.unlink()
        away.rename(qdir)
        restored = dt.datetime.now(dt.UTC).isoformat()
        _wait(lambda: all(len([r for r in _finished(server, _dag("propagation", p))
                               if r["run_type"] == "scheduled"]) >= windows + 1
                          for p in PROPAGATIONS), 1200, f"{windows + 1} windows each", server)
        enq.stop_event.set()
        enq.join()
        # the last messages: one more window each, then the apply
        last = {p: len(_finished(server, _dag("propagation", p))) for p in PROPAGATIONS}
        _wait(lambda: all(len(_finished(server, _dag("propagation", p))) > last[p]
                          for p in PROPAGATIONS), 600, "a window after the last enqueue",
              server)
        made = server.api("POST", f"/api/v2/dags/{_dag('apply', 'ap')}/dagRuns",
                          {"logical_date": None})
        server.wait_for_run(_dag("apply", "ap"),
                            lambda r: r["dag_run_id"] == made["dag_run_id"], timeout=600)
        runs = {p: [(r["run_type"], r["state"], r["dag_run_id"], r.get("start_date") or "")
                    for r in _finished(server, _dag("propagation", p))] for p in PROPAGATIONS}
        runs["ap"] = [(r["run_type"], r["state"], r["dag_run_id"], r.get("start_date") or "")
                      for r in _finished(server, _dag("apply", "ap"))]
        stats = {}
        for p in PROPAGATIONS:
            row = schedule_store(cfg, p).require(p)
            stats[p] = {"total_number": row.stats.total_number, "windows": row.stats.windows,
                        "failures": row.state.failures, "disabled": row.disabled}
        return {"runs": runs, "outage": [broken, restored],
                "outage_runs": [r["dag_run_id"] for r in during],
                "first_green": first[0]["dag_run_id"], "sent": enq.sent,
                "at_source": {p: probe.arrived(cfg, f"strmadmin.q{p[1]}@site1", AUDIT)
                              for p in PROPAGATIONS},
                "delivered": {p: probe.arrived(cfg, f"strmadmin.q{p[1]}@site2", AUDIT)
                              for p in PROPAGATIONS},
                "stats": stats, "applied_rows": _applied_rows(cfg), "logs": server.logs(2000)}
    finally:
        if enq is not None:
            enq.stop_event.set()
        if server is not None:
            server.stop()
        pg.stop()


def _applied_rows(cfg: Any) -> int:
    from changeflow.apply.engine import targets_of
    from changeflow.targets.read import read_arrow

    try:
        return int(read_arrow(targets_of(cfg, cfg.component("apply", "ap")),
                              "probe.ping").num_rows)
    except Exception:  # noqa: BLE001  (no table yet: nothing applied)
        return 0


def main(argv: list[str] | None = None) -> int:
    """``make airflow-prod``: the scenario once; prints its figures, exits 1 on a miss."""
    args = argv if argv is not None else sys.argv[1:]
    work = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="changeflow-airflow-prod-"))
    result = run(work.resolve())
    logs = result.pop("logs")
    print(json.dumps(result, indent=2, default=str))
    problems = check(result)
    for p in problems:
        print(f"MISS: {p}", file=sys.stderr)
    if problems:
        print(logs, file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    print("airflow-prod " + ("PASSED" if not problems else "FAILED"))
    return 1 if problems else 0


def check(result: dict[str, Any]) -> list[str]:
    """What went wrong, if anything: run states, statistics, lost or duplicated messages."""
    problems = []
    broken, restored = result["outage"]
    for p in PROPAGATIONS:
        for kind, state, run_id, started in result["runs"][p]:
            red = p == "pc" and broken <= started < restored
            want = "failed" if red else "success"
            if state != want:
                problems.append(f"{p} run {run_id} ({kind}, started {started}) ended {state}, "
                                f"expected {want}")
        sent, held = result["sent"][p], result["delivered"][p]
        dup = sum(n - 1 for n in Counter(held).values() if n > 1)
        lost = len(set(sent) - set(held))
        if dup or lost or set(held) - set(sent):
            problems.append(f"{p}: {len(sent)} sent, {lost} lost, {dup} duplicated")
        st = result["stats"][p]
        if st["total_number"] != len(held):
            problems.append(f"{p}: statistics count {st['total_number']} messages, the "
                            f"destination holds {len(held)}")
        if st["failures"] or st["disabled"]:
            problems.append(f"{p}: schedule left failing or disabled: {st}")
    if not result["outage_runs"]:
        problems.append("no pc window ran during the outage")
    if any(s != "success" for _, s, _, _ in result["runs"]["ap"]):
        problems.append(f"apply runs: {result['runs']['ap']}")
    if result["applied_rows"] != len(result["sent"]["pa"]):
        problems.append(f"apply: {result['applied_rows']} rows, {len(result['sent']['pa'])} sent")
    return problems


if __name__ == "__main__":
    sys.exit(main())
