"""Which checks block, what a validation reports, and the error a blocking failure raises."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from changeflow.config import PipelineConfig, QualityConfig
from changeflow.errors import ConfigError, TerminalError
from changeflow.quality.validator import CheckResult, SuiteRun, suite_definition, suite_names

log = logging.getLogger(__name__)

# Checks that only warn unless the configuration lists them under quality.blocking.
DEFAULT_WARN_ONLY = frozenset({"commit_order_across_batches"})


def all_checks() -> list[str]:
    """Every check id defined by the project suites."""
    return [e["meta"]["check"] for s in suite_names() for e in suite_definition(s)["expectations"]]


def default_blocking() -> list[str]:
    """The checks that block when the configuration does not say otherwise."""
    return [c for c in all_checks() if c not in DEFAULT_WARN_ONLY]


def blocking_policy(cfg: PipelineConfig) -> Callable[[str], bool]:
    """A function telling whether a check blocks, from the ``quality:`` section.

    Raises:
        ConfigError: the section names a check that does not exist.
    """
    q: QualityConfig = cfg.quality
    known = set(all_checks())
    for key in ("blocking", "warn_only"):
        for i, name in enumerate(getattr(q, key) or []):
            if name not in known:
                raise ConfigError(f"unknown quality check {name!r} (known: {sorted(known)})",
                                  file=cfg.source_path, key=f"quality.{key}.{i}")
    blocking = set(default_blocking() if q.blocking is None else q.blocking) - set(q.warn_only)
    return lambda check: check in blocking


@dataclass
class QualityReport:
    """The outcome of validating one batch or one apply's target changes.

    Attributes:
        stage: e.g. ``capture:capture_hr``, ``propagation:p12``, ``apply:apply_dbs2``.
        subject: the queue (``owner.name``) or the target tables checked.
        batch_id: the batch (or apply run tag) validated.
        n_rows: rows validated.
        runs: the suites run.
        seconds: time spent validating.
        quarantine_path: where the data went, when a blocking check failed.
        result_id: the persisted result's id.
    """

    stage: str
    subject: str
    batch_id: str | None
    n_rows: int | None
    runs: list[SuiteRun] = field(default_factory=list)
    seconds: float = 0.0
    quarantine_path: str | None = None
    result_id: int | None = None
    quarantine_seq: int | None = None

    @property
    def checks(self) -> list[CheckResult]:
        """Every check of every suite run."""
        return [c for r in self.runs for c in r.results]

    @property
    def blocking_failures(self) -> list[CheckResult]:
        """Failed checks that block."""
        return [c for c in self.checks if not c.success and c.blocking]

    @property
    def warnings(self) -> list[CheckResult]:
        """Failed checks that only warn."""
        return [c for c in self.checks if not c.success and not c.blocking]

    @property
    def status(self) -> str:
        """``failed`` (a blocking check failed), ``warned`` or ``passed``."""
        return "failed" if self.blocking_failures else "warned" if self.warnings else "passed"

    def to_dict(self) -> dict[str, Any]:
        """The changeflow summary, JSON-ready (what ``_validation.json`` holds)."""
        return {
            "stage": self.stage, "subject": self.subject, "batch_id": self.batch_id,
            "status": self.status, "n_rows": self.n_rows, "seconds": round(self.seconds, 3),
            "quarantine_path": self.quarantine_path,
            "checks": [c.to_dict() for c in self.checks],
            "gx_results": [r.gx_result for r in self.runs],
        }


def describe(check: CheckResult) -> str:
    """One line naming a failed check, its expectation and sample rows."""
    col = check.kwargs.get("column") or check.kwargs.get("column_list")
    counts = (f"{check.unexpected_count} of {check.element_count} rows unexpected"
              if check.unexpected_count is not None else "failed")
    samples = json.dumps(check.samples, default=str)
    return (f"expectation {check.check!r} ({check.expectation} on {col}): {counts}; "
            f"sample rows: {samples}")


class QualityError(TerminalError):
    """A batch failed a blocking data-quality check; it was committed set aside.

    This is the hook point for alerts: a DAG's failure callback sees this error (a
    :class:`~changeflow.errors.TerminalError`, so schedules do not retry it) with the
    report attached.

    Attributes:
        report: the full validation report.
    """

    def __init__(self, report: QualityReport):
        self.report = report
        failures = report.blocking_failures
        head = (f"data-quality check failed at {report.stage} for {report.subject} "
                f"(batch {report.batch_id}): {describe(failures[0])}")
        more = [f.check for f in failures[1:]]
        tail = f"; also failed: {', '.join(more)}" if more else ""
        where = (f"; quarantined at {report.quarantine_path}" if report.quarantine_path
                 else "")
        seq = report.quarantine_seq
        if seq is not None:
            where = (f"; set aside as batch {seq} of queue {report.subject} (later batches "
                     f"flow; `changeflow queues release {report.subject} {seq}` puts it back "
                     f"once fixed)")
        super().__init__(head + tail + where)


def log_warnings(report: QualityReport) -> None:
    """Log each non-blocking failure as a warning."""
    for w in report.warnings:
        log.warning("data-quality warning at %s for %s (batch %s): %s", report.stage,
                    report.subject, report.batch_id, describe(w))
