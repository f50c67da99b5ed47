"""changeflow's spark-submit operators: exit codes that Airflow's retry policy reads.

Every changeflow job classifies its own failure (:mod:`changeflow.errors`): exit 75
(``EX_TEMPFAIL``) is worth retrying, 65 (``EX_DATAERR``) is not, 1 is a failure the job
already accounted for. :class:`ChangeflowSparkSubmitOperator` turns the exit code of
spark-submit into an exception the task's ``retry_policy`` (:class:`ExitCodeRetryPolicy`,
Airflow 3.3) decides on: transient exits retry after exactly 30 s, 60 s, 120 s ... (no
jitter, unlike ``retry_exponential_backoff``), terminal ones fail at once.

:class:`PropagationWindowOperator` runs one window of a propagation schedule:

- the window is the run's data interval; a run without a logical date (REST
  ``"logical_date": null``, the UI's trigger, ``airflow dags trigger``) runs the
  schedule's window open at the run's ``run_after``, or one pass between windows;
- a disabled schedule, or one whose next retry falls in a later window, is not
  attempted: the task ends *skipped* with the reason in its log (no JVM is started);
- the window job is told the task's ``host:pid`` and stops as soon as the task is gone.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import RetryPolicy
from airflow.sdk.definitions.retry_policy import RetryDecision
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from changeflow.errors import EXIT_FAILED, EXIT_TERMINAL, EXIT_TRANSIENT
from changeflow.jvm import is_local_master
from changeflow.schedules import model

FIRST_RETRY = dt.timedelta(seconds=30)
_CODE = re.compile(r"Error code is: (\d+)")
EXIT_IDLE = 99  # changeflow.schedules.job.EXIT_IDLE (not imported: the job module is light)


class TransientJobError(AirflowException):
    """A changeflow job exited 75: a retry may succeed."""


class TerminalJobError(AirflowFailException):
    """A changeflow job exited 65 (or 1): retrying cannot fix it."""


class ExitCodeRetryPolicy(RetryPolicy):
    """Retry transient job exits after exactly 30 s x 2^(n-1); never retry terminal ones.

    >>> p = ExitCodeRetryPolicy()
    >>> p.evaluate(TransientJobError("x"), 3, 4).retry_delay
    datetime.timedelta(seconds=120)
    >>> p.evaluate(TerminalJobError("x"), 1, 4).action.value
    'fail'
    """

    def __init__(self, first: dt.timedelta = FIRST_RETRY):
        self.first = first

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int,
                 context: Any = None) -> RetryDecision:
        if isinstance(exception, TransientJobError):
            delay = self.first * (2 ** max(0, try_number - 1))
            return RetryDecision.retry(delay, f"transient job failure: retry in {delay}")
        if isinstance(exception, TerminalJobError):
            return RetryDecision.fail("terminal job failure: not retried")
        return RetryDecision.default()

    def serialize(self) -> dict[str, Any]:
        return {"first": self.first.total_seconds()}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> ExitCodeRetryPolicy:
        return cls(dt.timedelta(seconds=data.get("first", 30)))


def exit_code_of(exc: BaseException) -> int | None:
    """The spark-submit exit code in the provider hook's error message.

    >>> exit_code_of(AirflowException("Cannot execute: x. Error code is: 75. tail"))
    75
    """
    m = _CODE.search(str(exc))
    return int(m.group(1)) if m else None


class ChangeflowSparkSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` whose failures carry the job's classification."""

    #: Exits that mean "nothing attempted, by design": the task ends skipped.
    skip_exits: tuple[int, ...] = ()

    def execute(self, context: Any) -> None:
        try:
            super().execute(context)
        except AirflowException as exc:
            raise self.classify(exc) from exc

    def _get_hook(self) -> Any:
        """The provider's hook; for a local master (the connection's), without ``--jars``
        when the jars are on the driver's class path (:func:`changeflow.jvm.
        spark_class_path`): the one JVM loads them from there, and the executor does not
        copy them all into the job's temporary folder."""
        hook = super()._get_hook()
        # (the provider keeps them in private attributes)
        path, jars = hook._driver_class_path, hook._jars  # noqa: SLF001
        if path and jars == f"{path}.jar" and is_local_master(hook._connection["master"]):  # noqa: SLF001
            hook._jars = None  # noqa: SLF001
        return hook

    def classify(self, exc: AirflowException) -> AirflowException:
        """The exception the retry policy sees for a failed spark-submit."""
        code = exit_code_of(exc)
        head = job_error(str(exc)) or str(exc).split(". Error code", 1)[0][-300:]
        if code in self.skip_exits:
            return AirflowSkipException(f"nothing attempted (exit {code}): see the log")
        if code == EXIT_TRANSIENT:
            return TransientJobError(f"transient failure (exit 75), will retry: {head}")
        if code in (EXIT_TERMINAL, EXIT_FAILED):
            what = "terminal failure (exit 65)" if code == EXIT_TERMINAL else \
                "failure accounted for by the job (exit 1)"
            return TerminalJobError(f"{what}, not retried: {head}")
        return exc


