"""Start-up costs a one-shot job pays, measured in a fresh process.

A job started by spark-submit (``jobs/<kind>.py`` through ``changeflow.runner.main``)
builds a Spark session and, with quality checks on, the Great Expectations context and
suites before its first batch. The benchmarks compare warm with warm; these costs go
into a second, *one-shot* figure beside the warm one. Each is measured once per
benchmark process, in a child process that starts from nothing (the ``python`` of this
environment), so whatever an earlier suite warmed up in this process does not hide it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import cache

SPARK = """
import time
t = time.perf_counter()
from changeflow.spark import get_session
s = get_session("bench-startup")
s.range(1).count()
print(time.perf_counter() - t)
s.stop()
"""
GX = """
import time
t = time.perf_counter()
from changeflow.quality import validator
validator.context()
validator.pandas_source()
validator.build_suite("lcr_batch")
print(time.perf_counter() - t)
"""


def _child(code: str, **env: str) -> float:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, env={**os.environ, **env}, check=True)
    return float(out.stdout.strip().splitlines()[-1])


@cache
def spark_session() -> float:
    """Seconds to import changeflow, start a local Spark session and run a first job."""
    return _child(SPARK, CHANGEFLOW_DRIVER_MEMORY="2g")


@cache
def gx_context() -> float:
    """Seconds to import Great Expectations and build the context and the LCR suite."""
    return _child(GX)


def warm_gx() -> None:
    """Set up this process's GX context (so that a timed run does not pay it)."""
    from changeflow.quality import validator

    validator.context()
    validator.pandas_source()
    validator.build_suite("lcr_batch")


def run(spark: object, size: object = None) -> list[dict]:
    """The ``startup`` suite: a Spark session's start from the class archive ``make
    setup`` made (``jars/cds/session.jsa``, :func:`changeflow.jvm.cds_options`) against
    the same start without it (``CHANGEFLOW_CDS=off``); fresh child processes,
    interleaved, medians of three. Reported (no target)."""
    import statistics

    from bench.results import entry, skipped
    from changeflow.jvm import cds_archive

    what = ("the same start without the class archive (CHANGEFLOW_CDS=off): fresh "
            "processes, interleaved, medians of three")
    archive = cds_archive("session")
    if not archive.is_file():
        return [skipped("startup.spark_session", f"no class archive at {archive} "
                        "(make setup makes it)", unit="s", baseline=what, target=None,
                        direction=None)]
    on: list[float] = []
    off: list[float] = []
    for _ in range(3):
        on.append(_child(SPARK, CHANGEFLOW_DRIVER_MEMORY="2g", CHANGEFLOW_CDS="on"))
        off.append(_child(SPARK, CHANGEFLOW_DRIVER_MEMORY="2g", CHANGEFLOW_CDS="off"))
    return [entry("startup.spark_session", value=statistics.median(on), unit="s",
                  baseline=what, baseline_value=statistics.median(off), figures={
                      "with_archive": [round(x, 3) for x in on],
                      "without_archive": [round(x, 3) for x in off],
                      "archive_mib": archive.stat().st_size // 2**20,
                      "what": "import changeflow, start a local session (2g), run a "
                              "first job (range(1).count()), in a fresh process"})]
