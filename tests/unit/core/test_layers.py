"""The floors of docs/architecture.md hold: ``lint-imports`` keeps every contract of
pyproject.toml, and breaks the floors when a module imports upward (even lazily)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(package_root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the project's contracts, ``changeflow`` read from
    ``package_root``."""
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    args = [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache",
            "--no-logo", *(a for c in contracts for a in ("--contract", c))]
    return subprocess.run(args, cwd=package_root, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_every_contract_is_kept() -> None:
    done = _lint(ROOT / "include")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_lazy_upward_import_breaks_the_floors(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "include" / "changeflow", tmp_path / "changeflow",
                    ignore=shutil.ignore_patterns("__pycache__"))
    lcr = tmp_path / "changeflow" / "lcr.py"
    lcr.write_text(lcr.read_text() + "\n\ndef _upward() -> None:\n"
                   "    from changeflow.runner import main  # noqa: F401\n")
    done = _lint(tmp_path, "floors")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "changeflow.lcr is not allowed to import changeflow.runner" in done.stdout
