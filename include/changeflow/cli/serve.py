"""``changeflow serve``: the IDAP SOAP service (Advanced Queuing over HTTP(S), seed 003).

With a pipeline file (``--config`` or ``$CHANGEFLOW_CONFIG``) it serves that pipeline's
site (``--site``, ``idap.site``, or the first declared) with the file's ``idap:``
section. Without one it runs on embedded defaults: a SQLite store at
``work/aq/state.db``. When no ``idap.users`` are declared, one user, ``aq``, may log
in; its password is ``$CHANGEFLOW_IDAP_PASSWORD`` or, when that is not set, generated
into ``work/aq/idap-password`` on first start. It listens on 127.0.0.1:8042 unless
told otherwise.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import click

from changeflow.cli import main
from changeflow.idap.config import DEFAULT_PORT, IdapConfig

DEFAULT_DIR = Path("work/aq")
PASSWORD_ENV = "CHANGEFLOW_IDAP_PASSWORD"


def _default_user() -> tuple[dict[str, str], str]:
    """The ``aq`` user of the embedded defaults, and where its password is."""
    DEFAULT_DIR.mkdir(parents=True, exist_ok=True)
    note = f"password from ${PASSWORD_ENV}"
    if not os.environ.get(PASSWORD_ENV):
        file = DEFAULT_DIR / "idap-password"
        if not file.exists():
            file.write_text(secrets.token_urlsafe(18) + "\n")
            file.chmod(0o600)
        os.environ[PASSWORD_ENV] = file.read_text().strip()
        note = f"password in {file}"
    return {"name": "aq", "password_env": PASSWORD_ENV}, f"aq ({note})"


def _target(config_path: str | None, store_url: str | None) -> tuple[Any, IdapConfig, str]:
    """What to serve, its ``idap`` section (the ``aq`` user added when it has none), users."""
    if config_path:
        from changeflow.cli.common import load

        if store_url:
            raise click.UsageError("--store is for the embedded defaults; the pipeline file "
                                   "names its sites' stores")
        target: Any = load(config_path)
        cfg: IdapConfig = target.idap
    else:
        from changeflow.state import StateStore

        DEFAULT_DIR.mkdir(parents=True, exist_ok=True)
        target = StateStore(store_url or f"sqlite:///{DEFAULT_DIR.resolve()}/state.db")
        cfg = IdapConfig()
    if cfg.users:
        return target, cfg, ", ".join(u.name for u in cfg.users)
    user, who = _default_user()
    return target, cfg.model_copy(update={"users": [type(cfg).model_validate(
        {"users": [user]}).users[0]]}), who


@main.command("serve")
@click.option("--config", "config_path", envvar="CHANGEFLOW_CONFIG", show_envvar=True,
              type=click.Path(exists=True, dir_okay=False),
              help="pipeline file (default: embedded defaults, a store under work/aq)")
@click.option("--site", help="the site to serve (default: idap.site, or the only one)")
@click.option("--host", help="listen address (default: idap.host, 127.0.0.1)")
@click.option("--port", type=int, help=f"listen port (default: idap.port, {DEFAULT_PORT})")
@click.option("--store", "store_url", help="state store URL, without --config")
@click.option("--hash-password", is_flag=True,
              help="read a password and print its password_hash for idap.users, then exit")
def serve(config_path: str | None, site: str | None, host: str | None, port: int | None,
          store_url: str | None, hash_password: bool) -> None:
    """Serve IDAP (SOAP 1.1) requests: AQXmlSend/Publish/Receive/Register/Commit/Rollback.

    POST SOAP envelopes with HTTP basic authentication to http://HOST:PORT/aq; the WSDL
    is at /aq?wsdl. Stop with Ctrl-C (open transactions are rolled back).
    """
    from changeflow.errors import ChangeflowError
    from changeflow.idap.auth import hash_password as make_hash
    from changeflow.idap.server import serve as run

    if hash_password:
        click.echo(make_hash(click.prompt("password", hide_input=True,
                                          confirmation_prompt=True)))
        return
    try:
        target, cfg, who = _target(config_path, store_url)
        if config_path and not (site or cfg.site):
            site = next(iter(target.sites))  # the first site; --site chooses another
        served = f"site {site} of {config_path}" if config_path else "embedded defaults"
        scheme = "https" if cfg.tls else "http"
        where = f"{scheme}://{host or cfg.host}:{port or cfg.port}{cfg.path}"
        click.echo(f"changeflow IDAP service at {where} (WSDL: {where}?wsdl), {served}; "
                   f"users: {who}; "
                   f"idle transactions rolled back after {cfg.idle_timeout:g} s; "
                   + (f"time manager every {cfg.time_manager:g} s" if cfg.time_manager
                      else "time manager off (idap.time_manager: 0)"))
        run(target, cfg, site=site, host=host, port=port)
    except ChangeflowError as exc:
        raise click.ClickException(str(exc)) from exc
