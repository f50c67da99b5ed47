"""Arrow's memory pool in changeflow's processes: jemalloc, where pyarrow has it.

pyarrow's default pool on Linux is mimalloc. The PostgreSQL capture allocates its Arrow
buffers in one thread (the read-ahead parses each batch) and frees them in another (the
capture's), and with mimalloc that churn cost it as much system time as a third of its
user time. A pgbench backlog of 1.3-1.4 million changes, captured four times with each
pool in alternation (2026-11-27): mimalloc 3.9-4.3 s of system time and 92,762-92,820
changes/s, jemalloc 2.0-2.2 s and 104,244-109,730 changes/s.

A pool named in ``ARROW_DEFAULT_MEMORY_POOL`` is left as the user chose it, and a
pyarrow built without jemalloc keeps its default.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)
_lock = threading.Lock()
_done = False


def use_jemalloc() -> str:
    """Make jemalloc Arrow's default memory pool (once per process; buffers allocated
    before keep their pool). Returns the default pool's backend name."""
    global _done
    import pyarrow as pa

    with _lock:
        if not _done and not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
            try:
                pa.set_memory_pool(pa.jemalloc_memory_pool())
            except NotImplementedError:  # this pyarrow was built without it
                log.debug("pyarrow has no jemalloc; Arrow keeps its default pool")
        _done = True
        return str(pa.default_memory_pool().backend_name)
