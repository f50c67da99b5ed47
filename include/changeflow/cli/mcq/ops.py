"""``changeflow mcq`` operations: triggers, pump, refresh, listen, monitor, DAGs, demo."""

from __future__ import annotations

import dataclasses
import signal
import threading
from pathlib import Path
from typing import Any

import click

from changeflow.cli.mcq.group import clean_errors, mcq, mcq_config_option, open_cfg
from changeflow.cli.output import Col, chosen, emit, output_option


def _source(cfg: Any, source: str | None, url_env: str | None) -> tuple[str, str]:
    """(name, libpq URL) of ``--source`` or of the URL in ``--url-env``."""
    import os

    from changeflow.mcq.store import source_url

    if (source is None) == (url_env is None):
        raise click.ClickException("give --source NAME (from mcq.sources) or --url-env VAR")
    if source is not None:
        return source, source_url(cfg, source)
    assert url_env is not None
    url = os.environ.get(url_env)
    if not url:
        raise click.ClickException(f"environment variable {url_env} is not set")
    return url_env, url


def _cols(value: str | None) -> list[str] | None:
    return [c.strip() for c in value.split(",") if c.strip()] if value else None


@mcq.command("install-trigger")
@click.argument("table")
@click.option("--tname", required=True, help="the registered table changes are logged under")
@click.option("--subtype", default="")
@click.option("--source", help="a source of mcq.sources")
@click.option("--url-env", help="or: an environment variable holding the source's URL")
@click.option("--person-id", help="source column of person_id")
@click.option("--pkey-string", help="source column of pkey_string")
@click.option("--pkey-number", help="source column of pkey_number")
@click.option("--aux-string", help="source column of aux_string")
@click.option("--rowid", help="columns identifying the row (default: its primary key)")
@click.option("--columns", help="log updates only when one of these columns changes")
@click.option("--events", default="INSERT,UPDATE,DELETE", show_default=True)
@click.option("--mode", type=click.Choice(["auto", "direct", "outbox"]), default="auto",
              show_default=True, help="direct: the source is the MCQ store's database")
@click.option("--strict/--warn", default=None,
              help="direct mode: an unregistered pair fails the source statement [mcq.strict]")
@mcq_config_option
@output_option
@clean_errors
def install_trigger(table: str, tname: str, subtype: str, source: str | None,
                    url_env: str | None, rowid: str | None, columns: str | None, events: str,
                    mode: str, strict: bool | None, config_path: str, output: str,
                    as_json: bool, **keys: Any) -> None:
    """Install the log trigger on PostgreSQL source TABLE: its changes log TNAME/SUBTYPE."""
    from changeflow.mcq import triggers
    from changeflow.mcq.store import section

    cfg, q = open_cfg(config_path)
    _, url = _source(cfg, source, url_env)
    spec = triggers.TriggerSpec(
        table=table, tname=tname, subtype=subtype, rowid=_cols(rowid), columns=_cols(columns),
        events=tuple(e.upper() for e in _cols(events) or []),
        strict=section(cfg).strict if strict is None else strict, **keys)
    done = triggers.install(q.store, url, spec, mode=mode)  # type: ignore[arg-type]
    emit(done, chosen(output, as_json))


@mcq.command("uninstall-trigger")
@click.argument("table")
@click.option("--tname", required=True)
@click.option("--subtype", default="")
@click.option("--source")
@click.option("--url-env")
@mcq_config_option
@clean_errors
def uninstall_trigger(table: str, tname: str, subtype: str, source: str | None,
                      url_env: str | None, config_path: str) -> None:
    """Drop the log trigger of TNAME/SUBTYPE from source TABLE."""
    from changeflow.mcq import triggers

    cfg, _ = open_cfg(config_path)
    dropped = triggers.uninstall(_source(cfg, source, url_env)[1], table, tname, subtype)
    click.echo(f"dropped {', '.join(dropped)}")


@mcq.command("triggers")
@click.option("--source")
@click.option("--url-env")
@mcq_config_option
@output_option
@clean_errors
def list_triggers(source: str | None, url_env: str | None, config_path: str, output: str,
                  as_json: bool) -> None:
    """The MCQ triggers installed in a source database."""
    from changeflow.mcq import triggers

    cfg, _ = open_cfg(config_path)
    rows = triggers.installed(_source(cfg, source, url_env)[1])
    emit(rows, chosen(output, as_json), [
        Col("table"), Col("trigger"), Col("mode"), Col("pair"), Col("person_id"),
        Col("pkey_string"), Col("pkey_number"), Col("aux_string"), Col("rowid"),
        Col("enabled", "bool")])


@mcq.command("pump")
@click.argument("source")
@click.option("--follow", is_flag=True, help="keep polling (every pump_every) until stopped")
@click.option("--for", "seconds_", type=float, help="stop after this many seconds")
@mcq_config_option
@output_option
@clean_errors
def pump_cmd(source: str, follow: bool, seconds_: float | None, config_path: str, output: str,
             as_json: bool) -> None:
    """Move SOURCE's change log (outbox-mode triggers) into the MCQ."""
    from changeflow.mcq.config import seconds
    from changeflow.mcq.pump import pump
    from changeflow.mcq.store import section, source_url

    cfg, q = open_cfg(config_path)
    every = seconds(section(cfg).source(source).pump_every) if follow else 1.0
    r = pump(q.store, source, source_url(cfg, source), strict=section(cfg).strict,
             follow=follow, max_seconds=seconds_, poll=every)
    emit(dataclasses.asdict(r), chosen(output, as_json))


