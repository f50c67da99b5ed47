"""The examples in the CLI's and the rules file writer's docstrings are true."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", [
    "changeflow.cli.output", "changeflow.cli.summary", "changeflow.rules.yamledit",
    "changeflow.rules.admin", "changeflow.rules.config",
])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
