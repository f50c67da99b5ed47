"""``changeflow mcq get|ack|put-back|status|pending|origins|flush|purge``.

``get`` prints a listener's next change (JSON by default), claimed by a worker whose
name it prints as ``claimed_by``; a script acknowledges it with ``ack LISTENER ENTRY
--worker NAME`` (or gives it back with ``put-back``). A script that loops gives the
same ``--worker`` to every call.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from changeflow.cli.mcq.group import (
    ENTRY_COLUMNS,
    LISTENER_COLUMNS,
    TABLE_COLUMNS,
    clean_errors,
    mcq,
    mcq_config_option,
    open_cfg,
)
from changeflow.cli.output import chosen, emit, output_option


def _worker(config_path: str, listener: str, worker: str | None) -> Any:
    return open_cfg(config_path)[1].worker(listener, worker_id=worker)


def _rec(listener: str, entry: int) -> Any:
    from changeflow.mcq.model import ChangeRec

    return ChangeRec(proc_name=listener, entry_number=entry, change_type="?")


@mcq.command("get")
@click.argument("listener")
@click.option("--tname", help="only changes of this table")
@click.option("--worker", help="the worker name to claim it as (default: a new one)")
@mcq_config_option
@output_option
@clean_errors
def get_cmd(listener: str, tname: str | None, worker: str | None, config_path: str,
            output: str, as_json: bool) -> None:
    """Print LISTENER's next change (change_type null: nothing pending)."""
    rec = _worker(config_path, listener, worker).get_changes(tname)
    fmt = chosen(output, as_json)
    emit(rec.as_dict(), "json" if fmt == "table" else fmt)


@mcq.command("ack")
@click.argument("listener")
@click.argument("entry", type=int)
@click.option("--worker", required=True, help="the worker that got it (claimed_by)")
@mcq_config_option
@clean_errors
def ack_cmd(listener: str, entry: int, worker: str, config_path: str) -> None:
    """Mark entry ENTRY of LISTENER processed."""
    _worker(config_path, listener, worker).ack_change(_rec(listener, entry))
    click.echo(f"entry {entry} of {listener} processed")


@mcq.command("put-back")
@click.argument("listener")
@click.argument("entry", type=int)
@click.option("--worker", required=True, help="the worker that got it (claimed_by)")
@click.option("--hold-until", help="ISO time it waits until")
@click.option("--delay", type=float, help="seconds it waits")
@mcq_config_option
@clean_errors
def put_back_cmd(listener: str, entry: int, worker: str, hold_until: str | None,
                 delay: float | None, config_path: str) -> None:
    """Give entry ENTRY back: its retry count rises, it waits until the hold."""
    when = None
    if hold_until is not None:
        try:
            when = dt.datetime.fromisoformat(hold_until.replace("Z", "+00:00"))
        except ValueError as exc:
            raise click.ClickException(f"--hold-until {hold_until!r} is not an ISO time") \
                from exc
    held = _worker(config_path, listener, worker).put_back(_rec(listener, entry), when,
                                                           delay=delay)
    click.echo(f"entry {entry} of {listener} put back"
               + (f", held until {held.isoformat(timespec='seconds')}" if held else ""))


@mcq.command("status")
@click.option("--by", type=click.Choice(["listener", "table", "both"]), default="both",
              show_default=True)
@mcq_config_option
@output_option
@clean_errors
def status_cmd(by: str, config_path: str, output: str, as_json: bool) -> None:
    """Pending and processed entries per listener and per table; the oldest pending."""
    from changeflow.mcq import views

    store = open_cfg(config_path)[1].store
    fmt = chosen(output, as_json)
    data: dict[str, Any] = {}
    if by in ("listener", "both"):
        data["listeners"] = views.listener_rows(store)
    if by in ("table", "both"):
        data["tables"] = views.table_rows(store)
    if fmt != "table":
        emit(data, fmt)
        return
    if "listeners" in data:
        emit(data["listeners"], fmt, LISTENER_COLUMNS, empty="(no listeners)")
    if "tables" in data:
        if "listeners" in data:
            click.echo("")
        emit(data["tables"], fmt, TABLE_COLUMNS, empty="(no tables)")


@mcq.command("pending")
@click.argument("listener")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@mcq_config_option
@output_option
@clean_errors
def pending_cmd(listener: str, limit: int, config_path: str, output: str,
                as_json: bool) -> None:
    """LISTENER's pending entries, in the order it gets them."""
    from changeflow.mcq import views

    rows = views.pending_entries(open_cfg(config_path)[1].store, listener, limit)
    emit(rows, chosen(output, as_json), ENTRY_COLUMNS, empty="(nothing pending)")


@mcq.command("origins")
@mcq_config_option
@output_option
@clean_errors
def origins_cmd(config_path: str, output: str, as_json: bool) -> None:
    """The call stack of the first log per table and subtype, and of each listener."""
    from changeflow.mcq import views

    rows = views.origin_rows(open_cfg(config_path)[1].store)
    fmt = chosen(output, as_json)
    if fmt != "table":
        emit(rows, fmt)
        return
    for r in rows:
        when = r["stack_date"].isoformat(timespec="seconds") if r["stack_date"] else "never"
        click.echo(f"{r['kind']} {r['name']}  ({when})")
        for line in (r["call_stack"] or "-").splitlines():
            click.echo(f"    {line}")


@mcq.command("flush")
@click.argument("listener")
@click.option("--yes", "confirmed", is_flag=True, help="do not ask")
@mcq_config_option
@clean_errors
def flush_cmd(listener: str, confirmed: bool, config_path: str) -> None:
    """Remove every pending entry of LISTENER (asks for its name unless --yes)."""
    from changeflow.mcq import views

    store = open_cfg(config_path)[1].store
    confirm = listener if confirmed else click.prompt(
        f"This removes every pending entry of {listener}. Type its name to confirm")
    n = views.flush(store, listener, confirm=confirm)
    click.echo(f"flushed {n} pending entr{'y' if n == 1 else 'ies'} of {listener}")


@mcq.command("purge")
@click.option("--older-than", default="30d", show_default=True,
              help="processed entries older than this (e.g. 7d, 12h)")
@mcq_config_option
@clean_errors
def purge_cmd(older_than: str, config_path: str) -> None:
    """Delete processed entries older than a cut-off (pending entries are kept)."""
    from changeflow.mcq import views
    from changeflow.mcq.config import seconds

    try:
        age = seconds(older_than)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    n = views.purge(open_cfg(config_path)[1].store, age)
    click.echo(f"purged {n} processed entries older than {older_than}")
