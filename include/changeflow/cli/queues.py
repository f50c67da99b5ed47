"""``changeflow queues``: inspect queues, set bad batches aside, clean up orphaned writes."""

from __future__ import annotations

import dataclasses

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, load
from changeflow.cli.output import Col, chosen, emit, output_option
from changeflow.config import PipelineConfig
from changeflow.errors import ChangeflowError
from changeflow.queues.catalog import QueueCatalog
from changeflow.sites import open_pipeline, site

LIST_COLUMNS = [Col("queue"), Col("depth", "count"), Col("batches", "count"),
                Col("bytes", "bytes"), Col("oldest_time", "time", "oldest message")]
CONSUMER_COLUMNS = [Col("consumer"), Col("kind"), Col("position", "count"),
                    Col("pending_batches", "count", "pending batches"),
                    Col("pending_messages", "count", "pending messages")]
QUARANTINE_COLUMNS = [Col("queue"), Col("seq", "count"), Col("n_messages", "count", "messages"),
                      Col("origin"), Col("quarantined_at", "time", "set aside"),
                      Col("reason", width=70)]


@main.group("queues")
def queues() -> None:
    """Inspect queues; set bad batches aside and release them; remove orphaned writes."""


def _catalog(cfg: PipelineConfig, ref: str) -> tuple[QueueCatalog, str, str]:
    """The catalog holding a queue reference (``owner.name`` or ``owner.name@site``)."""
    try:
        q = cfg.queue(ref)
    except ChangeflowError as exc:
        raise click.ClickException(f"unknown queue {ref!r} in {cfg.source_path}") from exc
    return site(cfg, q.site).catalog, q.name, f"{q.name}@{q.site}"


def _infos(cfg: PipelineConfig, name: str | None) -> list[dict]:
    try:
        open_pipeline(cfg)
        out = []
        for q in cfg.queues:
            if name and name.lower() not in (q.name, f"{q.name}@{q.site}"):
                continue
            catalog = site(cfg, q.site).catalog
            if not catalog.exists(q.name):
                out.append({"queue": f"{q.name}@{q.site}", "site": q.site, "name": q.name,
                            "status": "dropped", "consumers": []})
                continue
            info = dataclasses.asdict(catalog.info(q.name))
            out.append({"queue": f"{q.name}@{q.site}", "site": q.site, "status": "active",
                        **info})
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    if name and not out:
        raise click.ClickException(f"unknown queue {name!r}")
    return out


@queues.command("list")
@config_option
@output_option
def list_queues(config_path: str, output: str, as_json: bool) -> None:
    """One line per queue: depth, batches, bytes, oldest message."""
    emit(_infos(load(config_path), None), chosen(output, as_json), LIST_COLUMNS)


@queues.command("show")
@click.argument("name")
@config_option
@output_option
def show_queue(name: str, config_path: str, output: str, as_json: bool) -> None:
    """A queue's properties and its consumers with their positions."""
    infos = _infos(load(config_path), name)
    fmt = chosen(output, as_json)
    if fmt != "table":
        emit(infos, fmt)
        return
    for i in infos:
        if i["status"] == "dropped":
            click.echo(f"queue {i['queue']}: dropped")
            continue
        click.echo(f"queue {i['queue']}  (queue table {i['queue_table']}, "
                   f"sort order {i['sort_order']})")
        emit([i], fmt, LIST_COLUMNS[1:])
        click.echo("")
        emit(i["consumers"], fmt, CONSUMER_COLUMNS, empty="(no consumers)")


@queues.command("quarantine")
@click.argument("queue")
@click.argument("seq", type=int)
@click.option("--reason", required=True, help="why the batch is set aside (kept with it)")
@config_option
def quarantine_batch(queue: str, seq: int, reason: str, config_path: str) -> None:
    """Set batch SEQ of QUEUE aside so the batches behind it flow again."""
    from changeflow.queues.quarantine import quarantine

    catalog, qname, label = _catalog(load(config_path), queue)
    try:
        rec = quarantine(catalog, qname, seq, reason)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"batch {seq} of {label} set aside ({rec.n_messages} messages); "
               f"waiting consumers: {', '.join(rec.waiting_consumers) or 'none'}")


@queues.command("quarantined")
@click.argument("queue", required=False)
@click.option("--all", "include_released", is_flag=True, help="include released batches")
@config_option
@output_option
def list_quarantined(queue: str | None, include_released: bool, config_path: str, output: str,
                     as_json: bool) -> None:
    """Batches set aside (by an operator or a data-quality check), in one queue or all."""
    from changeflow.queues.quarantine import quarantined

    cfg = load(config_path)
    refs = [queue] if queue else [f"{q.name}@{q.site}" for q in cfg.queues]
    rows = []
    for ref in refs:
        catalog, qname, label = _catalog(cfg, ref)
        for rec in quarantined(catalog, qname, include_released=include_released):
            rows.append({**dataclasses.asdict(rec), "queue": label})
    emit(rows, chosen(output, as_json), QUARANTINE_COLUMNS)


@queues.command("release")
@click.argument("queue")
@click.argument("seq", type=int)
@config_option
def release_batch(queue: str, seq: int, config_path: str) -> None:
    """Put quarantined batch SEQ back for the consumers that had not read it."""
    from changeflow.queues.quarantine import release

    catalog, qname, label = _catalog(load(config_path), queue)
    try:
        new = release(catalog, qname, seq)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"batch {seq} of {label} released as batch {new}")


@queues.command("orphans")
@click.argument("queue", required=False)
@click.option("--min-age", default=3600.0, show_default=True, type=click.FloatRange(0),
              help="only directories untouched for this many seconds")
@click.option("--remove", is_flag=True, help="delete them (default: only list)")
@config_option
@output_option
def orphans_cmd(queue: str | None, min_age: float, remove: bool, config_path: str,
                output: str, as_json: bool) -> None:
    """Batch directories no catalog row references (writers killed before committing)."""
    from changeflow.queues import orphans

    cfg = load(config_path)
    refs = [queue] if queue else [f"{q.name}@{q.site}" for q in cfg.queues]
    found = []
    for ref in refs:
        catalog, qname, _ = _catalog(cfg, ref)
        if catalog.exists(qname):
            found += orphans.find(catalog, qname, min_age=min_age)
    rows = [dataclasses.asdict(o) for o in found]
    if remove:
        n = orphans.remove(found)
        click.echo(f"removed {n} orphaned batch directories")
        return
    emit(rows, chosen(output, as_json), [Col("queue"), Col("path"),
                                         Col("age_seconds", "duration", "age"),
                                         Col("n_bytes", "bytes", "size")])


@queues.command("relocate")
@click.argument("queue")
@config_option
def relocate(queue: str, config_path: str) -> None:
    """Point QUEUE at its place under the site's (changed) staging root, after a move."""
    catalog, qname, label = _catalog(load(config_path), queue)
    try:
        new = catalog.relocate(qname)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{label} now lives at {new}")
