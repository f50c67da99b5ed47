"""The examples in the docstrings of the CLI, the rules file writer, the apply's SQL
text, the target tables' maintenance policy and the LSN conversions are true."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", [
    "changeflow.cli.output", "changeflow.cli.summary", "changeflow.rules.yamledit",
    "changeflow.rules.admin", "changeflow.rules.config", "changeflow.apply.images",
    "changeflow.targets.files", "changeflow.targets.plans", "changeflow.targets.maintenance",
    "changeflow.pgconn",
])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
