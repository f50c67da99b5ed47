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
