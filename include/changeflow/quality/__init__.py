"""Data-quality checks with Great Expectations at every hop (see ``docs/quality.md``).

The stages call one function each, between writing their output and committing it:

* captures and propagations: :func:`check_batch` on the written, uncommitted batch
  (propagations also pass their :class:`HopCounters`, built with
  :func:`observe_input` and :func:`hop_counters`); a stage holding its batch in
  memory as Arrow (the PostgreSQL capture) calls :func:`check_arrow_batch`;
* applies: :func:`check_target` on the staged, unpublished Iceberg writes.

A blocking failure of a batch commits it set aside (:func:`state_of`,
:func:`set_aside`) and the stage raises :class:`QualityError` after its commit; a
blocking failure of an apply's delta quarantines the files. Other failures log a
warning. Every validation is persisted (:mod:`changeflow.quality.results`)
and rendered by :func:`build_data_docs`.
"""

from __future__ import annotations

from changeflow.quality.batch import (
    HopCounters,
    check_arrow_batch,
    check_batch,
    hop_counters,
    observe_input,
    set_aside,
    state_of,
)
from changeflow.quality.policy import QualityError, QualityReport, blocking_policy
from changeflow.quality.target import check_target
from changeflow.quality.validator import warm_up
from changeflow.queues import io as _queue_io

if warm_up not in _queue_io.WARM_UPS:  # a queue write asked to warm the checks up
    _queue_io.WARM_UPS.append(warm_up)

__all__ = [
    "HopCounters",
    "QualityError",
    "QualityReport",
    "blocking_policy",
    "build_data_docs",
    "check_arrow_batch",
    "check_batch",
    "check_target",
    "hop_counters",
    "observe_input",
    "set_aside",
    "state_of",
]


def build_data_docs(cfg: object, out_dir: str | None = None) -> str:
    """Render every persisted validation of a pipeline as GX Data Docs.

    Returns:
        The path of the docs' ``index.html``.
    """
    from changeflow.quality.docs import build

    return build(cfg, out_dir)  # type: ignore[arg-type]
