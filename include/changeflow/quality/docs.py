"""Great Expectations Data Docs for every persisted validation of a pipeline.

Results live in the state stores (:mod:`changeflow.quality.results`); this module
loads the stored GX validation results into an ephemeral context whose Data Docs site
is a local directory, and renders them. The default directory is ``work/data-docs``
(relative to the current directory), or ``quality.data_docs_dir`` in the pipeline
configuration, or ``$CHANGEFLOW_DATA_DOCS``.
"""

from __future__ import annotations

import os
from typing import Any

from changeflow.config import PipelineConfig
from changeflow.quality import results
from changeflow.quality.validator import build_suite, context, suite_names
from changeflow.sites import site

DEFAULT_DIR = os.path.join("work", "data-docs")
SITE = "changeflow_local"


def docs_dir(cfg: PipelineConfig, out_dir: str | None = None) -> str:
    """Where Data Docs are built: the argument, the config, the environment, or the default."""
    return os.path.abspath(
        out_dir or cfg.quality.data_docs_dir or os.environ.get("CHANGEFLOW_DATA_DOCS")
        or DEFAULT_DIR
    )


def _identifier(result: dict[str, Any]) -> Any:
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    meta = result.get("meta") or {}
    run = meta.get("run_id") or {}
    cf = meta.get("changeflow") or {}
    stage = str(cf.get("stage") or "unknown").replace(":", "-")
    return ValidationResultIdentifier(
        expectation_suite_identifier=ExpectationSuiteIdentifier(result["suite_name"]),
        run_id=RunIdentifier(run_name=stage, run_time=run.get("run_time")),
        batch_identifier=f"{cf.get('subject', 'batch')}-{str(cf.get('batch_id'))[:12]}",
    )


def build(cfg: PipelineConfig, out_dir: str | None = None, *, limit: int = 200) -> str:
    """Render the latest ``limit`` validations of every site as Data Docs.

    Returns:
        The path of ``index.html``.
    """
    from great_expectations.core import ExpectationSuiteValidationResult

    target = docs_dir(cfg, out_dir)
    os.makedirs(target, exist_ok=True)
    ctx = context()
    if SITE not in ctx.get_config().data_docs_sites:
        ctx.add_data_docs_site(SITE, {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": target},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        })
    for name in suite_names():
        suite = build_suite(name)
        if name not in [s.name for s in ctx.suites.all()]:
            ctx.suites.add(suite)
    store = ctx.validation_results_store
    for name in sorted(cfg.sites):
        for raw in results.gx_results(site(cfg, name).store, limit=limit):
            res = ExpectationSuiteValidationResult(**_clean(raw))
            store.set(_identifier(raw), res)
    ctx.build_data_docs(site_names=[SITE])
    return os.path.join(target, "index.html")


def _clean(raw: dict[str, Any]) -> dict[str, Any]:
    """Turn a stored GX result (JSON) back into constructor arguments."""
    from great_expectations.core import ExpectationValidationResult
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    out: dict[str, Any] = {
        k: raw[k] for k in ("success", "suite_name", "statistics", "meta") if k in raw
    }
    out["results"] = [
        ExpectationValidationResult(
            success=r.get("success"), result=r.get("result") or {}, meta=r.get("meta") or {},
            exception_info=r.get("exception_info"),
            expectation_config=ExpectationConfiguration(**{
                k: v for k, v in (r.get("expectation_config") or {}).items()
                if k in ("type", "kwargs", "meta", "id", "notes", "description")
            }),
        )
        for r in raw.get("results", [])
    ]
    return out
