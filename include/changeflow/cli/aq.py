"""``changeflow aq``: Advanced Queuing for applications (DBMS_AQADM and DBMS_AQ).

Queues are named ``owner.name``, or ``owner.name@site`` when the pipeline declares
several sites (``--site`` sets the default). Refusals print one line and exit 1 (bad
input), 65 (terminal) or 75 (transient), and change nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, load
from changeflow.cli.output import Col, chosen, emit, output_option
from changeflow.config import PipelineConfig
from changeflow.messaging import admin, views
from changeflow.messaging.declare import setup, site_of
from changeflow.messaging.dictionary import exception_queue_name

QUEUE_COLUMNS = [Col("queue"), Col("queue_type", header="type"),
                 Col("payload_type", header="payload"),
                 Col("sort_order", header="order"), Col("READY", "count"),
                 Col("WAITING", "count"), Col("PROCESSED", "count"), Col("EXPIRED", "count"),
                 Col("UNDELIVERABLE", "count"), Col("locked", "count"),
                 Col("enqueue_enabled", "bool", "enq"), Col("dequeue_enabled", "bool", "deq"),
                 Col("oldest", "time", "oldest")]
MESSAGE_COLUMNS = [Col("msg_id"), Col("consumer"), Col("state"), Col("priority", "count"),
                   Col("correlation"), Col("attempts", "count"),
                   Col("enq_time", "time", "enqueued"),
                   Col("original_queue", header="from"), Col("reason", width=50)]
SUBSCRIBER_COLUMNS = [Col("queue"), Col("name"), Col("address"), Col("kind"),
                      Col("pending", "count"), Col("rule", width=60)]


def site_option(f: Any) -> Any:
    """``--site``: the site of queues named without ``@site``."""
    return click.option("--site", help="site of the queues (default: the only one)")(f)


def _site(cfg: PipelineConfig, ref: str | None, site: str | None) -> tuple[Any, str]:
    """The site runtime and bare queue name of ``owner.name[@site]``."""
    name, _, at = (ref or "").partition("@")
    _, rt = site_of(cfg, at or site)
    return rt, name.lower()


def _cfg(config_path: str) -> PipelineConfig:
    cfg = load(config_path)
    setup(cfg)
    return cfg


@main.group("aq")
def aq() -> None:
    """Advanced Queuing: queue tables, queues, enqueue/dequeue, subscribers, access."""


# -- queue tables and queues --------------------------------------------------------------
@aq.command("create-queue-table")
@click.argument("name")
@click.option("--payload-type", default="RAW", show_default=True,
              help="RAW, an object type, SYS.ANYDATA or a JMS type")
@click.option("--sort-order", default="enq_time", show_default=True,
              help="enq_time, priority, commit_time, priority,enq_time, priority,commit_time")
@click.option("--multiple-consumers", is_flag=True, help="a topic with subscribers")
@click.option("--message-grouping", type=click.Choice(["none", "transactional"]),
              default="none", show_default=True)
@click.option("--secure", is_flag=True, help="only granted users/agents may use its queues")
@click.option("--comment")
@site_option
@config_option
def create_queue_table(name: str, payload_type: str, sort_order: str,
                       multiple_consumers: bool, message_grouping: str, secure: bool,
                       comment: str | None, site: str | None, config_path: str) -> None:
    """Create queue table NAME and its exception queue."""
    rt, qt = _site(_cfg(config_path), name, site)
    admin.create_queue_table(rt, qt, payload_type, sort_list=sort_order,
                             multiple_consumers=multiple_consumers,
                             message_grouping=message_grouping, secure=secure, comment=comment)
    click.echo(f"queue table {qt} created (exception queue {exception_queue_name(qt)})")


@aq.command("alter-queue-table")
@click.argument("name")
@click.option("--comment", required=True)
@site_option
@config_option
def alter_queue_table(name: str, comment: str, site: str | None, config_path: str) -> None:
    """Change the comment of queue table NAME."""
    rt, qt = _site(_cfg(config_path), name, site)
    admin.alter_queue_table(rt, qt, comment=comment)
    click.echo(f"queue table {qt} altered")


@aq.command("drop-queue-table")
@click.argument("name")
@click.option("--force", is_flag=True, help="drop its queues and their messages too")
@site_option
@config_option
def drop_queue_table(name: str, force: bool, site: str | None, config_path: str) -> None:
    """Drop queue table NAME (refused while it has queues, unless --force)."""
    rt, qt = _site(_cfg(config_path), name, site)
    dropped = admin.drop_queue_table(rt, qt, force=force)
    click.echo(f"queue table {qt} dropped" + (f" with {', '.join(dropped)}" if dropped else ""))


@aq.command("queue-tables")
@site_option
@config_option
@output_option
def list_queue_tables(site: str | None, config_path: str, output: str, as_json: bool) -> None:
    """Queue tables and their properties."""
    rt, _ = _site(_cfg(config_path), None, site)
    emit(views.queue_tables(rt.store), chosen(output, as_json),
         [Col("queue_table"), Col("payload_type", header="payload"), Col("sort_order"),
          Col("multiple_consumers", "bool", "multi"), Col("message_grouping", header="grouping"),
          Col("secure", "bool"), Col("exception_queue")])


def _queue_numbers(f: Any) -> Any:
    f = click.option("--comment")(f)
    f = click.option("--retention-time", type=click.FloatRange(0), help="seconds consumed "
                     "messages are kept")(f)
    f = click.option("--retry-delay", type=click.FloatRange(0),
                     help="seconds before a rolled-back message is retried")(f)
    return click.option("--max-retries", type=click.IntRange(0),
                        help="rollbacks before the exception queue")(f)


@aq.command("create-queue")
@click.argument("name")
@click.option("--queue-table", required=True)
@_queue_numbers
@click.option("--start", is_flag=True, help="enable enqueue and dequeue at once")
@site_option
@config_option
def create_queue(name: str, queue_table: str, max_retries: int | None,
                 retry_delay: float | None, retention_time: float | None, comment: str | None,
                 start: bool, site: str | None, config_path: str) -> None:
    """Create queue NAME in a queue table (stopped unless --start)."""
    rt, q = _site(_cfg(config_path), name, site)
    admin.create_queue(rt, q, queue_table.partition("@")[0],
                       max_retries=5 if max_retries is None else max_retries,
                       retry_delay=retry_delay or 0.0, retention_time=retention_time or 0.0,
                       comment=comment, start=start)
    click.echo(f"queue {q} created" + (" and started" if start else
                                       f" (stopped: changeflow aq start-queue {q})"))


@aq.command("alter-queue")
@click.argument("name")
@_queue_numbers
@site_option
@config_option
def alter_queue(name: str, max_retries: int | None, retry_delay: float | None,
                retention_time: float | None, comment: str | None, site: str | None,
                config_path: str) -> None:
    """Change max retries, retry delay, retention time or comment of queue NAME."""
    rt, q = _site(_cfg(config_path), name, site)
    admin.alter_queue(rt, q, max_retries=max_retries, retry_delay=retry_delay,
                      retention_time=retention_time, comment=comment)
    click.echo(f"queue {q} altered")


def _switches(f: Any) -> Any:
    f = click.option("--dequeue/--no-dequeue", default=True, show_default=True)(f)
    return click.option("--enqueue/--no-enqueue", default=True, show_default=True)(f)


@aq.command("start-queue")
@click.argument("name")
@_switches
@site_option
@config_option
def start_queue(name: str, enqueue: bool, dequeue: bool, site: str | None,
                config_path: str) -> None:
    """Enable enqueue and/or dequeue on queue NAME."""
    rt, q = _site(_cfg(config_path), name, site)
    admin.start_queue(rt, q, enqueue=enqueue, dequeue=dequeue)
    click.echo(f"queue {q} started")


@aq.command("stop-queue")
@click.argument("name")
@_switches
@site_option
@config_option
def stop_queue(name: str, enqueue: bool, dequeue: bool, site: str | None,
               config_path: str) -> None:
    """Disable enqueue and/or dequeue on queue NAME."""
    rt, q = _site(_cfg(config_path), name, site)
    admin.stop_queue(rt, q, enqueue=enqueue, dequeue=dequeue)
    click.echo(f"queue {q} stopped")


@aq.command("drop-queue")
@click.argument("name")
@click.option("--force", is_flag=True, help="discard the messages it holds")
@site_option
@config_option
def drop_queue(name: str, force: bool, site: str | None, config_path: str) -> None:
    """Drop queue NAME (refused while it holds messages, unless --force)."""
    rt, q = _site(_cfg(config_path), name, site)
    admin.drop_queue(rt, q, force=force)
    click.echo(f"queue {q} dropped (it stays dropped until created again)")


@aq.command("queues")
@click.argument("name", required=False)
@site_option
@config_option
@output_option
def list_queues(name: str | None, site: str | None, config_path: str, output: str,
                as_json: bool) -> None:
    """Queues with their depth per state (READY, WAITING, PROCESSED, EXPIRED, UNDELIVERABLE)."""
    rt, q = _site(_cfg(config_path), name, site)
    rows = views.queues(rt.store, q or None)
    if name and not rows:
        raise click.ClickException(f"unknown queue {name!r}")
    emit(rows, chosen(output, as_json), QUEUE_COLUMNS)


@aq.command("messages")
@click.argument("queue")
@click.option("--state", type=click.Choice(["READY", "WAITING", "PROCESSED", "EXPIRED",
                                            "UNDELIVERABLE"], case_sensitive=False))
@click.option("--consumer")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1))
@site_option
@config_option
@output_option
def list_messages(queue: str, state: str | None, consumer: str | None, limit: int,
                  site: str | None, config_path: str, output: str, as_json: bool) -> None:
    """Messages of QUEUE (one line per recipient), in the queue's order."""
    rt, q = _site(_cfg(config_path), queue, site)
    emit(views.messages(rt.store, q, state=state, consumer=consumer, limit=limit),
         chosen(output, as_json), MESSAGE_COLUMNS)


