"""``changeflow doctor``: one line per site's staging root, target catalog and state
store, the Spark master and the scratch space (:mod:`changeflow.doctor`)."""

from __future__ import annotations

import click

from changeflow.cli import Failure, main
from changeflow.cli.common import config_option, load
from changeflow.errors import EXIT_TERMINAL, EXIT_TRANSIENT


@main.command("doctor")
@config_option
@click.option("--master", default=None,
              help="the Spark master to check (default: the spark_default connection)")
@click.option("--retries", default=2, show_default=True,
              help="tries again of a transient failure before it is reported")
@click.option("--backoff", default=1.0, show_default=True,
              help="seconds before the first try again (doubling)")
@click.option("--slow-after", default=2.0, show_default=True,
              help="a listing slower than this many seconds is reported slow")
@click.option("--min-free-gb", default=2.0, show_default=True,
              help="the scratch space (SPARK_LOCAL_DIRS, else /tmp) fails with less free")
def doctor(config_path: str, master: str | None, retries: int, backoff: float,
           slow_after: float, min_free_gb: float) -> None:
    """Check that each site's staging root, target catalog and state store, and the
    Spark master, are reachable, and that the scratch space has room; one line each.
    Exits 65 when a check failed for good (credentials, a missing bucket, a full disk),
    75 when only transient failures remain."""
    from changeflow.doctor import run_checks

    cfg = load(config_path)
    checks = run_checks(cfg, master=master, retries=retries, backoff=backoff,
                        slow_after=slow_after, min_free_gb=min_free_gb)
    for c in checks:
        click.echo(c.line())
    failed = [c for c in checks if c.status == "FAILED"]
    if failed:
        code = EXIT_TRANSIENT if all(c.transient for c in failed) else EXIT_TERMINAL
        raise Failure(f"{len(failed)} of {len(checks)} checks failed", code)
