"""``changeflow queues``: inspect queues (depth, oldest message, consumers and positions)."""

from __future__ import annotations

import dataclasses

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, emit_json, json_option, load
from changeflow.errors import ChangeflowError
from changeflow.sites import open_pipeline, site


@main.group("queues")
def queues() -> None:
    """Inspect queues: depth, oldest message, consumers with their positions."""


def _infos(config_path: str, name: str | None) -> list[dict]:
    cfg = load(config_path)
    try:
        open_pipeline(cfg)
        out = []
        for q in cfg.queues:
            if name and name.lower() not in (q.name, f"{q.name}@{q.site}"):
                continue
            info = site(cfg, q.site).catalog.info(q.name)
            out.append({"site": q.site, **dataclasses.asdict(info)})
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    if name and not out:
        raise click.ClickException(f"unknown queue {name!r}")
    return out


@queues.command("list")
@config_option
@json_option
def list_queues(config_path: str, as_json: bool) -> None:
    """One line per queue: site, name, depth, batches, bytes, oldest message."""
    infos = _infos(config_path, None)
    if as_json:
        emit_json(infos)
        return
    click.echo(f"{'queue':<34}{'depth':>8}{'batches':>9}{'bytes':>12}  oldest message")
    for i in infos:
        oldest = i["oldest_time"].isoformat(timespec="seconds") if i["oldest_time"] else "-"
        click.echo(f"{i['name'] + '@' + i['site']:<34}{i['depth']:>8}{i['batches']:>9}"
                   f"{i['bytes']:>12}  {oldest}")


@queues.command("show")
@click.argument("name")
@config_option
@json_option
def show_queue(name: str, config_path: str, as_json: bool) -> None:
    """A queue's properties and its consumers with their positions."""
    infos = _infos(config_path, name)
    if as_json:
        emit_json(infos)
        return
    for i in infos:
        click.echo(f"queue {i['name']}@{i['site']}  (queue table {i['queue_table']}, "
                   f"sort order {i['sort_order']})")
        click.echo(f"  depth {i['depth']} messages in {i['batches']} batches, {i['bytes']} bytes; "
                   f"oldest {i['oldest_time'] or '-'}")
        click.echo(f"  {'consumer':<30}{'kind':<13}{'position':>9}{'pending':>9}")
        for c in i["consumers"]:
            click.echo(f"  {c['consumer']:<30}{c['kind']:<13}{c['position']:>9}"
                       f"{c['pending_messages']:>9}")
