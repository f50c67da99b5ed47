"""From a pipeline configuration to the MCQ's runtime handles: store, sources, paths."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from changeflow.errors import ConfigError
from changeflow.mcq.config import McqConfig

if TYPE_CHECKING:
    from changeflow.config import PipelineConfig
    from changeflow.mcq.api import MetaChangeQueue
    from changeflow.state import StateStore


def section(cfg: PipelineConfig) -> McqConfig:
    """The ``mcq:`` section.

    Raises:
        ConfigError: the file has none, or names an unknown site.
    """
    if cfg.mcq is None:
        raise ConfigError("no mcq section (the Meta Change Queue is configured under `mcq:`; "
                          "the demo's is config/demo-mcq.yaml)", file=cfg.source_path)
    if cfg.mcq.site is not None and cfg.mcq.site not in cfg.sites:
        raise ConfigError(f"unknown site {cfg.mcq.site!r}", file=cfg.source_path, key="mcq.site")
    return cfg.mcq


def resolve_path(cfg: PipelineConfig, path: str) -> str:
    """A path of the file made absolute against the file's directory (URIs unchanged)."""
    if "://" in path or os.path.isabs(path) or not cfg.source_path:
        return path
    return str((Path(cfg.source_path).parent / path).resolve())


def state_url(cfg: PipelineConfig) -> str:
    """The URL of the state store holding the MCQ tables."""
    m = section(cfg)
    if m.site is not None:
        return cfg.sites[m.site].state_url
    url = m.state_url or ""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        return "sqlite:///" + resolve_path(cfg, url[len("sqlite:///"):])
    return url


def open_store(cfg: PipelineConfig) -> StateStore:
    """The MCQ's state store (migrated on first open)."""
    from changeflow.state import StateStore

    return StateStore(state_url(cfg))


def open_mcq(cfg: PipelineConfig) -> MetaChangeQueue:
    """The MCQ of a configuration, ready to use."""
    from changeflow.mcq.api import MetaChangeQueue

    return MetaChangeQueue.from_config(open_store(cfg), section(cfg))


def source_url(cfg: PipelineConfig, name: str) -> str:
    """The libpq URL of a declared source (from its environment variable or connection).

    Raises:
        ConfigError: no such source, or its URL cannot be resolved.
    """
    from changeflow.pgconn import resolve_url

    try:
        spec = section(cfg).source(name)
    except KeyError:
        known = ", ".join(s.name for s in section(cfg).sources) or "none"
        raise ConfigError(f"unknown source {name!r} (declared: {known})",
                          file=cfg.source_path, key="mcq.sources") from None
    return resolve_url(spec)


def sqlalchemy_url(libpq_url: str) -> str:
    """A libpq URL as a SQLAlchemy URL on psycopg 3.

    >>> sqlalchemy_url("postgresql://u@/db?host=/tmp")
    'postgresql+psycopg://u@/db?host=/tmp'
    """
    for prefix in ("postgresql://", "postgres://"):
        if libpq_url.startswith(prefix):
            return "postgresql+psycopg://" + libpq_url[len(prefix):]
    return libpq_url


def libpq_url(sa_url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as a libpq URL.

    >>> libpq_url("postgresql+psycopg://u@/db?host=/tmp")
    'postgresql://u@/db?host=/tmp'
    """
    head, sep, rest = sa_url.partition("://")
    return f"postgresql://{rest}" if sep and head.startswith("postgresql") else sa_url
