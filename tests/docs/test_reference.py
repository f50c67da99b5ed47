"""docs/configuration.md lists every config key, docs/cli.md every command, README every doc.

The keys come from the configuration models (what ``load_config`` accepts), the
commands from the ``changeflow`` command tree: a key or a command added without its
documentation, or documented after it was removed, fails here.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import click
from pydantic import BaseModel

from changeflow.cli import main
from changeflow.config import PipelineConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _models(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def _nesting(annotation: object) -> str:
    """How a field holds its sub-model: ``[]`` (a list), ``.NAME`` (a map) or directly."""
    origin = typing.get_origin(annotation)
    if origin is list:
        return "[]"
    if origin is dict:
        return ".NAME"
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return next((n for a in typing.get_args(annotation) if (n := _nesting(a))), "")
    return ""


def config_keys(model: type[BaseModel] = PipelineConfig, path: str = "") -> Iterator[str]:
    """Every key path of the pipeline file, as docs/configuration.md writes them."""
    for name, f in model.model_fields.items():
        if name == "source_path":  # set by load_config, not a key of the file
            continue
        key = f"{path}.{f.alias or name}" if path else (f.alias or name)
        yield key
        for sub in _models(f.annotation):
            yield from config_keys(sub, key + _nesting(f.annotation))


def test_every_config_key_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([^`]+)` \|", text, re.M))
    keys = set(config_keys())
    assert {"alerts.airflow.smtp_conn_id", "idap.remote_sites.NAME.max_messages",
            "propagations[].limits.max_bytes", "applies[].limits.max_messages"} <= keys
    assert not keys - documented, f"keys missing from docs/configuration.md: {sorted(keys - documented)}"
    table_keys = {k for k in documented if "." in k or "[" in k or k in keys}
    assert not table_keys - keys, f"documented keys that do not exist: {sorted(table_keys - keys)}"


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Every command of ``changeflow`` as ``group sub command``."""
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            if getattr(cmd, "invoke_without_command", False):
                yield " ".join((*path, name))
            yield from commands(cmd, (*path, name))
        else:
            yield " ".join((*path, name))


def test_every_command_is_documented() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    found = list(commands())
    assert "schedules undeliverable" in found and "apply errors list" in found
    missing = [c for c in found if not re.search(rf"`(changeflow )?{re.escape(c)}[` ]", text)]
    assert not missing, f"commands missing from docs/cli.md: {missing}"


def test_the_readme_points_at_every_document() -> None:
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    listed = readme.partition("## Documentation")[2]
    docs = sorted(p.name for p in DOCS.glob("*.md"))
    missing = [d for d in docs if f"(docs/{d})" not in listed]
    assert not missing, f"README.md's Documentation list does not link {missing}"
    linked = re.findall(r"\(docs/([\w.-]+\.md)\)", readme)
    assert set(linked) <= set(docs), f"README.md links documents that do not exist: {linked}"