@mcq.command("refresh")
@click.argument("listener")
@click.argument("tname")
@click.option("--subtype", default="")
@click.option("--query", help="SQL on --source returning key columns")
@click.option("--source", help="the source the query runs on (mcq.sources)")
@click.option("--file", "path", type=click.Path(), help="a Parquet or CSV file of keys")
@click.option("--realtime", is_flag=True, help="queue in the real-time lane (default: bulk)")
@mcq_config_option
@output_option
@clean_errors
def refresh_cmd(listener: str, tname: str, subtype: str, query: str | None,
                source: str | None, path: str | None, realtime: bool, config_path: str,
                output: str, as_json: bool) -> None:
    """Queue every object of a selection for LISTENER (all or nothing, idempotent)."""
    from changeflow.mcq import refresh
    from changeflow.mcq.store import source_url

    cfg, q = open_cfg(config_path)
    if (query is None) == (path is None):
        raise click.ClickException("give --query (with --source) or --file")
    if query is not None:
        if source is None:
            raise click.ClickException("--query needs --source")
        rows: Any = refresh.rows_from_query(source_url(cfg, source), query)
        where = f"query on {source}"
    else:
        assert path is not None
        rows, where = refresh.rows_from_file(path), path
    r = refresh.refresh(q.store, listener, tname, subtype, rows, bulk=not realtime,
                        where=where)
    emit(dataclasses.asdict(r), chosen(output, as_json))


@mcq.command("listen")
@click.argument("listener")
@click.option("--once", is_flag=True, help="drain the queue once and stop")
@click.option("--for", "seconds_", type=float, help="poll for this many seconds, then stop")
@click.option("--max", "max_entries", type=click.IntRange(1), help="at most this many changes")
@mcq_config_option
@output_option
@clean_errors
def listen_cmd(listener: str, once: bool, seconds_: float | None, max_entries: int | None,
               config_path: str, output: str, as_json: bool) -> None:
    """Run LISTENER's configured handler: poll (real-time listeners) or drain once.

    A poller runs until --for elapses or it gets SIGINT/SIGTERM.
    """
    from changeflow.config import load_config
    from changeflow.mcq.listeners.runner import run_listener

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    r = run_listener(load_config(config_path), listener, duration=seconds_,
                     once=True if once or max_entries else None, max_entries=max_entries,
                     stop=stop)
    emit(r.as_dict(), chosen(output, as_json))


@mcq.command("mark")
@click.argument("process")
@click.option("--expect-every", default="1d", show_default=True,
              help="how often it marks (e.g. 1d, 5min)")
@click.option("--alert-after", default=None, help="silence before an alert [from expect]")
@mcq_config_option
@clean_errors
def mark_cmd(process: str, expect_every: str, alert_after: str | None,
             config_path: str) -> None:
    """Mark PROCESS alive (e.g. the last step of a nightly push job)."""
    from changeflow.mcq import monitor
    from changeflow.mcq.config import seconds

    try:
        every = seconds(expect_every)
        after = seconds(alert_after) if alert_after else None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    when = monitor.mark_process(open_cfg(config_path)[1].store, process, expect_every=every,
                                alert_after=after)
    click.echo(f"{process} marked alive at {when.isoformat(timespec='seconds')}")


@mcq.command("monitor")
@click.option("--check", "do_check", is_flag=True,
              help="alert on silent processes (what the monitor DAG runs)")
@mcq_config_option
@output_option
@clean_errors
def monitor_cmd(do_check: bool, config_path: str, output: str, as_json: bool) -> None:
    """Processes the monitor watches: last mark, silence, limit (--check: and alert)."""
    from changeflow.mcq import monitor
    from changeflow.mcq.config import seconds
    from changeflow.mcq.store import section

    cfg, q = open_cfg(config_path)
    fmt = chosen(output, as_json)
    if do_check:
        sent = monitor.check(q.store, cfg.alerts,
                             mark_interval=seconds(section(cfg).monitor.mark_interval))
        emit(sent, fmt, [Col("event"), Col("proc"), Col("silent_for", "duration", "silent"),
                         Col("alert_after", "duration", "limit"), Col("channels")],
             empty="(no alerts)")
        return
    emit(monitor.status(q.store), fmt, [
        Col("proc"), Col("listener"), Col("last_mark", "time", "last mark"),
        Col("marks", "count"), Col("silent_for", "duration", "silent"),
        Col("alert_after", "duration", "limit"), Col("late", "bool"), Col("alerted", "bool"),
        Col("marked_by")])


@mcq.command("render-dags")
@click.option("--out", default="dags/changeflow_mcq.py", show_default=True,
              type=click.Path(dir_okay=False))
@mcq_config_option
@clean_errors
def render_cmd(out: str, config_path: str) -> None:
    """Write the DAG file of the MCQ's listeners, monitor and pumps."""
    from changeflow.airflow.mcq import render
    from changeflow.config import load_config

    cfg = load_config(config_path)
    target = Path(out).resolve()
    target.write_text(render(cfg, project_root=str(target.parent.parent)))
    click.echo(f"wrote {out}")


@mcq.command("demo")
@click.option("--people", type=click.IntRange(1), default=40, show_default=True)
@mcq_config_option
@clean_errors
def demo_cmd(people: int, config_path: str) -> None:
    """The MCQ demo's PostgreSQL part: triggers, pump, backfill, the Insite listener."""
    from changeflow.config import load_config
    from changeflow.mcq.demo import run_demo
    from changeflow.testing.pg_cluster import PgCluster

    pg = PgCluster().start()  # throwaway: the demo needs no server of its own
    try:
        ok = run_demo(load_config(config_path), pg, people=people, echo=click.echo)
    finally:
        pg.stop()
    if not ok:
        raise click.ClickException("MCQ demo FAILED")
