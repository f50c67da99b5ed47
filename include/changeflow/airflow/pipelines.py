"""The pipelines an Airflow installation runs, for the UI page's pipeline selector.

``CHANGEFLOW_PIPELINES`` lists them, separated by ``:`` or ``,``: each entry is
``name=path/to/pipeline.yaml``, a bare YAML path (named after the DAG file rendered
from it, else the file's stem), or a directory (every ``*.yaml`` in it that is a
pipeline). Without it, ``CHANGEFLOW_CONFIG`` (named ``$CHANGEFLOW_PIPELINE``, default
``demo``) is the one pipeline. The name is the DAG id prefix: ``changeflow_<name>__…``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PipelineRef:
    """A pipeline the page can show: its name (DAG id prefix) and configuration file."""

    name: str
    config: str


def _entries(text: str) -> list[str]:
    return [e.strip() for e in re.split(r"[,:](?!//)", text) if e.strip()]


def _named(path: Path) -> list[PipelineRef]:
    if path.is_dir():
        return [PipelineRef(f.stem, str(f.resolve())) for f in sorted(path.glob("*.yaml"))
                if "propagations:" in f.read_text(errors="replace")]
    return [PipelineRef(path.stem, str(path.resolve()))]


def configured() -> list[PipelineRef]:
    """Every pipeline of ``CHANGEFLOW_PIPELINES`` (else ``CHANGEFLOW_CONFIG``), by name.

    >>> os.environ["CHANGEFLOW_PIPELINES"] = "a=/x/a.yaml,b=/y/b.yaml"
    >>> [p.name for p in configured()]
    ['a', 'b']
    >>> del os.environ["CHANGEFLOW_PIPELINES"]
    """
    text = os.environ.get("CHANGEFLOW_PIPELINES", "")
    out: list[PipelineRef] = []
    if text:
        for entry in _entries(text):
            name, eq, path = entry.partition("=")
            if eq:
                out.append(PipelineRef(name.strip(), str(Path(path.strip()).resolve())))
            else:
                out.extend(_named(Path(entry)))
    elif os.environ.get("CHANGEFLOW_CONFIG"):
        out.append(PipelineRef(os.environ.get("CHANGEFLOW_PIPELINE", "demo"),
                               str(Path(os.environ["CHANGEFLOW_CONFIG"]).resolve())))
    seen: set[str] = set()
    return [p for p in out if not (p.name in seen or seen.add(p.name))]  # type: ignore[func-returns-value]


def find(name: str | None) -> PipelineRef:
    """A configured pipeline by name (the first one when ``name`` is None).

    Raises:
        KeyError: no such pipeline (the message lists the configured ones).
    """
    refs = configured()
    if not refs:
        raise KeyError("no pipeline configured: set CHANGEFLOW_PIPELINES or CHANGEFLOW_CONFIG "
                       "in the Airflow API server's environment")
    if name is None:
        return refs[0]
    for r in refs:
        if r.name == name:
            return r
    raise KeyError(f"unknown pipeline {name!r}; configured: {', '.join(r.name for r in refs)}")
