"""``changeflow quality``: the latest data-quality result per stage, and GX Data Docs."""

from __future__ import annotations

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, load
from changeflow.cli.output import Col, chosen, emit, output_option
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


LATEST_COLUMNS = [
    Col("stage"), Col("site"), Col("status"), Col("n_rows", "count", "rows"),
    Col("created_at", "time", "when"), Col("failed_checks", header="failed checks", width=60),
    Col("quarantine_path", header="quarantined at"),
]


@quality.command("latest")
@config_option
@output_option
def latest(config_path: str, output: str, as_json: bool) -> None:
    """One line per stage: its latest validation, status, failed checks, quarantine."""
    rows = _latest(config_path)
    for r in rows:
        r["failed_checks"] = ", ".join(
            f"{c['check']}{'' if c['blocking'] else ' (warn)'}"
            for c in r["checks"] if not c["success"])
    fmt = chosen(output, as_json)
    if fmt == "table" and not any(r["quarantine_path"] for r in rows):
        columns = LATEST_COLUMNS[:-1]
    else:
        columns = LATEST_COLUMNS
    emit(rows, fmt, columns, empty="no validation results yet")


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
