"""``changeflow schedules``: list (with statistics), create, alter, enable, disable, drop.

``enable`` and ``disable`` also unpause and pause the schedule's Airflow DAG. Every
change is written to the state store, where a running window reads it within a
second or two.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, emit_json, json_option, load
from changeflow.errors import ChangeflowError

_COLUMNS = ("propagation", "summary", "disabled", "failures", "total_number", "total_bytes",
            "avg_time", "avg_number", "avg_size", "max_number", "max_bytes", "last_run",
            "next_run", "process", "last_error_msg")


def _when(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    if value == "now":
        return dt.datetime.now(dt.UTC)
    t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def pipeline_option(f: Any) -> Any:
    """``--pipeline``: the DAG id prefix of the rendered pipeline."""
    return click.option("--pipeline", envvar="CHANGEFLOW_PIPELINE", default="demo",
                        show_default=True, help="pipeline name used in DAG ids "
                        "[env CHANGEFLOW_PIPELINE]")(f)


def schedule_rows(config_path: str) -> list[dict[str, Any]]:
    """Every configured propagation's schedule as a ``user_queue_schedules`` row."""
    from changeflow.schedules.window import schedule_store

    cfg = load(config_path)
    out = []
    for p in cfg.propagations:
        row = schedule_store(cfg, p.name).get(p.name)
        out.append(row.as_dict() if row else {"propagation": p.name, "summary": "(no schedule)"})
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return "" if v is None else str(v)


@main.group("schedules", invoke_without_command=True)
@click.pass_context
@config_option
@json_option
def schedules(ctx: click.Context, config_path: str, as_json: bool) -> None:
    """Propagation schedules and their statistics (``user_queue_schedules``)."""
    ctx.obj = {"config": config_path}
    if ctx.invoked_subcommand is not None:
        return
    rows = schedule_rows(config_path)
    if as_json:
        emit_json(rows)
        return
    click.echo("\t".join(_COLUMNS))
    for r in rows:
        click.echo("\t".join(_fmt(r.get(c)) for c in _COLUMNS))


def _store(ctx: click.Context, name: str) -> Any:
    """The configuration and schedule store; the configured schedule is created if missing."""
    from changeflow.schedules.window import ensure_schedule

    cfg = load(ctx.obj["config"])
    try:
        cfg.component("propagation", name)
        return cfg, ensure_schedule(cfg, name, dt.datetime.now(dt.UTC))
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc


def _show(row: Any) -> None:
    emit_json(row.as_dict())


@schedules.command("create")
@click.pass_context
@click.argument("name")
@click.option("--start", default=None, help="ISO time or 'now' [config, else now]")
@click.option("--duration", type=float, default=None, help="window seconds [infinite]")
@click.option("--next-time", type=float, default=None, help="seconds between window starts")
@click.option("--latency", type=float, default=None, help="seconds [config, else 3]")
def create_cmd(ctx: click.Context, name: str, start: str | None, duration: float | None,
               next_time: float | None, latency: float | None) -> None:
    """Schedule a propagation (``SCHEDULE_PROPAGATION``); replaces an existing schedule."""
    from changeflow.schedules.model import Schedule

    cfg, store = _store(ctx, name)
    sc = cfg.component("propagation", name).schedule
    try:
        s = Schedule(name, start=_when(start) or sc.start or _when("now"),  # type: ignore[arg-type]
                     duration=duration if duration is not None else sc.duration,
                     next_time=next_time if next_time is not None else sc.next_time,
                     latency=latency if latency is not None else sc.latency)
        store.create(s, replace_existing=True)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    _show(store.require(name))


@schedules.command("alter")
@click.pass_context
@click.argument("name")
@click.option("--start", default=None)
@click.option("--duration", type=float, default=None)
@click.option("--next-time", type=float, default=None)
@click.option("--latency", type=float, default=None)
@click.option("--infinite", is_flag=True, help="set duration to NULL (one infinite window)")
def alter_cmd(ctx: click.Context, name: str, start: str | None, duration: float | None,
              next_time: float | None, latency: float | None, infinite: bool) -> None:
    """Alter a schedule; a running window applies it within seconds."""
    _, store = _store(ctx, name)
    changes: dict[str, Any] = {k: v for k, v in {
        "start": _when(start), "duration": duration, "next_time": next_time,
        "latency": latency}.items() if v is not None}
    if infinite:
        changes["duration"] = None
    try:
        _show(store.alter(name, **changes))
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc


def _toggle(ctx: click.Context, name: str, pipeline: str, disable: bool, airflow: bool) -> None:
    from changeflow.schedules import airflow_ops

    _, store = _store(ctx, name)
    try:
        row = store.set_disabled(name, disable, "user" if disable else None)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    if airflow:
        dag = airflow_ops.dag_id(pipeline, name)
        done = airflow_ops.set_paused(dag, disable)
        click.echo(f"DAG {dag} {'paused' if disable else 'unpaused'}" if done
                   else f"DAG {dag} is not known to Airflow (not parsed yet)", err=True)
    _show(row)


@schedules.command("enable")
@click.pass_context
@click.argument("name")
@pipeline_option
@click.option("--airflow/--no-airflow", default=True, help="also unpause the DAG")
def enable_cmd(ctx: click.Context, name: str, pipeline: str, airflow: bool) -> None:
    """Enable a schedule (clears its failure count) and unpause its DAG."""
    _toggle(ctx, name, pipeline, False, airflow)


@schedules.command("disable")
@click.pass_context
@click.argument("name")
@pipeline_option
@click.option("--airflow/--no-airflow", default=True, help="also pause the DAG")
def disable_cmd(ctx: click.Context, name: str, pipeline: str, airflow: bool) -> None:
    """Disable a schedule and pause its DAG; a running window stops within seconds."""
    _toggle(ctx, name, pipeline, True, airflow)


@schedules.command("drop")
@click.pass_context
@click.argument("name")
def drop_cmd(ctx: click.Context, name: str) -> None:
    """Drop a schedule (``UNSCHEDULE_PROPAGATION``); a running window stops."""
    _, store = _store(ctx, name)
    click.echo("dropped" if store.drop(name) else "no schedule")
