"""Imports every command module so that each registers itself on :data:`main`."""

from __future__ import annotations

from changeflow.cli import rules as _rules  # noqa: F401
