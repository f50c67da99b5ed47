"""``changeflow aq``: the group, queues and messages (DBMS_AQADM and DBMS_AQ).

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


def site_and_queue(cfg: PipelineConfig, ref: str | None, site: str | None) -> tuple[Any, str]:
    """The site runtime and bare queue name of ``owner.name[@site]``."""
    name, _, at = (ref or "").partition("@")
    _, rt = site_of(cfg, at or site)
    return rt, name.lower()


def open_cfg(config_path: str) -> PipelineConfig:
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
    rt, qt = site_and_queue(open_cfg(config_path), name, site)
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
    rt, qt = site_and_queue(open_cfg(config_path), name, site)
    admin.alter_queue_table(rt, qt, comment=comment)
    click.echo(f"queue table {qt} altered")


@aq.command("drop-queue-table")
@click.argument("name")
@click.option("--force", is_flag=True, help="drop its queues and their messages too")
@site_option
@config_option
def drop_queue_table(name: str, force: bool, site: str | None, config_path: str) -> None:
    """Drop queue table NAME (refused while it has queues, unless --force)."""
    rt, qt = site_and_queue(open_cfg(config_path), name, site)
    dropped = admin.drop_queue_table(rt, qt, force=force)
    click.echo(f"queue table {qt} dropped" + (f" with {', '.join(dropped)}" if dropped else ""))


@aq.command("queue-tables")
@site_option
@config_option
@output_option
def list_queue_tables(site: str | None, config_path: str, output: str, as_json: bool) -> None:
    """Queue tables and their properties."""
    rt, _ = site_and_queue(open_cfg(config_path), None, site)
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
@click.option("--queue-type", type=click.Choice(["normal", "exception"]), default="normal",
              show_default=True, help="exception: a user exception queue (EXCEPTION_QUEUE)")
@site_option
@config_option
def create_queue(name: str, queue_table: str, max_retries: int | None,
                 retry_delay: float | None, retention_time: float | None, comment: str | None,
                 start: bool, queue_type: str, site: str | None, config_path: str) -> None:
    """Create queue NAME in a queue table (stopped unless --start)."""
    rt, q = site_and_queue(open_cfg(config_path), name, site)
    admin.create_queue(rt, q, queue_table.partition("@")[0],
                       max_retries=5 if max_retries is None else max_retries,
                       retry_delay=retry_delay or 0.0, retention_time=retention_time or 0.0,
                       comment=comment, start=start, queue_type=queue_type)
    what = "exception queue" if queue_type == "exception" else "queue"
    click.echo(f"{what} {q} created" + (" and started" if start else
                                        f" (stopped: changeflow aq start-queue {q})"))


@aq.command("set-up-queue")
@click.argument("name", default="strmadmin.streams_queue")
@click.option("--queue-table", help="default: NAME_table")
@click.option("--queue-user", "queue_users", multiple=True,
              help="a user to configure as a secure-queue user (repeatable)")
@click.option("--comment")
@site_option
@config_option
@output_option
def set_up_queue(name: str, queue_table: str | None, queue_users: tuple[str, ...],
                 comment: str | None, site: str | None, config_path: str, output: str,
                 as_json: bool) -> None:
    """DBMS_STREAMS_ADM.SET_UP_QUEUE: a secure, transactional, commit-time queue NAME."""
    rt, q = site_and_queue(open_cfg(config_path), name, site)
    qt = queue_table.partition("@")[0] if queue_table else None
    done = admin.set_up_queue(rt, q, qt, queue_users=queue_users, comment=comment)
    fmt = chosen(output, as_json)
    if fmt != "table":
        emit(done, fmt, [])
        return
    click.echo(f"queue {done['queue']} " + ("created" if done["queue_created"] else "exists")
               + f" in queue table {done['queue_table']} (secure, transactional, "
               "commit-time)" + (f"; secure-queue users: {', '.join(done['queue_users'])}"
                                 if done["queue_users"] else ""))


@aq.command("alter-queue")
@click.argument("name")
@_queue_numbers
@site_option
@config_option
def alter_queue(name: str, max_retries: int | None, retry_delay: float | None,
                retention_time: float | None, comment: str | None, site: str | None,
                config_path: str) -> None:
    """Change max retries, retry delay, retention time or comment of queue NAME."""
    rt, q = site_and_queue(open_cfg(config_path), name, site)
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
    rt, q = site_and_queue(open_cfg(config_path), name, site)
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
    rt, q = site_and_queue(open_cfg(config_path), name, site)
    admin.stop_queue(rt, q, enqueue=enqueue, dequeue=dequeue)
    click.echo(f"queue {q} stopped")


@aq.command("drop-queue")
@click.argument("name")
@click.option("--force", is_flag=True, help="discard the messages it holds")
@site_option
@config_option
def drop_queue(name: str, force: bool, site: str | None, config_path: str) -> None:
    """Drop queue NAME (refused while it holds messages, unless --force)."""
    rt, q = site_and_queue(open_cfg(config_path), name, site)
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
    rt, q = site_and_queue(open_cfg(config_path), name, site)
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
    rt, q = site_and_queue(open_cfg(config_path), queue, site)
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
    rt, _ = site_and_queue(open_cfg(config_path), None, site)
    t = admin.create_type(rt, name, pairs, comment=comment)
    click.echo(f"type {t.name} created ({len(t.fields)} fields)")


@aq.command("drop-type")
@click.argument("name")
@site_option
@config_option
def drop_type(name: str, site: str | None, config_path: str) -> None:
    """Drop object type NAME (refused while in use)."""
    rt, _ = site_and_queue(open_cfg(config_path), None, site)
    admin.drop_type(rt, name)
    click.echo(f"type {name.upper()} dropped")


@aq.command("types")
@site_option
@config_option
@output_option
def list_types(site: str | None, config_path: str, output: str, as_json: bool) -> None:
    """Declared object types (RAW, SYS.ANYDATA, JMS and row LCR types are built in)."""
    rt, _ = site_and_queue(open_cfg(config_path), None, site)
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

    cfg = open_cfg(config_path)
    rt, q = site_and_queue(cfg, queue, site)
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

    cfg = open_cfg(config_path)
    rt, q = site_and_queue(cfg, queue, site)
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
