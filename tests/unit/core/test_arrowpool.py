"""Arrow's memory pool in changeflow's processes (changeflow/arrowpool.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

CODE = """
import pyarrow as pa
from changeflow import arrowpool
before = pa.default_memory_pool().backend_name
print(before, arrowpool.use_jemalloc(), pa.default_memory_pool().backend_name,
      arrowpool.use_jemalloc())
"""


def _pools(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    done = subprocess.run([sys.executable, "-c", CODE], env={**clean, **env},
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split()


def _has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


@pytest.mark.skipif(not _has_jemalloc(), reason="this pyarrow was built without jemalloc")
def test_jemalloc_becomes_the_default_pool() -> None:
    before, got, now, again = _pools()
    assert before != "jemalloc"  # pyarrow's own default here (mimalloc)
    assert got == now == again == "jemalloc"


def test_a_pool_the_user_named_is_kept() -> None:
    before, got, now, again = _pools(ARROW_DEFAULT_MEMORY_POOL="system")
    assert before == got == now == again == "system"
