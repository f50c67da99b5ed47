"""The schedules page of the Airflow UI: a FastAPI app mounted by the plugin.

Airflow does not protect plugin apps by itself, so every route depends on Airflow's
auth manager (``requires_access_dag``): the UI's session cookie or a bearer token is
checked, reading needs DAG read access and enable/disable needs DAG edit access. The
app serves ``/changeflow/schedules`` (an HTML page, shown in the UI's navigation as an
external view) and ``/changeflow/schedules.json`` (the same rows, for scripts).

The pipeline configuration comes from ``$CHANGEFLOW_CONFIG`` and the DAG id prefix from
``$CHANGEFLOW_PIPELINE`` (default ``demo``) in the API server's environment.
"""

from __future__ import annotations

import html
import os
from typing import Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

PREFIX = "/changeflow"
COLUMNS = ("propagation", "summary", "disabled", "failures", "total_number", "total_bytes",
           "avg_time", "avg_number", "avg_size", "max_number", "max_bytes", "last_run",
           "next_run", "process", "last_error_msg", "last_error_time")


def _config() -> Any:
    from changeflow.config import load_config

    path = os.environ.get("CHANGEFLOW_CONFIG")
    if not path:
        raise HTTPException(503, "set CHANGEFLOW_CONFIG in the Airflow API server's environment")
    return load_config(path)


def rows() -> list[dict[str, Any]]:
    """The ``user_queue_schedules`` rows of every configured propagation."""
    from changeflow.schedules.window import schedule_store

    cfg = _config()
    out = []
    for p in cfg.propagations:
        row = schedule_store(cfg, p.name).get(p.name)
        out.append(row.as_dict() if row else {"propagation": p.name, "summary": "(no schedule)"})
    return out


def _page(data: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{c}</th>" for c in COLUMNS) + "<th></th>"
    body = []
    for r in data:
        cells = "".join(f"<td>{html.escape(str(r.get(c, '') or ''))}</td>" for c in COLUMNS)
        name = html.escape(str(r["propagation"]))
        action = "enable" if r.get("disabled") else "disable"
        form = (f"<form method='post' action='{PREFIX}/schedules/{name}/{action}'>"
                f"<button>{action}</button></form>")
        body.append(f"<tr>{cells}<td>{form}</td></tr>")
    return ("<!doctype html><html><head><title>changeflow schedules</title><style>"
            "body{font-family:sans-serif}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}</style></head><body>"
            "<h2>Propagation schedules</h2>"
            f"<p><a href='{PREFIX}/schedules.json'>JSON</a></p>"
            f"<table><tr>{head}</tr>{''.join(body)}</table></body></html>")


def create_app() -> FastAPI:
    """The app the plugin mounts at :data:`PREFIX`."""
    from airflow.api_fastapi.core_api.security import requires_access_dag

    read = [Depends(requires_access_dag("GET"))]
    edit = [Depends(requires_access_dag("PUT"))]
    app = FastAPI(title="changeflow schedules")

    @app.get("/schedules", response_class=HTMLResponse, dependencies=read)
    def page() -> str:
        return _page(rows())

    @app.get("/schedules.json", dependencies=read)
    def as_json() -> JSONResponse:
        import json

        return JSONResponse(json.loads(json.dumps(rows(), default=str)))

    @app.post("/schedules/{name}/{action}", dependencies=edit)
    def toggle(name: str, action: str) -> RedirectResponse:
        from changeflow.schedules import airflow_ops
        from changeflow.schedules.window import schedule_store

        if action not in ("enable", "disable"):
            raise HTTPException(404, f"unknown action {action!r}")
        cfg = _config()
        store = schedule_store(cfg, name)
        store.set_disabled(name, action == "disable", "user")
        pipeline = os.environ.get("CHANGEFLOW_PIPELINE", "demo")
        airflow_ops.set_paused(airflow_ops.dag_id(pipeline, name), action == "disable")
        return RedirectResponse(f"{PREFIX}/schedules", status_code=303)

    return app
