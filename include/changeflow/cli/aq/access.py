"""``changeflow aq``: subscribers, access control, exception queues and the time manager.

The queue and message commands (and the ``aq`` group) are in :mod:`.queues`; these
register on the same group.
"""

from __future__ import annotations

from typing import Any

import click

from changeflow.cli.aq.queues import (
    MESSAGE_COLUMNS,
    SUBSCRIBER_COLUMNS,
    aq,
    open_cfg,
    site_and_queue,
    site_option,
)
from changeflow.cli.common import config_option
from changeflow.cli.output import Col, chosen, emit, output_option
from changeflow.messaging import admin, views


@aq.group("subscribers")
def subscribers() -> None:
    """Subscribers of multi-consumer queues (local, or remote: owner.queue@site)."""


@subscribers.command("list")
@click.argument("queue", required=False)
@site_option
@config_option
@output_option
def list_subscribers(queue: str | None, site: str | None, config_path: str, output: str,
                     as_json: bool) -> None:
    """Subscribers of QUEUE (or of every queue), with the messages waiting for each."""
    rt, q = site_and_queue(open_cfg(config_path), queue, site)
    emit(views.subscribers(rt.store, q or None), chosen(output, as_json), SUBSCRIBER_COLUMNS)


@subscribers.command("add")
@click.argument("queue")
@click.argument("name", required=False)
@click.option("--address", help="owner.queue@site of a remote subscriber")
@click.option("--rule", help="e.g. \"tab.user_data.region = 'WEST'\" or \"priority = 1\"")
@site_option
@config_option
def add_subscriber(queue: str, name: str | None, address: str | None, rule: str | None,
                   site: str | None, config_path: str) -> None:
    """Subscribe NAME (an agent; may be left out for a remote queue) to QUEUE."""
    rt, q = site_and_queue(open_cfg(config_path), queue, site)
    admin.add_subscriber(rt, q, name, address=address, rule=rule, created_by="cli")
    click.echo(f"subscriber {name or ''}{'@' + address if address else ''} added to {q}")


@subscribers.command("remove")
@click.argument("queue")
@click.argument("name", required=False)
@click.option("--address")
@site_option
@config_option
def remove_subscriber(queue: str, name: str | None, address: str | None, site: str | None,
                      config_path: str) -> None:
    """Unsubscribe NAME from QUEUE (its waiting messages are removed)."""
    rt, q = site_and_queue(open_cfg(config_path), queue, site)
    n = admin.remove_subscriber(rt, q, name, address=address)
    click.echo(f"subscriber removed from {q} ({n} waiting messages removed)")


# -- access ----------------------------------------------------------------------------------
@aq.command("grant")
@click.argument("privilege", type=click.Choice(["enqueue", "dequeue", "all"],
                                               case_sensitive=False))
@click.argument("queue")
@click.argument("grantee")
@site_option
@config_option
def grant(privilege: str, queue: str, grantee: str, site: str | None, config_path: str) -> None:
    """Grant PRIVILEGE on QUEUE (* for every queue) to user GRANTEE."""
    rt, q = site_and_queue(open_cfg(config_path), None if queue == "*" else queue, site)
    admin.grant_queue_privilege(rt, privilege, q or "*", grantee, granted_by="cli")
    click.echo(f"{privilege.upper()} on {q or '*'} granted to {grantee.upper()}")


@aq.command("revoke")
@click.argument("privilege", type=click.Choice(["enqueue", "dequeue", "all"],
                                               case_sensitive=False))
@click.argument("queue")
@click.argument("grantee")
@site_option
@config_option
def revoke(privilege: str, queue: str, grantee: str, site: str | None, config_path: str) -> None:
    """Revoke PRIVILEGE on QUEUE from GRANTEE."""
    rt, q = site_and_queue(open_cfg(config_path), None if queue == "*" else queue, site)
    n = admin.revoke_queue_privilege(rt, privilege, q or "*", grantee)
    click.echo(f"{n} privileges revoked")


@aq.command("enable-db-access")
@click.argument("agent")
@click.argument("user")
@site_option
@config_option
def enable_db_access(agent: str, user: str, site: str | None, config_path: str) -> None:
    """Let USER act as AGENT on secure queues."""
    rt, _ = site_and_queue(open_cfg(config_path), None, site)
    admin.enable_db_access(rt, agent, user)
    click.echo(f"{user.upper()} may act as agent {agent.upper()}")


