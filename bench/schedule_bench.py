"""Schedule benchmarks: latency inside an open window, DAG parse time.

- *latency*: a window with latency = 1 s runs in this Spark application; 200 messages
  are enqueued at the source, spread over the window (5 every 0.5 s); each message's
  time from enqueue to visible at the destination is measured. Target: p95 <= 5 s.
  Baseline: the configured latency.
- *parse*: the DAG file of a pipeline with 200 scheduled propagations is executed
  (what the DAG processor does) against a file with one empty DAG, same process.
  Target: under 1 s for all of them.
"""

from __future__ import annotations

import datetime as dt
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.results import entry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SITES = """
version: 1
sites:
  site1: {staging_root: s1/staging, target_root: s1/t, state_url: "sqlite:///s1/state.db",
          database: DBS1.EXAMPLE.COM}
  site2: {staging_root: s2/staging, target_root: s2/t, state_url: "sqlite:///s2/state.db",
          database: DBS2.EXAMPLE.COM}
"""
EMPTY_DAG = """
import datetime as dt
from airflow.sdk import DAG
with DAG(dag_id="empty", start_date=dt.datetime(2024, 1, 1), schedule=None) as dag:
    pass
"""


def _latency(spark: SparkSession, work: Path, n_messages: int = 200) -> dict[str, Any]:
    from changeflow.config import load_config
    from changeflow.schedules import probe
    from changeflow.schedules.window import ensure_schedule, run_window

    (work / "p.yaml").write_text(SITES + """
queues:
  - {name: strmadmin.q, site: site1}
  - {name: strmadmin.q, site: site2}
propagations:
  - {name: p, source_queue: strmadmin.q@site1, destination_queue: strmadmin.q@site2,
     schedule: {latency: 1}}
applies:
  - {name: ap, queue: strmadmin.q@site2}
""")
    cfg = load_config(work / "p.yaml")
    src, dst = "strmadmin.q@site1", "strmadmin.q@site2"
    start = dt.datetime.now(dt.UTC)
    t = threading.Thread(target=run_window, args=(spark, cfg, "p"),
                         kwargs={"start": start, "end": start + dt.timedelta(hours=1)})
    t.start()
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}

    def wait_for(ids: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not set(ids) <= set(seen) and time.monotonic() < deadline:
            now = time.monotonic()
            for m in probe.arrived(cfg, dst, "apply:ap"):
                seen.setdefault(m, now)
            time.sleep(0.05)

    probe.enqueue_probes(cfg, src, ["warm"], scn=1)  # Spark/quality warm-up, not measured
    wait_for(["warm"], 120)
    poller_stop = threading.Event()

    def poll() -> None:
        while not poller_stop.is_set():
            wait_for(list(sent), 0.2)

    poller = threading.Thread(target=poll)
    poller.start()
    for i in range(0, n_messages, 5):
        ids = [f"m{j}" for j in range(i, i + 5)]
        probe.enqueue_probes(cfg, src, ids, scn=10 + i)
        now = time.monotonic()
        sent.update({m: now for m in ids})
        time.sleep(0.5)
    deadline = time.monotonic() + 120
    while not set(sent) <= set(seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    poller_stop.set()
    poller.join()
    ensure_schedule(cfg, "p", start).set_disabled("p", True, "bench done")
    t.join(timeout=30)
    delays = sorted(seen[m] - sent[m] for m in sent if m in seen)
    p95 = delays[max(0, int(len(delays) * 0.95) - 1)] if delays else float("inf")
    return entry("schedule_window_latency", value=p95, unit="s", judged="value",
                 baseline="the configured latency (1 s)", baseline_value=1.0, target=5.0,
                 direction="<=", headline=True, figures={
                     "messages": len(sent), "arrived": len(delays),
                     "p50_s": round(statistics.median(delays), 3) if delays else None,
                     "p95_s": round(p95, 3)})


def _parse(work: Path, n: int = 200) -> dict[str, Any]:
    import airflow.sdk  # noqa: F401  (import cost is not the DAG file's)

    from changeflow.airflow.render import write
    from changeflow.config import load_config

    queues = "".join(f"  - {{name: strmadmin.q{i}, site: site1}}\n" for i in range(n + 1))
    props = "".join(
        f"  - {{name: p{i}, source_queue: strmadmin.q0, destination_queue: strmadmin.q{i + 1},"
        f" schedule: {{duration: 300, next_time: 3600, latency: 20}}}}\n" for i in range(n))
    (work / "many.yaml").write_text(SITES.replace("  site2:", "  x:").split("  x:")[0]
                                    + "queues:\n" + queues + "propagations:\n" + props)
    cfg = load_config(work / "many.yaml")
    (work / "dags").mkdir(exist_ok=True)
    dag_file = write(cfg, project_root=str(work), pipeline="many", out_dir=str(work / "dags"))
    empty = work / "dags" / "empty.py"
    empty.write_text(EMPTY_DAG)

    def timed(path: Path) -> float:
        code = compile(path.read_text(), str(path), "exec")
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            exec(code, {"__file__": str(path), "__name__": "bench_dag"})  # noqa: S102
            best = min(best, time.perf_counter() - t0)
        return best

    timed(dag_file)  # first run imports the provider and changeflow modules
    seconds, base = timed(dag_file), timed(empty)
    return entry("schedule_dag_parse", value=seconds, unit="s", judged="value",
                 baseline="a DAG file with one empty DAG, same process", baseline_value=base,
                 target=1.0, direction="<=", headline=True,
                 figures={"propagations": n, "dags": n + 1})


def run(spark: SparkSession, n_rows: int) -> list[dict]:
    """Both schedule benchmarks (``n_rows`` is unused: the sizes are the issue's)."""
    with tempfile.TemporaryDirectory(prefix="cf-sched-bench-") as tmp:
        work = Path(tmp)
        return [_parse(work), _latency(spark, work)]


if __name__ == "__main__":
    import json

    from changeflow.spark import get_session

    print(json.dumps(run(get_session("schedule-bench", master="local[2]"), 0), indent=2))
