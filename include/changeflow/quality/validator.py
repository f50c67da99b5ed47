"""Running Great Expectations 1.x suites on Spark DataFrames.

One ephemeral GX context per process, with usage statistics off. Suites are JSON files
in ``changeflow/quality/suites/``, versioned with the code; each expectation's
``meta.check`` names the check that blocking configuration and error messages refer to.

A validation runs in two passes, so a clean batch costs one aggregate over its facts:

1. every expectation with ``BOOLEAN_ONLY`` results (GX bundles the unexpected counts
   of all column-map expectations into one Spark aggregate);
2. only for the expectations that failed, again with ``SUMMARY`` results, which GX
   computes with extra queries (unexpected counts and sample values).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)
_lock = threading.Lock()
_counter = [0]
# Guards building the context and its sources, which :func:`warm_up` may be doing on
# another thread (re-entrant: a source builds the context first).
_init_lock = threading.RLock()
_warming: list[threading.Thread] = []
_warm_lock = threading.Lock()


@dataclass
class CheckResult:
    """The outcome of one expectation.

    Attributes:
        check: the check id (``meta.check`` in the suite).
        expectation: the GX expectation type, e.g. ``expect_column_values_to_be_in_set``.
        kwargs: the expectation's arguments (column names, value sets...).
        success: whether it passed.
        blocking: whether a failure stops the batch (set by the caller's config).
        unexpected_count: how many rows failed, when GX reports it.
        element_count: how many rows were checked, when GX reports it.
        samples: sample offending rows (filled in by the caller).
        description: what the check means.
    """

    check: str
    expectation: str
    kwargs: dict[str, Any]
    success: bool
    blocking: bool = True
    unexpected_count: int | None = None
    element_count: int | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass
class SuiteRun:
    """One suite validated on one DataFrame.

    Attributes:
        suite: the suite name.
        results: one entry per expectation, in suite order.
        gx_result: GX's own validation result, as JSON (what Data Docs render).
    """

    suite: str
    results: list[CheckResult]
    gx_result: dict[str, Any]

    @property
    def success(self) -> bool:
        """Whether every expectation passed."""
        return all(r.success for r in self.results)


def suite_definition(name: str) -> dict[str, Any]:
    """The JSON definition of a project suite (``suites/<name>.json``).

    Raises:
        FileNotFoundError: there is no such suite.
    """
    text = resources.files("changeflow.quality").joinpath("suites", f"{name}.json").read_text()
    return dict(json.loads(text))


def suite_names() -> list[str]:
    """The names of every project suite."""
    folder = resources.files("changeflow.quality").joinpath("suites")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def context() -> Any:
    """The process's ephemeral GX context, with usage statistics off."""
    with _init_lock:
        return _context()


@cache
def _context() -> Any:
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(project_config=config, mode="ephemeral")


def spark_source() -> Any:
    """The context's Spark data source.

    GX reuses the active SparkSession (it never builds its own when one is running).
    ``persist=False``: the caller caches the narrow facts itself; GX must not cache
    whatever it is given, which may be a 5-million-row batch.
    """
    with _init_lock:
        return _spark_source()


@cache
def _spark_source() -> Any:
    return context().data_sources.add_spark("changeflow", persist=False)


def pandas_source() -> Any:
    """The context's pandas data source, for small facts built without Spark."""
    with _init_lock:
        return _pandas_source()


@cache
def _pandas_source() -> Any:
    return context().data_sources.add_pandas("changeflow_pandas")


def build_suite(name: str, only: set[str] | None = None) -> Any:
    """A GX ``ExpectationSuite`` from a project suite, optionally restricted to checks."""
    import great_expectations as gx

    spec = suite_definition(name)
    exps = [e for e in spec["expectations"] if only is None or e["meta"]["check"] in only]
    return gx.ExpectationSuite(name=spec["name"], expectations=exps, meta=spec.get("meta", {}))


def _pandas_batches() -> Any:
    """One reusable batch definition for pandas facts (adding an asset saves the config)."""
    with _init_lock:
        return _pandas_batch_definition()


@cache
def _pandas_batch_definition() -> Any:
    return pandas_source().add_dataframe_asset("facts").add_batch_definition_whole_dataframe(
        "whole")


def warm_up() -> None:
    """Import GX and build the context on a background thread, once per process.

    A job's first validation otherwise pays for importing Great Expectations and
    building its context (about 4 s of CPU in a fresh process) after its batch is
    written. A stage calls this just before its long Spark job: the main thread then
    waits on the JVM, so the import runs beside the job instead of after it. Later
    calls do nothing; a validation that starts before the thread is done waits for it
    (:data:`_init_lock`) rather than building a second context.
    """
    with _warm_lock:  # not _init_lock, which the thread holds while it works
        if _warming:
            return
        thread = threading.Thread(target=_warm, name="changeflow-gx-warm-up", daemon=True)
        _warming.append(thread)
    thread.start()


def _warm() -> None:
    try:
        _pandas_batches()
    except Exception:  # noqa: BLE001  (the validation that needs GX reports any problem)
        log.debug("GX warm-up failed", exc_info=True)


_pandas_lock = threading.Lock()


def _run(df: DataFrame, suite: Any, result_format: str) -> Any:
    fmt = {"result_format": result_format, "partial_unexpected_count": 5}
    if type(df).__module__.startswith("pandas"):
        with _pandas_lock:
            return _pandas_batches().get_batch(batch_parameters={"dataframe": df}).validate(
                suite, result_format=fmt)
    with _lock:
        _counter[0] += 1
        ds = spark_source()
        asset = ds.add_dataframe_asset(f"asset_{_counter[0]}")
    batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(
        batch_parameters={"dataframe": df}
    )
    try:
        return batch.validate(suite, result_format=fmt)
    finally:
        with _lock:
            ds.delete_asset(asset.name)


def validate(df: DataFrame, suite_name: str, *, blocking: Any = None) -> SuiteRun:
    """Validate a Spark (or pandas) DataFrame against a project suite.

    Args:
        df: the DataFrame (usually facts, already cached by the caller); a pandas
            DataFrame is validated with GX's pandas engine.
        suite_name: a suite in ``changeflow/quality/suites``.
        blocking: a callable ``check -> bool`` telling which checks block.

    Returns:
        The run; failed checks carry GX's unexpected count.
    """
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    first = _run(df, build_suite(suite_name), "BOOLEAN_ONLY")
    failed = {r.expectation_config.meta["check"] for r in first.results if not r.success}
    detail = {}
    if failed:
        second = _run(df, build_suite(suite_name, failed), "SUMMARY")
        detail = {r.expectation_config.meta["check"]: r for r in second.results}
    merged = [detail.get(r.expectation_config.meta["check"], r) for r in first.results]
    first.results = merged
    first.success = all(r.success for r in merged)
    out = []
    for r in merged:
        conf, res = r.expectation_config, r.result or {}
        check = conf.meta["check"]
        if conf.type == "expect_column_sum_to_be_between" and "observed_value" in res:
            # a sum of violation counts: the observed sum is the number of bad rows
            res = {"unexpected_count": res["observed_value"]}
        out.append(CheckResult(
            check=check, expectation=conf.type,
            kwargs={k: v for k, v in conf.kwargs.items() if k != "batch_id"},
            success=bool(r.success), blocking=bool(blocking(check)) if blocking else True,
            unexpected_count=res.get("unexpected_count"), element_count=res.get("element_count"),
            description=conf.meta.get("description", ""),
        ))
        if r.exception_info and r.exception_info.get("raised_exception"):
            log.warning("expectation %s raised: %s", check,
                        r.exception_info.get("exception_message"))
    return SuiteRun(suite_name, out, first.to_json_dict())
