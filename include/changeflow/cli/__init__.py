"""The ``changeflow`` command line.

Each concept registers its own command group in its own module; this module only
assembles them and sets what every command shares:

* ``--verbose``: Spark's progress bars and warnings, INFO logs, and the traceback of
  an unexpected error;
* errors as one line on stderr: ``Error: ...`` naming the file, key or object, and an
  exit code (:mod:`changeflow.errors`): 1 for bad input or a refused command, 65 for a
  terminal error, 75 for a transient one (retrying may succeed).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from changeflow.logs import _StderrHandler as FollowingStderr

#: ``ctx.meta`` key (shared by every context of one invocation): ``--verbose`` given
VERBOSE = "changeflow.verbose"


class _StderrHandler(FollowingStderr):
    """Log records to whatever ``sys.stderr`` is when they are emitted.

    A command run in-process (click's ``CliRunner``, a test) swaps ``sys.stderr`` for
    the time of one invocation: a handler that kept the stream it was given would write
    to a closed file afterwards.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))


def setup_logging(verbose: bool) -> Callable[[], None]:
    """Logs on stderr: warnings and errors, or everything from INFO up with ``--verbose``.

    Returns the function that puts logging back as it was (levels, handler): the
    command calls it when it ends, so that a command invoked in-process leaves the
    calling program's logging alone.
    """
    from changeflow.logs import run_logger

    root, runs = logging.getLogger(), run_logger()
    py4j = logging.getLogger("py4j")
    saved = [(logger, logger.level) for logger in (root, runs, py4j)]
    handler = next((h for h in root.handlers if isinstance(h, _StderrHandler)), None)
    added = handler is None
    if handler is None:
        handler = _StderrHandler()
        root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    # py4j logs every gateway round trip at INFO, and a closing message at exit
    py4j.setLevel(logging.WARNING)
    # A run's JSON events (start, progress, end) are for job logs; a person at the
    # command line gets the run's summary instead, and the events with --verbose.
    runs.setLevel(logging.INFO if verbose else logging.WARNING)

    def restore() -> None:
        for logger, level in saved:
            logger.setLevel(level)
        if added:
            root.removeHandler(handler)

    return restore


class Failure(click.ClickException):
    """A command failed: one line on stderr, and the exit code of its kind of error."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        # click declares exit_code on the class; each failure carries its own
        self.exit_code = exit_code  # type: ignore[misc]


def _first_lines(exc: BaseException, n: int = 2) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " ".join(lines[:n]) or "(no message)"
    return text if len(text) <= 400 else text[:399] + "…"


class _Group(click.Group):
    """A command group that accepts ``-o/--output`` and ``--json`` before its subcommand.

    Its subgroups are of the same class, so ``changeflow aq -o json queues`` and
    ``changeflow aq queues -o json`` mean the same (:func:`changeflow.cli.output.chosen`).
    """

    group_class: type[click.Group] | type[type] = type

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not any(p.name == "output" for p in self.params):
            from changeflow.cli.output import accepts_output

            accepts_output(self)


class _Main(_Group):
    """The root group: turns errors that escape a command into one clear line."""

    group_class = _Group

    def invoke(self, ctx: click.Context) -> Any:
        from changeflow.errors import ChangeflowError, exit_code

        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit,
                KeyboardInterrupt):
            raise
        except ChangeflowError as exc:
            raise Failure(str(exc), exit_code(exc)) from exc
        except BrokenPipeError:  # the reader went away (`changeflow ... | head`): stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(1) from None
        except Exception as exc:
            if ctx.meta.get(VERBOSE):
                raise
            raise Failure(f"{type(exc).__name__}: {_first_lines(exc)}\n(run with "
                          "changeflow --verbose ... for the traceback)", exit_code(exc)) from exc


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="changeflow")
@click.option("-v", "--verbose", is_flag=True,
              help="show Spark's progress bars and warnings, INFO logs and tracebacks")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """changeflow: Oracle Streams semantics on Spark, Parquet and Airflow.

    Commands that read a pipeline take --config FILE (default: $CHANGEFLOW_CONFIG);
    listings take --output table|json|yaml.
    """
    ctx.meta[VERBOSE] = verbose
    ctx.call_on_close(setup_logging(verbose))


def _register() -> None:
    from changeflow.cli import commands  # noqa: F401  (imports register the commands)


_register()