@aq.command("disable-db-access")
@click.argument("agent")
@click.argument("user")
@site_option
@config_option
def disable_db_access(agent: str, user: str, site: str | None, config_path: str) -> None:
    """Stop USER acting as AGENT."""
    rt, _ = site_and_queue(open_cfg(config_path), None, site)
    admin.disable_db_access(rt, agent, user)
    click.echo(f"{user.upper()} no longer acts as agent {agent.upper()}")


@aq.command("privileges")
@click.argument("queue", required=False)
@site_option
@config_option
@output_option
def list_privileges(queue: str | None, site: str | None, config_path: str, output: str,
                    as_json: bool) -> None:
    """Queue privileges and the agents each user may act as."""
    rt, q = site_and_queue(open_cfg(config_path), queue, site)
    fmt = chosen(output, as_json)
    grants = views.privileges(rt.store, q or None)
    if fmt != "table":
        emit({"privileges": grants, "agents": views.agents(rt.store)}, fmt)
        return
    emit(grants, fmt, [Col("queue"), Col("grantee"), Col("privilege"), Col("granted_by")])
    click.echo("")
    emit(views.agents(rt.store), fmt, [Col("agent"), Col("user")], empty="(no agents)")


# -- the exception queue and the time manager -------------------------------------------------
@aq.group("exceptions")
def exceptions() -> None:
    """The exception queue: EXPIRED and UNDELIVERABLE messages; re-enqueue or delete them."""


@exceptions.command("list")
@click.argument("queue")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1))
@site_option
@config_option
@output_option
def list_exceptions(queue: str, limit: int, site: str | None, config_path: str, output: str,
                    as_json: bool) -> None:
    """Messages in the exception queue of QUEUE (or in exception queue QUEUE)."""
    rt, q = site_and_queue(open_cfg(config_path), queue, site)
    emit(views.exception_messages(rt.store, q, limit=limit), chosen(output, as_json),
         MESSAGE_COLUMNS)


def _exception_command(name: str, action: Any, done: str, doc: str) -> None:
    """Register ``aq exceptions NAME QUEUE [MSG_ID ...] [--all]`` running ``action``."""

    @exceptions.command(name, help=doc)
    @click.argument("queue")
    @click.argument("msg_ids", nargs=-1)
    @click.option("--all", "all_", is_flag=True, help="every message of the exception queue")
    @site_option
    @config_option
    def command(queue: str, msg_ids: tuple[str, ...], all_: bool, site: str | None,
                config_path: str) -> None:
        if bool(msg_ids) == all_:
            raise click.UsageError("name the messages (MSG_ID ...) or give --all")
        rt, q = site_and_queue(open_cfg(config_path), queue, site)
        n = action(rt, q, None if all_ else list(msg_ids))
        click.echo(f"{n} messages {done}")


_exception_command("requeue", admin.requeue, "re-enqueued",
                   "Put messages of exception queue QUEUE back into their original queue, READY.")
_exception_command("delete", admin.delete_exceptions, "deleted",
                   "Delete messages from exception queue QUEUE.")


@aq.command("time-manager")
@click.option("--once", is_flag=True, help="one pass, then exit")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(0.05),
              help="seconds between passes")
@config_option
@output_option
def time_manager(once: bool, interval: float, config_path: str, output: str,
                 as_json: bool) -> None:
    """Run the time manager (delays, expiration, lapsed locks, retention) on every site."""
    from changeflow.messaging import timemanager
    from changeflow.sites import site

    cfg = open_cfg(config_path)
    stores = [site(cfg, name).store for name in cfg.sites]
    if once:
        rows = [{"site": name, **timemanager.run_once(s).as_dict()}
                for name, s in zip(cfg.sites, stores, strict=True)]
        emit(rows, chosen(output, as_json), [Col("site"), Col("ready", "count"),
                                             Col("expired", "count"),
                                             Col("rolled_back", "count", "rolled back"),
                                             Col("exceeded", "count"), Col("purged", "count")])
        return
    click.echo(f"time manager running every {interval:g} s on {', '.join(cfg.sites)} "
               "(Ctrl-C stops it)")
    try:
        timemanager.run_forever(stores, interval)
    except KeyboardInterrupt:
        click.echo("stopped")
