"""``changeflow views``: the dictionary views (captures, propagations, applies, queues, rules,
lag, runs) as tables or JSON; ``changeflow metrics``: the Prometheus endpoint."""

from __future__ import annotations

import click

from changeflow.cli import main
from changeflow.cli.common import config_option, load
from changeflow.cli.output import Col, chosen, emit, output_option
from changeflow.errors import ChangeflowError

_KIND = {"state": "text"}


@main.group("views")
def views() -> None:
    """Dictionary views of a pipeline, like Oracle's DBA_* and V$* views."""


def _command(name: str) -> None:
    from changeflow.views import VIEWS

    view = VIEWS[name]

    @views.command(name, help=f"{view.title} (like {view.oracle}); COMPONENT: one "
                   f"{view.component}.")
    @click.argument("component", required=False)
    @click.option("--probe", is_flag=True, help="ask sources for their current position "
                  "(captures: the PostgreSQL lag)") if name == "captures" else (lambda f: f)
    @config_option
    @output_option
    def show(component: str | None, config_path: str, output: str, as_json: bool,
             probe: bool = False) -> None:
        cfg = load(config_path)
        try:
            rows = view.fetch(cfg, component, probe=True) if probe else \
                view.fetch(cfg, component)
        except ChangeflowError as exc:
            raise click.ClickException(str(exc)) from exc
        cols = [Col(c[0], _KIND.get(c[1], c[1]), c[2] if len(c) > 2 else None,
                    width=60 if c[0] in ("condition", "error", "reason", "path") else None)
                for c in view.columns]
        emit(rows, chosen(output, as_json), cols, empty=f"(no {name})")


def _register() -> None:
    from changeflow.views import VIEWS

    for name in VIEWS:
        _command(name)


_register()


@views.command("list")
@output_option
def list_views(output: str, as_json: bool) -> None:
    """The views and the Oracle views they stand for."""
    from changeflow.views import VIEWS

    rows = [{"view": v.name, "title": v.title, "oracle": v.oracle, "argument": v.component}
            for v in VIEWS.values()]
    emit(rows, chosen(output, as_json), [Col("view"), Col("title"), Col("oracle"),
                                         Col("argument")])


@main.group("metrics")
def metrics() -> None:
    """Lag, throughput and backlog figures for Prometheus."""


@metrics.command("serve")
@click.option("--port", default=9464, show_default=True, type=int)
@click.option("--host", default="127.0.0.1", show_default=True)
@config_option
def serve(port: int, host: str, config_path: str) -> None:
    """Serve /metrics (Prometheus text format) until interrupted."""
    from changeflow.views.metrics import serve as run_server

    load(config_path)
    server, _ = run_server(config_path, port=port, host=host)
    click.echo(f"serving changeflow metrics of {config_path} on http://{host}:{server.server_port}"
               "/metrics")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.shutdown()


@metrics.command("show")
@config_option
def show_metrics(config_path: str) -> None:
    """Print the metrics once, in Prometheus text format."""
    from changeflow.views.metrics import exposition

    load(config_path)
    click.echo(exposition(config_path), nl=False)