# -- types ----------------------------------------------------------------------------------
@aq.command("create-type")
@click.argument("name")
@click.option("--field", "fields", multiple=True, required=True, metavar="NAME:TYPE",
              help="a field and its type, e.g. region:VARCHAR2(10) (repeat, in order)")
@click.option("--comment")
@site_option
@config_option
def create_type(name: str, fields: tuple[str, ...], comment: str | None, site: str | None,
                config_path: str) -> None:
    """Declare object type NAME with typed fields (CREATE TYPE ... AS OBJECT)."""
    pairs = []
    for item in fields:
        fname, sep, ftype = item.partition(":")
        if not sep:
            raise click.BadParameter(f"{item!r} must be NAME:TYPE", param_hint="--field")
        pairs.append((fname.strip(), ftype.strip()))
    rt, _ = _site(_cfg(config_path), None, site)
    t = admin.create_type(rt, name, pairs, comment=comment)
    click.echo(f"type {t.name} created ({len(t.fields)} fields)")


@aq.command("drop-type")
@click.argument("name")
@site_option
@config_option
def drop_type(name: str, site: str | None, config_path: str) -> None:
    """Drop object type NAME (refused while in use)."""
    rt, _ = _site(_cfg(config_path), None, site)
    admin.drop_type(rt, name)
    click.echo(f"type {name.upper()} dropped")


