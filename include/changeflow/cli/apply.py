"""``changeflow apply``: the error queue, conflict handlers, handlers and progress.

Like ``DBMS_APPLY_ADM``: ``errors list/show/execute/delete`` (EXECUTE_ERROR,
DELETE_ERROR and their ALL forms), ``conflict-handlers set/list/remove``
(SET_UPDATE_CONFLICT_HANDLER) and ``handlers list``; ``progress`` shows each apply's
position, backlog and last run.
"""

from __future__ import annotations

from typing import Any

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, load, one_apply
from changeflow.cli.output import Col, chosen, emit, output_option
from changeflow.errors import ChangeflowError

ERROR_COLUMNS = [Col("id", "count"), Col("apply"), Col("source_database", header="source"),
                 Col("transaction_id", header="transaction"),
                 Col("commit_scn", "count", "commit position"),
                 Col("n_messages", "count", "lcrs"), Col("error_kind", header="kind"),
                 Col("attempts", "count"), Col("updated_at", "time", "last error"),
                 Col("error_message", width=70, header="error")]
LCR_COLUMNS = [Col("position", "count"), Col("kind"), Col("command_type", header="command"),
               Col("object"), Col("failing", "bool"), Col("values", width=90)]
PROGRESS_COLUMNS = [Col("apply"), Col("target"), Col("queue"), Col("position", "count"),
                    Col("pending_messages", "count", "pending"),
                    Col("errors_in_queue", "count", "errors"),
                    Col("last_run_at", "time", "last run"),
                    Col("last_run_transactions", "count", "txns"),
                    Col("last_run_seconds", "duration", "took")]
HANDLER_COLUMNS = [Col("table"), Col("conflict"), Col("columns"), Col("method"),
                   Col("resolution_column", header="resolution column"), Col("source")]


@main.group("apply")
def apply_group() -> None:
    """Apply processes: the error queue, conflict handlers, handlers, progress."""


@apply_group.group("errors")
def errors() -> None:
    """The apply error queue: failed transactions, kept whole."""


