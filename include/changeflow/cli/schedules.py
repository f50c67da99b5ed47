"""``changeflow schedules``: list, sync, create, alter, enable, disable, drop, trigger, backfill.

``enable`` and ``disable`` change the schedule *and* its Airflow DAG's pause state, both
or neither: the project's Airflow is found first (``AIRFLOW_HOME``, else the project the
configuration belongs to, see :mod:`changeflow.airflow.home`) and its database checked
before anything changes. ``disable`` waits (``--wait``) for the DAG's runs in flight, so
that pausing strands nothing; runs still in flight after the wait finish, and the
plugin's listener pauses the DAG when the last one ends. ``--no-airflow`` changes the
schedule only. Every change is written to the state store, where a running window reads
it within a second or two.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, load
from changeflow.cli.output import Col, accepts_output, current_output, emit, output_option
from changeflow.errors import ChangeflowError

COLUMNS = [
    Col("propagation"), Col("state"), Col("summary", width=44), Col("failures", "count"),
    Col("next_retry", "time", "next retry"), Col("total_number", "count", "messages"),
    Col("total_bytes", "bytes", "bytes"), Col("windows", "count"),
    Col("avg_time", "duration", "avg/msg"), Col("avg_number", "count", "avg msgs"),
    Col("avg_size", "bytes", "avg size"), Col("max_number", "count", "max msgs"),
    Col("last_run", "time", "last run"), Col("next_run", "time", "next run"),
    Col("process"), Col("last_error_msg", "text", "last error", width=60),
]
ROW_COLUMNS = [c for c in COLUMNS if c.key not in ("process",)]


def _when(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    if value == "now":
        return dt.datetime.now(dt.UTC)
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(f"not an ISO time: {value!r}") from exc
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def pipeline_option(f: Any) -> Any:
    """``--pipeline``: the DAG id prefix of the rendered pipeline."""
    return click.option("--pipeline", envvar="CHANGEFLOW_PIPELINE", default="demo",
                        show_default=True, help="pipeline name used in DAG ids "
                        "[env CHANGEFLOW_PIPELINE]")(f)


def sub_pipeline(f: Any) -> Any:
    """``--pipeline`` on a subcommand (overrides the group's)."""
    return click.option("--pipeline", "sub_pipeline", default=None,
                        help="pipeline name used in DAG ids [the group's --pipeline]")(f)


def _pipeline(ctx: click.Context, override: str | None) -> str:
    return override or ctx.obj["pipeline"]


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


def use_airflow(config_path: str) -> None:
    """Point this process at the project's Airflow and check it, or refuse (nothing changed)."""
    from changeflow.airflow import home

    try:
        home.check_database(home.prepare(config_path))
    except ChangeflowError as exc:
        raise click.ClickException(f"{exc} (nothing was changed)") from exc


def _airflow_available(config_path: str) -> bool:
    from changeflow.airflow import home

    try:
        home.check_database(home.prepare(config_path))
        return True
    except ChangeflowError:
        return False


@main.group("schedules", invoke_without_command=True)
@click.pass_context
@config_option
@pipeline_option
@output_option
def schedules(ctx: click.Context, config_path: str, pipeline: str, output: str,
              as_json: bool) -> None:
    """Propagation schedules and their statistics (``user_queue_schedules``)."""
    ctx.obj = {"config": config_path, "pipeline": pipeline}
    if ctx.invoked_subcommand is not None:
        return
    from changeflow.views.schedules import schedule_rows

    cfg = load(config_path)
    airflow = _airflow_available(config_path)
    try:
        rows = schedule_rows(cfg, pipeline, with_airflow=airflow)
    except ChangeflowError as exc:
        raise _fail(exc) from exc
    emit(rows, current_output(), COLUMNS, empty="(no propagation)")


def _store(ctx: click.Context, name: str) -> Any:
    """The configuration and schedule store; the configured schedule is created if missing."""
    from changeflow.schedules.window import ensure_schedule

    cfg = load(ctx.obj["config"])
    try:
        cfg.component("propagation", name)
        return cfg, ensure_schedule(cfg, name, dt.datetime.now(dt.UTC))
    except ChangeflowError as exc:
        raise _fail(exc) from exc


def _show(ctx: click.Context, row: Any, message: str | None = None) -> None:
    from changeflow.views.schedules import state_of

    d = row.as_dict()
    d["state"] = state_of(d)
    if message:
        click.echo(message, err=current_output() != "table")
    emit([d], current_output(), ROW_COLUMNS)


@schedules.command("sync")
@accepts_output
@click.pass_context
def sync_cmd(ctx: click.Context) -> None:
    """Create the configured schedule of every propagation that has none."""
    from changeflow.schedules.window import ensure_schedule, schedule_store

    cfg = load(ctx.obj["config"])
    made = []
    try:
        for p in cfg.propagations:
            existed = schedule_store(cfg, p.name).get(p.name) is not None
            ensure_schedule(cfg, p.name, dt.datetime.now(dt.UTC))
            made.append({"propagation": p.name, "created": not existed})
    except ChangeflowError as exc:
        raise _fail(exc) from exc
    emit(made, current_output(), [Col("propagation"), Col("created", "bool")])


@schedules.command("create")
@accepts_output
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
        raise _fail(exc) from exc
    _show(ctx, store.require(name))


@schedules.command("alter")
@accepts_output
@click.pass_context
@click.argument("name")
@click.option("--start", default=None, help="ISO time or 'now'")
@click.option("--duration", type=float, default=None, help="window seconds")
@click.option("--next-time", type=float, default=None, help="seconds between window starts")
@click.option("--latency", type=float, default=None, help="seconds")
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
    if not changes:
        raise click.UsageError("nothing to alter: give --duration, --next-time, --latency, "
                               "--start or --infinite")
    try:
        _show(ctx, store.alter(name, **changes))
    except ChangeflowError as exc:
        raise _fail(exc) from exc


def _toggle(ctx: click.Context, name: str, disable: bool, airflow: bool, wait: float,
            pipeline: str | None) -> None:
    from changeflow.schedules import airflow_ops

    if airflow:
        use_airflow(ctx.obj["config"])
    cfg, store = _store(ctx, name)
    dag = airflow_ops.dag_id(_pipeline(ctx, pipeline), name)
    try:
        res = airflow_ops.toggle(cfg, name, dag, disable, wait=wait, airflow=airflow)
    except ChangeflowError as exc:
        raise _fail(exc) from exc
    _show(ctx, store.require(name), res.message)


@schedules.command("enable")
@accepts_output
@click.pass_context
@click.argument("name")
@click.option("--airflow/--no-airflow", default=True, show_default=True,
              help="also unpause the DAG")
@sub_pipeline
def enable_cmd(ctx: click.Context, name: str, airflow: bool, sub_pipeline: str | None) -> None:
    """Enable a schedule (clears its failure count) and unpause its DAG."""
    _toggle(ctx, name, False, airflow, 0, sub_pipeline)


@schedules.command("disable")
@accepts_output
@click.pass_context
@click.argument("name")
@click.option("--airflow/--no-airflow", default=True, show_default=True,
              help="also pause the DAG")
@click.option("--wait", type=float, default=60.0, show_default=True,
              help="seconds to wait for the DAG's runs in flight before pausing it")
@sub_pipeline
def disable_cmd(ctx: click.Context, name: str, airflow: bool, wait: float,
                sub_pipeline: str | None) -> None:
    """Disable a schedule and pause its DAG; the open window ends within seconds."""
    _toggle(ctx, name, True, airflow, wait, sub_pipeline)


@schedules.command("drop")
@accepts_output
@click.pass_context
@click.argument("name")
def drop_cmd(ctx: click.Context, name: str) -> None:
    """Drop a schedule (``UNSCHEDULE_PROPAGATION``); a running window stops."""
    _, store = _store(ctx, name)
    click.echo("dropped" if store.drop(name) else "no schedule")


@schedules.command("trigger")
@accepts_output
@click.pass_context
@click.argument("name")
@sub_pipeline
def trigger_cmd(ctx: click.Context, name: str, sub_pipeline: str | None) -> None:
    """Start a window run now (no logical date: the window open now, else one pass)."""
    from changeflow.schedules import airflow_ops

    use_airflow(ctx.obj["config"])
    _store(ctx, name)
    try:
        run = airflow_ops.trigger(airflow_ops.dag_id(_pipeline(ctx, sub_pipeline), name))
    except ChangeflowError as exc:
        raise _fail(exc) from exc
    emit({"propagation": name, "run_id": run}, current_output())


@schedules.command("backfill")
@accepts_output
@click.pass_context
@click.argument("name")
@click.option("--from", "start", required=True, help="ISO time: first window start")
@click.option("--to", "end", required=True, help="ISO time: last window start")
@sub_pipeline
def backfill_cmd(ctx: click.Context, name: str, start: str, end: str,
                 sub_pipeline: str | None) -> None:
    """Run the windows starting in a past range (one Airflow run each)."""
    from changeflow.schedules import airflow_ops

    use_airflow(ctx.obj["config"])
    _store(ctx, name)
    try:
        made = airflow_ops.backfill(airflow_ops.dag_id(_pipeline(ctx, sub_pipeline), name),
                                    _when(start), _when(end))  # type: ignore[arg-type]
    except ChangeflowError as exc:
        raise _fail(exc) from exc
    emit({"propagation": name, "backfill": made["id"], "runs": made["runs"]},
         current_output())


@schedules.command("undeliverable")
@accepts_output
@click.pass_context
def undeliverable_cmd(ctx: click.Context) -> None:
    """Messages marked UNDELIVERABLE (moved to the exception queue), newest first."""
    from changeflow.views.schedules import undeliverable_rows

    rows = undeliverable_rows(load(ctx.obj["config"]))
    emit(rows, current_output(), [
        Col("propagation"), Col("source_seq", "count", "source batch"),
        Col("n_messages", "count", "messages"), Col("exception_queue", header="exception queue"),
        Col("state"), Col("created_at", "time", "when"), Col("error_message", header="error",
                                                             width=70)])
