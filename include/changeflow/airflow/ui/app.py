"""The FastAPI app of the changeflow page, mounted by the plugin at ``/changeflow``.

Airflow does not protect a plugin's FastAPI app: every route here resolves the user
from the UI's session cookie or a bearer token (Airflow's ``get_user``) and asks
Airflow's auth manager: reading needs DAG read access; enable, disable and alter need
edit access to the schedule's DAG; trigger and backfill need the right to create runs
of it. Routes:

- ``GET /changeflow/`` the page (``static/index.html``; shown inside Airflow's UI as an
  external view in the main navigation);
- ``GET /changeflow/api/pipelines``, ``/api/sections``, ``/api/views/<section>?pipeline=``;
- ``POST /changeflow/api/schedules/<propagation>/<action>?pipeline=`` with a JSON body
  (``enable``, ``disable``, ``alter``, ``trigger``, ``backfill``);
- ``POST /changeflow/api/views/<section>/<action>?pipeline=`` a row action of a section
  (re-execute or delete an apply error, release a quarantined batch) with the row's keys
  as the JSON body; needs edit access to DAGs;
- ``GET /changeflow/schedules.json?pipeline=`` the schedules, for scripts.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import logging
from pathlib import Path
from typing import Any

from fastapi import Body, Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from changeflow.errors import ChangeflowError

log = logging.getLogger(__name__)
PREFIX = "/changeflow"
STATIC = Path(__file__).parent / "static"
ACTIONS = ("enable", "disable", "alter", "trigger", "backfill")


def _plain(data: Any) -> Any:
    return json.loads(json.dumps(data, default=lambda v: v.isoformat() if isinstance(
        v, dt.datetime | dt.date) else str(v)))


def _pipeline(name: str | None) -> tuple[Any, Any]:
    from changeflow.airflow import pipelines
    from changeflow.config import load_config

    try:
        ref = pipelines.find(name)
    except KeyError as exc:
        raise HTTPException(404, str(exc).strip("'\"")) from exc
    try:
        return ref, load_config(ref.config)
    except ChangeflowError as exc:
        raise HTTPException(500, f"pipeline {ref.name}: {exc}") from exc


def _authorize(user: Any, method: str, dag: str | None = None, run: bool = False) -> None:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )

    ok = get_auth_manager().is_authorized_dag(
        method=method, access_entity=DagAccessEntity.RUN if run else None,  # type: ignore[arg-type]
        details=DagDetails(id=dag) if dag else None, user=user)
    if not ok:
        raise HTTPException(403, f"Forbidden: {method} on {dag or 'DAGs'} is not allowed "
                                 "for this user")


def _call(fn: Any, cfg: Any, pipeline: str) -> Any:
    params = inspect.signature(fn).parameters
    return fn(cfg, pipeline=pipeline) if "pipeline" in params else fn(cfg)


def _action(cfg: Any, pipeline: str, name: str, action: str, body: dict[str, Any],
            user: str | None) -> dict[str, Any]:
    from changeflow.schedules import airflow_ops, forms

    dag = airflow_ops.dag_id(pipeline, name)
    cfg.component("propagation", name)
    if action in ("enable", "disable"):
        res = airflow_ops.toggle(cfg, name, dag, action == "disable", wait=0, by="ui",
                                 user=user)
        return {"message": res.message, "dag_paused": res.paused, "in_flight": res.in_flight}
    if action == "alter":
        row = forms.alter(cfg, name, body)
        return {"message": f"schedule of {name} altered: {row['summary']}"}
    if action == "trigger":
        run_id = airflow_ops.trigger(dag, user=user, by="ui",
                                     note=f"triggered from the changeflow page by {user}")
        return {"message": f"run {run_id} of {dag} started", "run_id": run_id}
    start = forms.parse_time(body.get("from"), "from")
    end = forms.parse_time(body.get("to"), "to")
    made = airflow_ops.backfill(dag, start, end, user=user)
    return {"message": f"backfill {made['id']} of {dag}: {made['runs']} windows to run",
            **made}


def create_app() -> FastAPI:
    """The app the plugin mounts at :data:`PREFIX`."""
    from airflow.api_fastapi.core_api.security import get_user

    app = FastAPI(title="changeflow", description="changeflow's page in the Airflow UI")
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    user_dep = Depends(get_user)

    @app.get("/", include_in_schema=False)
    def page(user: Any = user_dep) -> FileResponse:
        _authorize(user, "GET")
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    @app.get("/icon.svg", include_in_schema=False)
    def icon() -> FileResponse:
        return FileResponse(STATIC / "icon.svg", media_type="image/svg+xml")

    @app.get("/api/pipelines")
    def pipelines_list(user: Any = user_dep) -> JSONResponse:
        from changeflow.airflow import pipelines

        _authorize(user, "GET")
        return JSONResponse([{"name": p.name, "config": p.config}
                             for p in pipelines.configured()])

    @app.get("/api/sections")
    def sections_list(user: Any = user_dep) -> JSONResponse:
        from changeflow.airflow.ui import registry

        _authorize(user, "GET")
        return JSONResponse([s.as_dict() for s in registry.sections()])

    @app.get("/api/views/{section}")
    def view(section: str, pipeline: str | None = None, user: Any = user_dep) -> JSONResponse:
        from changeflow.airflow.ui import registry

        _authorize(user, "GET")
        try:
            sec = registry.get(section)
        except KeyError as exc:
            raise HTTPException(404, f"no section {section!r}") from exc
        ref, cfg = _pipeline(pipeline)
        try:
            rows = _call(sec.fetch, cfg, ref.name)
        except ChangeflowError as exc:
            raise HTTPException(503, f"{sec.title}: {exc}") from exc
        return JSONResponse({"pipeline": ref.name, "section": section,
                             "generated_at": dt.datetime.now(dt.UTC).isoformat(),
                             "rows": _plain(rows)})

    @app.post("/api/schedules/{name}/{action}")
    def act(name: str, action: str, request: Request, pipeline: str | None = None,
            body: dict[str, Any] = Body(default_factory=dict),  # noqa: B008 (FastAPI style)
            user: Any = user_dep) -> JSONResponse:
        from changeflow.schedules import airflow_ops

        if action not in ACTIONS:
            raise HTTPException(404, f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
        ref, cfg = _pipeline(pipeline)
        dag = airflow_ops.dag_id(ref.name, name)
        if action in ("trigger", "backfill"):
            _authorize(user, "POST", dag, run=True)
        else:
            _authorize(user, "PUT", dag)
        who = getattr(user, "get_name", lambda: None)()
        try:
            out = _action(cfg, ref.name, name, action, body, who)
        except ChangeflowError as exc:
            raise HTTPException(400, str(exc)) from exc
        log.info("changeflow page: %s %s of %s by %s: %s", action, name, ref.name, who,
                 out["message"])
        return JSONResponse(_plain(out))

    @app.post("/api/views/{section}/{action}")
    def row_action(section: str, action: str, pipeline: str | None = None,
                   body: dict[str, Any] = Body(default_factory=dict),  # noqa: B008
                   user: Any = user_dep) -> JSONResponse:
        from changeflow.airflow.ui import registry

        try:
            act = registry.get(section).action(action)
        except KeyError as exc:
            raise HTTPException(404, f"section {section!r} has no action {action!r}") from exc
        _authorize(user, "PUT")
        ref, cfg = _pipeline(pipeline)
        who = getattr(user, "get_name", lambda: None)()
        params = {k: body.get(k) for k in act.keys}
        try:
            message = act.run(cfg, params, ref.config)
        except ChangeflowError as exc:
            raise HTTPException(400, str(exc)) from exc
        log.info("changeflow page: %s on %s %s of %s by %s: %s", action, section, params,
                 ref.name, who, message)
        return JSONResponse({"message": message})

    @app.get("/schedules.json")
    def schedules_json(pipeline: str | None = None, user: Any = user_dep) -> JSONResponse:
        from changeflow.views import schedules

        _authorize(user, "GET")
        ref, cfg = _pipeline(pipeline)
        return JSONResponse(_plain(schedules.schedule_rows(cfg, ref.name)))

    return app