@aq.command("types")
@site_option
@config_option
@output_option
def list_types(site: str | None, config_path: str, output: str, as_json: bool) -> None:
    """Declared object types (RAW, SYS.ANYDATA, JMS and row LCR types are built in)."""
    rt, _ = _site(_cfg(config_path), None, site)
    emit(views.types(rt.store), chosen(output, as_json),
         [Col("type"), Col("kind"), Col("fields", width=80)])


# -- enqueue and dequeue -------------------------------------------------------------------
def _read_payloads(payload: str | None, file: str | None, array: bool) -> list[Any]:
    if (payload is None) == (file is None):
        raise click.UsageError("give the payload as --payload JSON or --file PATH")
    text = payload if payload is not None else Path(str(file)).read_text(encoding="utf-8")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="payload") from None
    if array and not isinstance(value, list):
        raise click.BadParameter("--array needs a JSON list", param_hint="payload")
    return value if array else [value]


def _session(cfg: PipelineConfig, rt: Any, user: str | None) -> Any:
    from changeflow.messaging import connect

    return connect(cfg, user=user or os.environ.get("CHANGEFLOW_USER"), site=rt.name)


@aq.command("enqueue")
@click.argument("queue")
@click.option("--payload", help="the payload as JSON (RAW: hex text)")
@click.option("--file", type=click.Path(exists=True, dir_okay=False),
              help="a JSON file holding the payload")
