"""The benchmark's entry point sets the process's environment for its run (where run
events go, the driver's memory): tests that call it in-process get it back as it was, or
the run events of later tests in the same process would go where the benchmark said."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

SET_BY_BENCH = ("CHANGEFLOW_EVENTS", "CHANGEFLOW_DRIVER_MEMORY")


@pytest.fixture(autouse=True)
def environment_as_found() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in SET_BY_BENCH}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