def job_error(text: str) -> str | None:
    """The job's own one-line error (``changeflow <kind> <name>: error (...): ...``) in a log.

    >>> job_error("Cannot execute: x. Error code is: 75. tail\\nchangeflow window p: error "
    ...           "(transient, retry later): store down\\nmore")
    'changeflow window p: error (transient, retry later): store down'
    """
    found = [line.strip() for line in text.replace("\\n", "\n").splitlines()
             if line.strip().startswith("changeflow ") and ": error (" in line]
    return found[-1][:500] if found else None


def manual_window(s: model.Schedule, run_after: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The window a run without a logical date covers: the one open at ``run_after``.

    Between windows it is a single pass (``start == end``).

    >>> s = model.Schedule("p", start=dt.datetime(2024, 1, 1, tzinfo=dt.UTC), duration=60,
    ...                    next_time=3600)
    >>> [t.minute for t in manual_window(s, dt.datetime(2024, 1, 1, 1, 0, 30, tzinfo=dt.UTC))]
    [0, 1]
    >>> a, b = manual_window(s, dt.datetime(2024, 1, 1, 1, 30, tzinfo=dt.UTC)); a == b
    True
    """
    w = model.window_at(s, run_after)
    return (w.start, w.end) if w is not None else (run_after, run_after)


def _utc(t: Any) -> dt.datetime:
    t = t if t.tzinfo else t.replace(tzinfo=dt.UTC)
    return dt.datetime.fromtimestamp(t.timestamp(), dt.UTC)


class PropagationWindowOperator(ChangeflowSparkSubmitOperator):
    """One window of a propagation schedule, run by ``jobs/propagation_window.py``.

    Args:
        config: the pipeline configuration file.
        propagation: the propagation whose schedule this is.
    """

    skip_exits = (EXIT_IDLE,)

    def __init__(self, *, config: str, propagation: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.config = config
        self.propagation = propagation
        self.base_args = list(self.application_args or [])

    def window(self, context: Any) -> tuple[dt.datetime, dt.datetime]:
        """This run's window: its data interval, else the window open at ``run_after``."""
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is not None and end is not None:
            return _utc(start), _utc(end)
        run_after = _utc(context["dag_run"].run_after)
        timetable = getattr(context.get("dag"), "timetable", None)
        sched = getattr(timetable, "schedule", None)
        if not isinstance(sched, model.Schedule):
            return run_after, run_after
        return manual_window(sched, run_after)

    def precheck(self, end: dt.datetime) -> str | None:
        """Why this window is not attempted at all, or None (read from the schedule store)."""
        from changeflow.config import load_config
        from changeflow.schedules.window import schedule_store

        try:
            row = schedule_store(load_config(self.config), self.propagation).get(
                self.propagation)
        except Exception as exc:  # noqa: BLE001 (the job reports and classifies it)
            self.log.warning("schedule store not readable before the window: %s", exc)
            return None
        if row is None:
            return None  # the job creates the configured schedule
        if row.disabled:
            return f"schedule of {self.propagation} is disabled ({row.disabled_reason})"
        retry = row.state.next_retry
        if retry is not None and retry >= end:
            return (f"waiting for retry {row.state.failures + 1} of {self.propagation}, due "
                    f"{retry.isoformat(timespec='seconds')} (after this window): "
                    f"{row.state.last_error_msg}")
        return None

    def execute(self, context: Any) -> None:
        start, end = self.window(context)
        if reason := self.precheck(end):
            self.log.info("not attempted: %s", reason)
            raise AirflowSkipException(reason)
        self.application_args = [*self.base_args, "--start", start.isoformat(),
                                 "--end", end.isoformat(),
                                 "--watch", f"{socket.gethostname()}:{os.getpid()}"]
        self.log.info("window %s .. %s of %s", start.isoformat(), end.isoformat(),
                      self.propagation)
        super().execute(context)