@click.option("--array", is_flag=True, help="the JSON is a list: one message per item")
@click.option("--type", "type_name", help="the payload's type (ANYDATA queues)")
@click.option("--priority", type=int)
@click.option("--delay", type=float, help="seconds before it can be dequeued")
@click.option("--expiration", type=float, help="seconds it stays available after the delay")
@click.option("--correlation")
@click.option("--recipient", "recipients", multiple=True,
              help="NAME, NAME@owner.queue@site or owner.queue@site (repeat)")
@click.option("--exception-queue")
@click.option("--sender")
@click.option("--msg-id", help="a stable id: enqueuing it again is recognised as a replay")
@click.option("--user", help="the user to act as [env CHANGEFLOW_USER]")
@site_option
@config_option
@output_option
def enqueue(queue: str, payload: str | None, file: str | None, array: bool,
            type_name: str | None, priority: int | None, delay: float | None,
            expiration: float | None, correlation: str | None, recipients: tuple[str, ...],
            exception_queue: str | None, sender: str | None, msg_id: str | None,
            user: str | None, site: str | None, config_path: str, output: str,
            as_json: bool) -> None:
    """Enqueue a message (or an array) into QUEUE and commit."""
    from changeflow.messaging import dictionary as D
    from changeflow.messaging import jsonio
    from changeflow.messaging.model import MessageProperties

    cfg = _cfg(config_path)
    rt, q = _site(cfg, queue, site)
    values = _read_payloads(payload, file, array)
    if msg_id and len(values) > 1:
        raise click.UsageError("--msg-id names one message; leave it out with --array")
    props = MessageProperties.of(None, priority=priority, delay=delay, expiration=expiration,
                                 correlation=correlation, recipients=list(recipients) or None,
                                 exception_queue=exception_queue, sender=sender, msg_id=msg_id)
    with rt.store.read() as conn:
        qtype = D.queue(conn, q).payload_type
        mtype = D.message_type(conn, rt.store.url, type_name or qtype)
    payloads = [jsonio.from_json(mtype, v) for v in values]
    with _session(cfg, rt, user) as s:
        ids = s.enqueue_array(q, payloads, props, type_name=type_name, commit=True)
    emit([{"msg_id": i, "queue": q} for i in ids], chosen(output, as_json),
         [Col("msg_id"), Col("queue")])


@aq.command("dequeue")
@click.argument("queue")
@click.option("--consumer", help="the consumer (multi-consumer queues)")
@click.option("--mode", type=click.Choice(["BROWSE", "LOCKED", "REMOVE", "REMOVE_NODATA"],
                                          case_sensitive=False), default="REMOVE",
              show_default=True)
@click.option("--navigation", type=click.Choice(["FIRST_MESSAGE", "NEXT_MESSAGE",
                                                "NEXT_TRANSACTION"], case_sensitive=False),
              default="FIRST_MESSAGE", show_default=True)
@click.option("--wait", default="NO_WAIT", show_default=True,
              help="FOREVER, NO_WAIT or seconds")
