"""A copy of the demo pipeline's configuration in a temporary directory, and its state."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``config/demo.yaml`` and ``config/demo-rules.yaml`` copied under ``tmp_path``.

    The working directory is ``tmp_path``, ``CHANGEFLOW_CONFIG`` is unset: commands get
    ``--config config/demo.yaml`` as the README's users would.
    """
    (tmp_path / "config").mkdir()
    for name in ("demo.yaml", "demo-rules.yaml"):
        shutil.copy(ROOT / "config" / name, tmp_path / "config" / name)
    monkeypatch.chdir(tmp_path)
    for var in ("CHANGEFLOW_CONFIG", "CHANGEFLOW_SITE1_STATE_URL", "CHANGEFLOW_SITE2_STATE_URL",
                "CHANGEFLOW_SITE1_STAGING", "CHANGEFLOW_SITE2_STAGING", "CHANGEFLOW_DEMO_SOURCE",
                "CHANGEFLOW_SITE1_TARGETS", "CHANGEFLOW_SITE2_TARGETS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def tree() -> Callable[[Path], dict[str, str]]:
    """``tree(root)``: every file under root with a digest of its content (what changed)."""
    return _tree
