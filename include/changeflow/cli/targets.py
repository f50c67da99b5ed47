"""``changeflow targets``: an apply's Iceberg target tables.

``list`` and ``snapshots`` read the catalog with PyIceberg (no Spark); ``maintain`` runs
Iceberg's compaction and snapshot expiry now; ``forget`` lets the apply create a table
again that was dropped outside changeflow; ``upgrade`` converts tables of the earlier
private format into Iceberg tables, keeping the apply's positions.
"""

from __future__ import annotations

from typing import Any

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, load, one_apply, spark_session
from changeflow.cli.output import Col, chosen, emit, output_option

TABLE_COLUMNS = [Col("apply"), Col("table"), Col("rows", "count"), Col("snapshots", "count"),
                 Col("data_files", "count", "data files"),
                 Col("delete_files", "count", "delete files"),
                 Col("deleted_rows", "count", "deleted rows"),
                 Col("hottest_file", header="most deleted in a file"),
                 Col("maintenance", width=48),
                 Col("last_positions", header="applied up to", width=40),
                 Col("last_commit", "time", "last commit")]
SNAPSHOT_COLUMNS = [Col("table"), Col("snapshot"), Col("committed_at", "time", "committed"),
                    Col("operation"), Col("batches"),
                    Col("positions", header="applied up to", width=40),
                    Col("rows", "count"), Col("pass_id", header="pass")]


@main.group("targets")
def targets_group() -> None:
    """An apply's target tables (Apache Iceberg, catalogued in the site's state store)."""


def _targets(cfg: Any, apply_name: str | None) -> Any:
    from changeflow.apply.engine import targets_of

    spec = cfg.component("apply", one_apply(cfg, apply_name))
    if spec.target is not None:
        raise click.UsageError(f"apply {spec.name} applies to PostgreSQL, not to Iceberg "
                               "tables")
    return targets_of(cfg, spec)


@targets_group.command("list")
@config_option
@click.option("--apply", "apply_name", default=None, help="only this apply's tables")
@output_option
def targets_list(config_path: str, apply_name: str | None, output: str,
                 as_json: bool) -> None:
    """Each table: rows, snapshots, files, and the commit positions applied."""
    from changeflow.views.targets import targets

    emit(targets(load(config_path), apply_name), chosen(output, as_json), TABLE_COLUMNS,
         empty="no target tables yet")


@targets_group.command("snapshots")
@config_option
@click.option("--apply", "apply_name", default=None)
@click.option("--table", default=None, help="only this table (owner.table)")
@output_option
def targets_snapshots(config_path: str, apply_name: str | None, table: str | None,
                      output: str, as_json: bool) -> None:
    """Every snapshot on main: the pass, batches and positions that wrote it (read an
    earlier state with ``SELECT ... VERSION AS OF <snapshot>``)."""
    from changeflow.views.targets import snapshots

    rows = [r for r in snapshots(load(config_path), apply_name)
            if table is None or r["table"] == table.lower()]
    emit(rows, chosen(output, as_json), SNAPSHOT_COLUMNS, empty="no snapshots")


@targets_group.command("maintain")
@config_option
@click.option("--apply", "apply_name", default=None)
@click.option("--table", default=None, help="only this table (default: every table)")
@output_option
def targets_maintain(config_path: str, apply_name: str | None, table: str | None,
                     output: str, as_json: bool) -> None:
    """Rewrite data files with deletes and expire old snapshots, as the policy says."""
    from changeflow.targets.maintenance import maintain

    cfg = load(config_path)
    targets = _targets(cfg, apply_name)
    spec = cfg.component("apply", one_apply(cfg, apply_name))
    spark = spark_session("changeflow-targets")
    names = [table.lower()] if table else targets.names(spark)
    rows = [{"table": n, "done": ", ".join(maintain(spark, targets, n, spec.iceberg.maintenance,
                                                    defer=False)) or "nothing due"}
            for n in names]
    emit(rows, chosen(output, as_json), [Col("table"), Col("done")])


@targets_group.command("forget")
@config_option
@click.option("--apply", "apply_name", default=None)
@click.argument("table")
def targets_forget(config_path: str, apply_name: str | None, table: str) -> None:
    """Let the apply create TABLE again after it was dropped outside changeflow."""
    targets = _targets(load(config_path), apply_name)
    if not targets.forget(table.lower()):
        raise click.ClickException(f"the apply never published to {table.lower()}: nothing "
                                   "to forget")
    click.echo(f"{table.lower()}: forgotten; the apply creates it from its next changes")


@targets_group.command("upgrade")
@config_option
@click.option("--apply", "apply_name", default=None)
@click.option("--table", "tables", multiple=True, help="only these tables (default: all)")
@output_option
def targets_upgrade(config_path: str, apply_name: str | None, tables: tuple[str, ...],
                    output: str, as_json: bool) -> None:
    """Convert the site's targets of the earlier private format into Iceberg tables
    (same rows, same apply positions); the old files stay for you to delete."""
    from changeflow.targets.upgrade import upgrade

    targets = _targets(load(config_path), apply_name)
    done = upgrade(spark_session("changeflow-upgrade"), targets,
                   [t.lower() for t in tables] or None)
    rows = [{"table": u.table, "rows": u.rows, "snapshot": str(u.snapshot),
             "old_files": u.legacy_root, "state": "already converted" if u.already
             else "converted"} for u in done]
    emit(rows, chosen(output, as_json), [Col("table"), Col("rows", "count"), Col("snapshot"),
                                         Col("state"), Col("old_files", width=60)],
         empty="no tables of the old format")