@click.option("--correlation", help="select by correlation (%% and _ wildcards)")
@click.option("--msg-id", help="select one message by id")
@click.option("--condition", help="e.g. \"priority < 3 AND tab.user_data.region = 'WEST'\"")
@click.option("--max", "max_messages", default=1, show_default=True, type=click.IntRange(1))
@click.option("--user", help="the user to act as [env CHANGEFLOW_USER]")
@site_option
@config_option
@output_option
def dequeue(queue: str, consumer: str | None, mode: str, navigation: str, wait: str,
            correlation: str | None, msg_id: str | None, condition: str | None,
            max_messages: int, user: str | None, site: str | None, config_path: str,
            output: str, as_json: bool) -> None:
    """Dequeue (or browse) up to --max messages from QUEUE, and commit."""
    from changeflow.messaging import jsonio

    cfg = _cfg(config_path)
    rt, q = _site(cfg, queue, site)
    with _session(cfg, rt, user) as s:
        msgs = s.dequeue_array(q, max_messages, consumer=consumer, mode=mode,
                               navigation=navigation, wait=wait, correlation=correlation,
                               msg_id=msg_id, condition=condition)
        s.commit()
    rows = [{**m.as_dict(), "payload": jsonio.to_json(m.payload)} for m in msgs]
    fmt = chosen(output, as_json)
    if fmt == "table":
        for r in rows:
            r["payload"] = json.dumps(r["payload"])
    emit(rows, fmt, [Col("msg_id"), Col("consumer"), Col("priority", "count"),
                     Col("correlation"), Col("attempts", "count"), Col("payload", width=70)],
         empty="(no message)")


# -- subscribers ---------------------------------------------------------------------------
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
    rt, q = _site(_cfg(config_path), queue, site)
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
    rt, q = _site(_cfg(config_path), queue, site)
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
    rt, q = _site(_cfg(config_path), queue, site)
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
    rt, q = _site(_cfg(config_path), None if queue == "*" else queue, site)
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
    rt, q = _site(_cfg(config_path), None if queue == "*" else queue, site)
    n = admin.revoke_queue_privilege(rt, privilege, q or "*", grantee)
    click.echo(f"{n} privileges revoked")


@aq.command("enable-db-access")
@click.argument("agent")
@click.argument("user")
@site_option
@config_option
def enable_db_access(agent: str, user: str, site: str | None, config_path: str) -> None:
    """Let USER act as AGENT on secure queues."""
    rt, _ = _site(_cfg(config_path), None, site)
    admin.enable_db_access(rt, agent, user)
    click.echo(f"{user.upper()} may act as agent {agent.upper()}")


@aq.command("disable-db-access")
@click.argument("agent")
@click.argument("user")
@site_option
@config_option
def disable_db_access(agent: str, user: str, site: str | None, config_path: str) -> None:
    """Stop USER acting as AGENT."""
    rt, _ = _site(_cfg(config_path), None, site)
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
    rt, q = _site(_cfg(config_path), queue, site)
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
    rt, q = _site(_cfg(config_path), queue, site)
    emit(views.exception_messages(rt.store, q, limit=limit), chosen(output, as_json),
         MESSAGE_COLUMNS)


def _exception_ids(msg_ids: tuple[str, ...], all_: bool) -> list[str] | None:
    if bool(msg_ids) == all_:
        raise click.UsageError("name the messages (MSG_ID ...) or give --all")
    return None if all_ else list(msg_ids)


@exceptions.command("requeue")
@click.argument("queue")
@click.argument("msg_ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="every message of the exception queue")
@site_option
@config_option
def requeue(queue: str, msg_ids: tuple[str, ...], all_: bool, site: str | None,
            config_path: str) -> None:
    """Put messages of exception queue QUEUE back into their original queue, READY."""
    rt, q = _site(_cfg(config_path), queue, site)
    n = admin.requeue(rt, q, _exception_ids(msg_ids, all_))
    click.echo(f"{n} messages re-enqueued")


@exceptions.command("delete")
@click.argument("queue")
@click.argument("msg_ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="every message of the exception queue")
@site_option
@config_option
def delete_exceptions(queue: str, msg_ids: tuple[str, ...], all_: bool, site: str | None,
                      config_path: str) -> None:
    """Delete messages from exception queue QUEUE."""
    rt, q = _site(_cfg(config_path), queue, site)
    n = admin.delete_exceptions(rt, q, _exception_ids(msg_ids, all_))
    click.echo(f"{n} messages deleted")


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

    cfg = _cfg(config_path)
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