def _run(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc


@errors.command("list")
@config_option
@click.option("--apply", "apply_name", default=None, help="only this apply")
@output_option
def errors_list(config_path: str, apply_name: str | None, output: str,
                as_json: bool) -> None:
    """Failed transactions, oldest source commit first."""
    from changeflow.apply.views import list_errors

    rows = _run(list_errors, load(config_path), apply_name)
    emit(rows, chosen(output, as_json), ERROR_COLUMNS, empty="the error queue is empty")


@errors.command("show")
@config_option
@click.option("--apply", "apply_name", default=None, help="default: the pipeline's only apply")
@click.argument("error_id", type=int)
@output_option
def errors_show(config_path: str, apply_name: str | None, error_id: int, output: str,
                as_json: bool) -> None:
    """Every LCR of one failed transaction (the failing one marked)."""
    from changeflow.apply.views import error_lcrs

    cfg = load(config_path)
    data = _run(error_lcrs, cfg, one_apply(cfg, apply_name), error_id)
    fmt = chosen(output, as_json)
    if fmt != "table":
        emit(data, fmt)
        return
    e = data["entry"]
    click.echo(f"error {e['id']} of apply {e['apply']}: transaction {e['transaction_id']} of "
               f"{e['source_database']} at commit position {e['commit_scn']}, "
               f"{e['attempts']} attempt(s)\n{e['error_kind']}: {e['error_message']}\n")
    rows = []
    for r in data["lcrs"]:
        shown = r["new_values"] or r["old_values"] or r["payload"] or r["ddl_text"]
        rows.append({**r, "values": str(shown)})
    emit(rows, "table", LCR_COLUMNS)


@errors.command("execute")
@config_option
@click.option("--apply", "apply_name", default=None, help="default: the pipeline's only apply")
@click.argument("error_id", type=int, required=False)
@click.option("--all", "all_", is_flag=True, help="re-execute every entry, in commit order")
@click.option("--fix", default=None, metavar="MODULE:FUNCTION",
              help="a function that corrects each transaction's LCRs first")
@output_option
def errors_execute(config_path: str, apply_name: str | None, error_id: int | None, all_: bool,
                   fix: str | None, output: str, as_json: bool) -> None:
    """Re-execute one failed transaction (or --all); a failure stays with its new error."""
    from changeflow.apply.views import execute_error

    if (error_id is None) == (not all_):
        raise click.UsageError("give an error id or --all")
    cfg = load(config_path)
    apply_name = one_apply(cfg, apply_name)
    spark = None
    if cfg.component("apply", apply_name).target is None:
        from changeflow.cli.common import spark_session

        spark = spark_session(f"changeflow-apply-errors-{apply_name}")
    res = _run(execute_error, cfg, apply_name, error_id, fix=fix, spark=spark)
    rows = [{"id": i, "outcome": "applied", "error": None} for i in res.applied]
    rows += [{"id": i, "outcome": "failed again", "error": m} for i, m in res.failed.items()]
    emit(rows, chosen(output, as_json), [Col("id", "count"), Col("outcome"),
                                         Col("error", width=90)], empty="nothing to re-execute")
    if res.failed:
        raise SystemExit(1)


@errors.command("delete")
@config_option
@click.option("--apply", "apply_name", default=None, help="default: the pipeline's only apply")
@click.argument("error_id", type=int, required=False)
@click.option("--all", "all_", is_flag=True, help="delete every entry of the apply")
def errors_delete(config_path: str, apply_name: str | None, error_id: int | None,
                  all_: bool) -> None:
    """Delete one failed transaction (or --all); it is never applied."""
    from changeflow.apply.views import delete_error

    if (error_id is None) == (not all_):
        raise click.UsageError("give an error id or --all")
    cfg = load(config_path)
    apply_name = one_apply(cfg, apply_name)
    n = _run(delete_error, cfg, apply_name, error_id)
    click.echo(f"deleted {n} error(s) of apply {apply_name}")


@apply_group.group("conflict-handlers")
def conflict_handlers() -> None:
    """Prebuilt conflict handlers (OVERWRITE, DISCARD, MAXIMUM, MINIMUM)."""


@conflict_handlers.command("set")
@config_option
@click.option("--apply", "apply_name", required=True)
@click.option("--table", required=True, help="owner.table")
@click.option("--method", required=True,
              type=click.Choice(["OVERWRITE", "DISCARD", "MAXIMUM", "MINIMUM"],
                                case_sensitive=False))
@click.option("--conflict", default="update",
              type=click.Choice(["update", "uniqueness", "delete"]))
@click.option("--column", "columns", multiple=True, help="a column of the group (repeat)")
@click.option("--resolution-column", default=None)
def handlers_set(config_path: str, apply_name: str, table: str, method: str, conflict: str,
                 columns: tuple[str, ...], resolution_column: str | None) -> None:
    """Set a conflict handler for a table's column group (kept in the state store)."""
    from pydantic import ValidationError

    from changeflow.apply.config import ConflictHandlerSpec
    from changeflow.apply.conflicts import set_handler

    cfg = load(config_path)
    try:
        spec = ConflictHandlerSpec.model_validate({
            "table": table, "conflict": conflict, "columns": list(columns),
            "method": method.upper(), "resolution_column": resolution_column})
    except ValidationError as exc:
        raise click.ClickException(exc.errors()[0]["msg"]) from exc
    _run(_set, cfg, apply_name, spec, set_handler)
    click.echo(f"apply {apply_name}: {spec.conflict} conflicts on {spec.table} "
               f"({spec.columns_key}) resolve with {spec.method}")


def _set(cfg: Any, apply_name: str, spec: Any, set_handler: Any) -> None:
    from changeflow.apply.engine import targets_of
    from changeflow.sites import queue_site
    from changeflow.spark import get_session

    apply = cfg.component("apply", apply_name)
    rt, _ = queue_site(cfg, apply.queue)
    columns = None
    if apply.target is None:
        table = targets_of(cfg, apply).get(get_session(quiet=True), spec.table)
        columns = table.column_names if table is not None else None
    set_handler(rt.store, apply_name, spec, columns)


@conflict_handlers.command("list")
@config_option
@click.option("--apply", "apply_name", required=True)
@output_option
def handlers_list(config_path: str, apply_name: str, output: str, as_json: bool) -> None:
    """The conflict handlers in force (configuration and set)."""
    from changeflow.apply.views import conflict_handlers as view

    emit(_run(view, load(config_path), apply_name), chosen(output, as_json), HANDLER_COLUMNS,
         empty="no conflict handlers")


@conflict_handlers.command("remove")
@config_option
@click.option("--apply", "apply_name", required=True)
@click.option("--table", required=True)
@click.option("--conflict", default="update",
              type=click.Choice(["update", "uniqueness", "delete"]))
@click.option("--column", "columns", multiple=True)
def handlers_remove(config_path: str, apply_name: str, table: str, conflict: str,
                    columns: tuple[str, ...]) -> None:
    """Remove a conflict handler that was set (configured ones stay in the file)."""
    from changeflow.apply.conflicts import remove_handler
    from changeflow.sites import queue_site

    cfg = load(config_path)
    rt, _ = queue_site(cfg, cfg.component("apply", apply_name).queue)
    n = _run(remove_handler, rt.store, apply_name, table, conflict, list(columns))
    if not n:
        raise click.ClickException(f"apply {apply_name} has no {conflict} conflict handler set "
                                   f"for {table} ({','.join(columns) or '*'})")
    click.echo(f"removed {n} conflict handler(s)")


@apply_group.group("handlers")
def handlers_group() -> None:
    """DML, DDL, message and precommit handlers."""


@handlers_group.command("list")
@config_option
@click.option("--apply", "apply_name", required=True)
@output_option
def user_handlers_list(config_path: str, apply_name: str, output: str, as_json: bool) -> None:
    """An apply's handlers and whether each imports."""
    from changeflow.apply.views import handlers

    emit(_run(handlers, load(config_path), apply_name), chosen(output, as_json),
         [Col("kind"), Col("table"), Col("operation"), Col("handler"), Col("status", width=70)],
         empty="no handlers")


@apply_group.command("progress")
@config_option
@click.option("--apply", "apply_name", default=None)
@output_option
def progress(config_path: str, apply_name: str | None, output: str, as_json: bool) -> None:
    """Each apply's queue position, backlog, errors and last run."""
    from changeflow.apply.views import apply_progress

    emit(_run(apply_progress, load(config_path), apply_name), chosen(output, as_json),
         PROGRESS_COLUMNS, empty="no applies")
