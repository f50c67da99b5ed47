"""A command invoked in-process leaves the calling program as it found it.

Tests (and programs embedding the CLI) call ``changeflow`` through click's runner in a
process that lives on: the command must not keep a handler on a stream it no longer
owns, change log levels, or start a JVM whose stderr can fill up and block.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner

from changeflow.cli import main
from changeflow.logs import run_logger


def _logging_state() -> tuple[int, int, list[logging.Handler]]:
    return logging.getLogger().level, run_logger().level, list(logging.getLogger().handlers)


def test_a_command_puts_logging_back(project: Path) -> None:
    before = _logging_state()
    for args in (["rules", "list"], ["--verbose", "rules", "list"], ["rules", "show", "NOPE"]):
        r = CliRunner().invoke(main, [*args, "--config", "config/demo.yaml"])
        assert r.exit_code in (0, 1), r.output
        assert _logging_state() == before, args
    # a later record reaches the handlers the program had, not a closed runner stream
    logging.getLogger("changeflow.test").warning("after the command")


PUMP = textwrap.dedent("""
    import os, subprocess, sys
    from changeflow.spark import _filtered_stderr
    r, w = os.pipe()
    os.close(r)                      # nobody reads what this process writes to stderr
    os.dup2(w, 2)
    with _filtered_stderr():         # the JVM would be started here
        child = subprocess.Popen([sys.executable, "-c",
            "import sys; sys.stderr.write('x' * 1000 + '\\\\n' * 1) ; "
            "[sys.stderr.write('y' * 999 + '\\\\n') for _ in range(2000)]"])
    child.wait(timeout=60)           # 2 MB: far more than a pipe holds
    print("done", child.returncode)
""")


def test_the_stderr_filter_never_blocks_the_child() -> None:
    """The JVM's stderr is drained even when the real stderr cannot be written."""
    r = subprocess.run([sys.executable, "-c", PUMP], capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.strip() == "done 0", r.stdout + r.stderr
