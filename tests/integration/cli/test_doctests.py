"""The examples in the docstrings of the CLI, the rules file writer and its
transformations, the apply's SQL text, the target tables' maintenance policy, the LSN
conversions and the PostgreSQL apply's replication origin names are true."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", [
    "changeflow.cli.output", "changeflow.cli.summary", "changeflow.units", "changeflow.rules.yamledit",
    "changeflow.rules.admin", "changeflow.rules.config", "changeflow.apply.images",
    "changeflow.targets.files", "changeflow.targets.plans", "changeflow.targets.maintenance",
    "changeflow.pgconn", "changeflow.apply.pg_apply", "changeflow.rules.transforms",
])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
