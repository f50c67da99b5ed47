"""Operator actions on the views' rows (buttons of the Airflow UI page).

Each action is what the CLI does for the same row, called the same way:

- apply error queue (``DBA_APPLY_ERROR``): re-execute one failed transaction
  (``EXECUTE_ERROR``) or delete it (``DELETE_ERROR``);
- exception queue: release a quarantined batch back to its consumers.

A re-execution into a Parquet target needs Spark: the page's API server does not start
a JVM of its own, it runs ``changeflow apply errors execute`` as a child process (what
an operator would type) and reports its outcome. PostgreSQL targets are re-executed in
process. Every action checks its row still exists first and raises an error naming
what is missing, so a stale page changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from changeflow.errors import ChangeflowError, ConfigError, TerminalError

#: how long a re-execution launched from the page may take
EXECUTE_TIMEOUT = 900.0


def _int(params: dict[str, Any], key: str) -> int:
    try:
        return int(params[key])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"the request needs an integer {key!r}; got "
                          f"{params.get(key)!r}") from exc


def _apply(cfg: Any, params: dict[str, Any]) -> tuple[Any, Any, int]:
    from changeflow.apply import errorq
    from changeflow.sites import queue_site

    name = str(params.get("apply") or "")
    spec = cfg.component("apply", name)
    rt, _ = queue_site(cfg, spec.queue)
    entry = errorq.get(rt.store, spec.name, _int(params, "id"))
    return spec, rt, entry.id


def execute_apply_error(cfg: Any, params: dict[str, Any], config_path: str) -> str:
    """Re-execute one entry of an apply's error queue. Returns what happened.

    Raises:
        ErrorNotFoundError: no such entry.
        TerminalError: the transaction failed again (it stays with its new error).
    """
    spec, _, entry_id = _apply(cfg, params)
    if spec.target is None:
        applied, failed = _execute_in_child(config_path, spec.name, entry_id)
    else:
        from changeflow.apply.views import execute_error

        res = execute_error(cfg, spec.name, entry_id)
        applied, failed = res.applied, {str(k): v for k, v in res.failed.items()}
    if failed:
        raise TerminalError(f"error {entry_id} of apply {spec.name} failed again and stays "
                            f"in the error queue: {next(iter(failed.values()))}")
    if entry_id not in applied:
        raise TerminalError(f"error {entry_id} of apply {spec.name} was not re-executed")
    return f"error {entry_id} of apply {spec.name} re-executed and applied"


def _execute_in_child(config_path: str, apply: str, entry_id: int
                      ) -> tuple[list[int], dict[str, str]]:
    cmd = [sys.executable, "-c", "from changeflow.cli import main; main()", "apply", "errors",
           "execute", "--config", config_path, "--apply", apply, str(entry_id), "-o", "json"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=EXECUTE_TIMEOUT,
                             check=False)
    except subprocess.TimeoutExpired as exc:
        raise TerminalError(f"re-executing error {entry_id} of apply {apply} took more than "
                            f"{EXECUTE_TIMEOUT:.0f} s; run `changeflow apply errors execute "
                            f"--apply {apply} {entry_id}` from a shell") from exc
    try:
        rows = json.loads(out.stdout or "null")
    except json.JSONDecodeError:
        rows = None
    if not isinstance(rows, list):
        last = (out.stderr or out.stdout).strip().splitlines()
        raise TerminalError(f"re-executing error {entry_id} of apply {apply} failed (exit "
                            f"{out.returncode}): {last[-1] if last else 'no output'}")
    applied = [int(r["id"]) for r in rows if r.get("outcome") == "applied"]
    failed = {str(r["id"]): str(r.get("error")) for r in rows if r.get("outcome") != "applied"}
    return applied, failed


def delete_apply_error(cfg: Any, params: dict[str, Any], config_path: str) -> str:
    """Delete one entry of an apply's error queue (never applied). Returns a message."""
    from changeflow.apply import errorq

    spec, rt, entry_id = _apply(cfg, params)
    errorq.delete_entries(rt.store, spec.name, [entry_id])
    return f"error {entry_id} of apply {spec.name} deleted; it will not be applied"


def release_batch(cfg: Any, params: dict[str, Any], config_path: str) -> str:
    """Release a quarantined batch of a queue (``queue`` as ``owner.name@site``)."""
    from changeflow.queues.quarantine import release
    from changeflow.sites import site

    ref = str(params.get("queue") or "")
    try:
        q = cfg.queue(ref)
    except ChangeflowError as exc:
        raise ConfigError(f"unknown queue {ref!r} in the pipeline") from exc
    seq = _int(params, "batch")
    new = release(site(cfg, q.site).catalog, q.name, seq)
    return f"batch {seq} of {q.name}@{q.site} released as batch {new}"


def row_actions(view: str) -> list[dict[str, Any]]:
    """The page's buttons for a view's rows (none for most views), as the keyword
    arguments of the page registry's ``RowAction``."""
    if view == "apply-errors":
        return [dict(name="execute", label="Re-execute", run=execute_apply_error,
                     keys=("apply", "id")),
                dict(name="delete", label="Delete", run=delete_apply_error,
                     keys=("apply", "id"), danger=True)]
    if view == "exceptions":
        return [dict(name="release", label="Release", run=release_batch,
                     keys=("queue", "batch"), when={"state": "QUARANTINED"})]
    return []
