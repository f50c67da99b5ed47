"""``changeflow quality``: the latest data-quality result per stage, and GX Data Docs."""

from __future__ import annotations

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, emit_json, json_option, load
from changeflow.errors import ChangeflowError


@main.group("quality")
def quality() -> None:
    """Data-quality checks: latest results per stage, Great Expectations Data Docs."""


def _latest(config_path: str) -> list[dict]:
    from changeflow.quality import results
    from changeflow.sites import site

    cfg = load(config_path)
    out = []
    try:
        for name in sorted(cfg.sites):
            for r in results.latest(site(cfg, name).store):
                out.append({"site": name, **r.to_dict()})
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    return out


@quality.command("latest")
@config_option
@json_option
def latest(config_path: str, as_json: bool) -> None:
    """One line per stage: its latest validation, status, failed checks, quarantine."""
    rows = _latest(config_path)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no validation results yet")
        return
    click.echo(f"{'stage':<32}{'site':<10}{'status':<8}{'rows':>10}  {'when':<20} failed checks")
    for r in rows:
        failed = [f"{c['check']}{'' if c['blocking'] else ' (warn)'}"
                  for c in r["checks"] if not c["success"]]
        when = str(r["created_at"])[:19]
        click.echo(f"{r['stage']:<32}{r['site']:<10}{r['status']:<8}{r['n_rows'] or 0:>10}  "
                   f"{when:<20} {', '.join(failed) or '-'}")
        if r["quarantine_path"]:
            click.echo(f"{'':<32}quarantined at {r['quarantine_path']}")


@quality.command("docs")
@config_option
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="directory to build into [default: quality.data_docs_dir or work/data-docs]")
def docs(config_path: str, out_dir: str | None) -> None:
    """Build Great Expectations Data Docs from every persisted validation."""
    from changeflow.quality.docs import build

    cfg = load(config_path)
    try:
        index = build(cfg, out_dir)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"Data Docs: {index}")
