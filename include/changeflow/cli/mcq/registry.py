"""``changeflow mcq sync|table|listener|interest|log``: the registry and the log calls."""

from __future__ import annotations

from typing import Any

import click

from changeflow.cli.mcq.group import (
    clean_errors,
    mcq,
    mcq_config_option,
    open_cfg,
)
from changeflow.cli.output import Col, chosen, emit, output_option


@mcq.command("sync")
@mcq_config_option
@clean_errors
def sync_cmd(config_path: str) -> None:
    """Register the tables, listeners and interests the configuration declares."""
    from changeflow.mcq.store import section

    cfg, q = open_cfg(config_path)
    n = q.sync(section(cfg))
    click.echo(f"registered {n['tables']} tables, {n['listeners']} listeners, "
               f"{n['interests']} interests")


# -- registry ---------------------------------------------------------------------------
@mcq.group("table")
def table() -> None:
    """Tables and subtypes changes are logged for (meta_change_tables)."""


@table.command("add")
@click.argument("tname")
@click.option("--subtype", default="", help="what about the table's object changed")
@click.option("--comments", help="what is logged, for developers")
@click.option("--person-id", help="where person_id comes from")
@click.option("--pkey-string", help="where pkey_string comes from")
@click.option("--pkey-number", help="where pkey_number comes from")
@click.option("--aux-string", help="where aux_string comes from")
@mcq_config_option
@clean_errors
def table_add(tname: str, subtype: str, config_path: str, **kw: Any) -> None:
    """Register table TNAME (and a subtype) with the sources of its keys."""
    click.echo(f"table {open_cfg(config_path)[1].add_table(tname, subtype, **kw)} registered")


@table.command("drop")
@click.argument("tname")
@click.option("--subtype", default="")
@click.option("--force", is_flag=True, help="drop the interests in it too")
@mcq_config_option
@clean_errors
def table_drop(tname: str, subtype: str, force: bool, config_path: str) -> None:
    """Unregister a table and subtype."""
    click.echo(f"table {open_cfg(config_path)[1].drop_table(tname, subtype, force=force)} "
               "dropped")


@table.command("list")
@mcq_config_option
@output_option
@clean_errors
def table_list(config_path: str, output: str, as_json: bool) -> None:
    """Registered tables and subtypes with the sources of their keys."""
    from changeflow.mcq.registry import list_tables

    rows = list_tables(open_cfg(config_path)[1].store)
    emit(rows, chosen(output, as_json), [
        Col("tname"), Col("subtype"), Col("person_id"), Col("pkey_string"), Col("pkey_number"),
        Col("aux_string"), Col("stack_date", "time", "first logged"), Col("comments", width=40)])


@mcq.group("listener")
def listener() -> None:
    """Listeners (meta_change_listeners)."""


@listener.command("add")
@click.argument("proc_name")
@click.option("--comments")
@click.option("--role")
@click.option("--owner")
@click.option("--frequency", default="daily", show_default=True, help="e.g. 5s, 3min, daily")
@click.option("--alert-after", default=None, help="silence before the monitor alerts")
@click.option("--claim-timeout", default="5min", show_default=True,
              help="how long a worker holds an entry it got before it is handed out again")
@click.option("--workers", type=click.IntRange(1), default=1, show_default=True,
              help="how many workers consume it at once")
@click.option("--redeliver", type=click.Choice(["immediate", "claim_timeout"]),
              help="when an entry got but not acked comes back (default: immediate for "
                   "one worker, claim_timeout for several)")
@mcq_config_option
@clean_errors
def listener_add(proc_name: str, config_path: str, **kw: Any) -> None:
    """Register listener PROC_NAME."""
    click.echo(f"listener {open_cfg(config_path)[1].add_listener(proc_name, **kw)} registered")


@listener.command("drop")
@click.argument("proc_name")
@click.option("--force", is_flag=True,
              help="remove its pending entries (as flush does; never counted as processed)")
@mcq_config_option
@clean_errors
def listener_drop(proc_name: str, force: bool, config_path: str) -> None:
    """Unregister a listener and its interests."""
    n = open_cfg(config_path)[1].drop_listener(proc_name, force=force)
    click.echo(f"listener {proc_name} dropped ({n} pending entries flushed)")


@listener.command("list")
@mcq_config_option
@output_option
@clean_errors
def listener_list(config_path: str, output: str, as_json: bool) -> None:
    """Registered listeners."""
    from changeflow.mcq.registry import list_listeners

    rows = list_listeners(open_cfg(config_path)[1].store)
    emit(rows, chosen(output, as_json), [
        Col("proc_name", header="listener"), Col("owner"), Col("role"),
        Col("frequency", "duration"), Col("claim_timeout", "duration", "claim timeout"),
        Col("workers", "count"), Col("redelivery"), Col("stack_date", "time", "first get"),
        Col("comments", width=50)])


@mcq.group("interest")
def interest() -> None:
    """Which listener wants which table and subtype (meta_change_interests)."""


@interest.command("add")
@click.argument("proc_name")
@click.argument("tname")
@click.option("--subtype", default="", help="a subtype, or * for all of them")
@click.option("--comments", help="why it is interested")
@mcq_config_option
@clean_errors
def interest_add(proc_name: str, tname: str, subtype: str, comments: str | None,
                 config_path: str) -> None:
    """Make PROC_NAME interested in TNAME (and a subtype)."""
    q = open_cfg(config_path)[1]
    click.echo(f"interest {q.add_interest(proc_name, tname, subtype, comments=comments)} added")


@interest.command("drop")
@click.argument("proc_name")
@click.argument("tname")
@click.option("--subtype", default="")
@mcq_config_option
@clean_errors
def interest_drop(proc_name: str, tname: str, subtype: str, config_path: str) -> None:
    """Remove an interest (pending entries stay)."""
    click.echo(f"interest {open_cfg(config_path)[1].drop_interest(proc_name, tname, subtype)} "
               "dropped")


@interest.command("list")
@click.argument("proc_name", required=False)
@mcq_config_option
@output_option
@clean_errors
def interest_list(proc_name: str | None, config_path: str, output: str, as_json: bool) -> None:
    """Interests, of one listener or all."""
    from changeflow.mcq.registry import list_interests

    rows = list_interests(open_cfg(config_path)[1].store, proc_name)
    emit(rows, chosen(output, as_json), [Col("proc_name", header="listener"), Col("tname"),
                                         Col("subtype"), Col("comments", width=60)])


# -- log calls --------------------------------------------------------------------------
@mcq.command("log")
@click.argument("change_type", type=click.Choice(["insert", "update", "delete", "I", "C", "D"]))
@click.argument("tname")
@click.option("--subtype", default="")
@click.option("--rrowid")
@click.option("--person-id")
@click.option("--pkey-string")
@click.option("--pkey-number")
@click.option("--aux-string")
@click.option("--listener", help="a manual entry for this listener only")
@click.option("--bulk", is_flag=True, help="in the bulk lane")
@mcq_config_option
@clean_errors
def log_cmd(change_type: str, tname: str, subtype: str, listener: str | None, bulk: bool,
            config_path: str, **keys: Any) -> None:
    """Log a change of TNAME: one entry per interested listener."""
    q = open_cfg(config_path)[1]
    n = q.log(change_type, tname, subtype, listener=listener, bulk=bulk,
              **{k: v for k, v in keys.items() if v is not None})
    click.echo(f"{n} entr{'y' if n == 1 else 'ies'} queued")
