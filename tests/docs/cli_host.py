"""Run ``changeflow`` command lines of the docs as fresh processes, without the start-up.

The docs test runs dozens of ``changeflow …`` examples; each would spend seconds
importing the CLI. This host imports it once, then forks a child per command line: the
child takes the command's working directory and environment (nothing else of the
host's), writes to its own stdout and stderr files, runs ``changeflow.cli:main`` (the
installed ``changeflow`` script's entry point) and exits with its exit code. Airflow,
Spark and the state stores are first touched in the child, as in a new process.

Protocol: one JSON request per line on stdin (``args``, ``cwd``, ``env``, ``out``,
``err``); on stdout the child's ``pid`` (to kill it on a timeout), then its ``code``.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import traceback
from typing import Any


def _child(req: dict[str, Any]) -> int:
    from changeflow.cli import main

    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    for fd, path in ((1, req["out"]), (2, req["err"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    try:
        main.main(req["args"], prog_name="changeflow")
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # what the Python interpreter would print, and its exit code
        traceback.print_exc()
        return 1


def serve() -> None:
    """Answer requests until stdin closes."""
    import changeflow.cli  # noqa: F401  (imported once, before any fork)

    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(req)
            finally:
                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code & 0xFF)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    serve()
