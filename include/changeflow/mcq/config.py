"""The ``mcq:`` section of a pipeline file: the Meta Change Queue's store, tables, listeners.

This module only depends on pydantic, so :mod:`changeflow.config` can import it.

>>> cfg = McqConfig.model_validate({"site": "site1", "tables": [{"tname": "person",
...     "subtype": "Telephone"}], "listeners": [{"proc_name": "LDAP", "frequency": "5s"}],
...     "interests": [{"proc_name": "LDAP", "tname": "PERSON", "subtype": "Telephone"}]})
>>> cfg.tables[0].tname, cfg.listeners[0].seconds, cfg.listeners[0].runs_as
('PERSON', 5.0, 'poller')
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$#.-]{0,63}$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m|h|hour|d|day)?\s*$")
_WORDS = {"hourly": 3600.0, "daily": 86400.0, "weekly": 604800.0}
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0,
          "hour": 3600.0, "d": 86400.0, "day": 86400.0}
#: Seconds between two real marks of a live process (the seed's five minutes).
DEFAULT_MARK_INTERVAL = 300.0


def seconds(value: str | float | int) -> float:
    """A duration in seconds from ``5``, ``"5s"``, ``"3min"``, ``"2h"``, ``"daily"``.

    >>> seconds("5s"), seconds("3min"), seconds("daily"), seconds(90)
    (5.0, 180.0, 86400.0, 90.0)
    """
    if isinstance(value, int | float):
        if value <= 0:
            raise ValueError(f"duration {value!r} must be positive")
        return float(value)
    word = value.strip().lower()
    if word in _WORDS:
        return _WORDS[word]
    m = _DURATION.match(word)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"duration {value!r}: use seconds or a number with s, min, h, d "
                         "(e.g. 5s, 3min), or hourly/daily/weekly")
    return float(m.group(1)) * _UNITS[m.group(2)]


def check_name(kind: str, value: str) -> str:
    """A listener, table or subtype name: letters, digits, ``_$#.-``, at most 64 characters.

    >>> check_name("listener", "LDAP")
    'LDAP'
    """
    if not NAME.match(value):
        raise ValueError(f"{kind} name {value!r} must start with a letter or _ and hold only "
                         "letters, digits and _$#.- (at most 64 characters)")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class McqTable(_Model):
    """A (table, subtype) pair that changes are logged for (seed Table 3, Meta_Change_Tables).

    The four key fields document where each key of an entry comes from (e.g.
    ``directory_telephone.person_id``); they are descriptions, not expressions.
    """

    tname: str
    subtype: str = ""
    comments: str | None = None
    person_id: str | None = None
    pkey_string: str | None = None
    pkey_number: str | None = None
    aux_string: str | None = None

    @field_validator("tname")
    @classmethod
    def _tname(cls, v: str) -> str:
        return check_name("table", v).upper()

    @field_validator("subtype")
    @classmethod
    def _subtype(cls, v: str) -> str:
        return check_name("subtype", v) if v else ""


class XmlHandler(_Model):
    """The generic XML listener: one XML document per change, into a directory or a URL.

    ``source``/``queries`` optionally add the object's current state to each document:
    ``queries`` maps a tname to a SQL query on the source with named parameters
    (``%(person_id)s``, ``%(pkey_string)s``, ...).
    """

    type: Literal["xml"]
    directory: str | None = None
    url: str | None = None
    source: str | None = None
    queries: dict[str, str] = {}

    @model_validator(mode="after")
    def _one_output(self) -> XmlHandler:
        if (self.directory is None) == (self.url is None):
            raise ValueError("give exactly one of directory and url")
        if self.queries and self.source is None:
            raise ValueError("queries need a source (a name from mcq.sources)")
        return self


class PgImportHandler(_Model):
    """The import-table listener (seed Figure 6): current state into a target's import table.

    For each change, ``queries[tname]`` runs on ``source`` with the entry's keys as named
    parameters; each row it returns is inserted into ``import_table`` of the target
    database, whose trigger applies the target's business rules. A change whose object
    is gone (a delete) inserts only the entry's keys (``key_columns``: import column ->
    entry field) when ``on_missing`` is ``keys``, and nothing when it is ``skip``.
    """

    type: Literal["pg_import"]
    source: str
    target: str
    import_table: str
    queries: dict[str, str] = Field(min_length=1)
    key_columns: dict[str, str] = {}
    on_missing: Literal["skip", "keys"] = "skip"

    @model_validator(mode="after")
    def _keys(self) -> PgImportHandler:
        keys = {"rrowid", "person_id", "pkey_string", "pkey_number", "aux_string", "tname",
                "subtype", "change_type", "entry_number"}
        if self.on_missing == "keys" and not self.key_columns:
            raise ValueError("on_missing: keys needs key_columns (import column: entry key)")
        for col, key in self.key_columns.items():
            if key not in keys:
                raise ValueError(f"key_columns.{col}: {key!r} is not an entry field "
                                 f"({', '.join(sorted(keys))})")
        return self


class PythonHandler(_Model):
    """A listener written in Python: ``module:function`` called with each change record."""

    type: Literal["python"]
    callable: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


Handler = Annotated[XmlHandler | PgImportHandler | PythonHandler, Field(discriminator="type")]


class McqListener(_Model):
    """A listener (seed Table 4, Meta_Change_Listeners) and how it runs (Table 5).

    ``frequency`` is how often it looks for changes. Under a minute it is a *poller*: a
    long-running loop (``changeflow mcq listen``, or an Airflow DAG whose run polls for
    ``poll_window``); otherwise its Airflow DAG drains the queue once per run. A cron
    ``schedule`` overrides the DAG's schedule. ``alert_after`` is how long it may go
    without marking that it is alive before the process monitor alerts. ``workers`` is
    how many workers consume it; ``redeliver`` when an entry got but not acknowledged
    is handed out again: ``immediate`` (the seed's behaviour; the default for one
    worker) or ``claim_timeout`` (the default for several).
    """

    proc_name: str
    comments: str | None = None
    role: str | None = None
    owner: str | None = None
    frequency: str | float = "daily"
    schedule: str | None = None
    poll_window: str | float = "1h"
    claim_timeout: str | float = "5min"
    workers: int = Field(default=1, ge=1)
    redeliver: Literal["immediate", "claim_timeout"] | None = None
    alert_after: str | float | None = None
    max_backoff: str | float = "1h"
    handler: Handler | None = None

    @field_validator("proc_name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name("listener", v)

    @field_validator("frequency", "poll_window", "claim_timeout", "alert_after", "max_backoff")
    @classmethod
    def _duration(cls, v: str | float | None) -> str | float | None:
        if v is not None:
            seconds(v)
        return v

    @property
    def seconds(self) -> float:
        """The frequency in seconds."""
        return seconds(self.frequency)

    @property
    def runs_as(self) -> Literal["poller", "batch"]:
        """``poller`` (under a minute between looks) or ``batch`` (drained once per run)."""
        return "poller" if self.seconds < 60 else "batch"


class McqInterest(_Model):
    """A listener's interest in a (table, subtype) pair (seed Table 6); subtype ``*`` is all."""

    proc_name: str
    tname: str
    subtype: str = ""
    comments: str | None = None

    @field_validator("tname")
    @classmethod
    def _tname(cls, v: str) -> str:
        return check_name("table", v).upper()

    @field_validator("subtype")
    @classmethod
    def _subtype(cls, v: str) -> str:
        return v if v in ("", "*") else check_name("subtype", v)


class McqSource(_Model):
    """A PostgreSQL database: a source of triggers and refresh queries, or a listener target.

    The connection comes from ``url_env`` (an environment variable holding a libpq URL)
    or ``conn_id`` (an Airflow connection), never from the file. ``pump`` marks a source
    whose triggers log into its own change log (outbox mode): its Airflow DAG moves that
    log into the MCQ every ``pump_every``.
    """

    name: str
    url_env: str | None = None
    conn_id: str | None = None
    pump: bool = False
    pump_every: str | float = "10s"

    @model_validator(mode="after")
    def _one_connection(self) -> McqSource:
        if (self.url_env is None) == (self.conn_id is None):
            raise ValueError("give exactly one of url_env and conn_id")
        check_name("source", self.name)
        seconds(self.pump_every)
        return self


class McqMonitor(_Model):
    """The process monitor: how often marks are written and how often they are checked."""

    mark_interval: str | float = DEFAULT_MARK_INTERVAL
    check_every: str | float = "5min"
    enabled: bool = True

    @field_validator("mark_interval", "check_every")
    @classmethod
    def _duration(cls, v: str | float) -> str | float:
        seconds(v)
        return v


class McqConfig(_Model):
    """The Meta Change Queue of a pipeline (``docs/mcq.md``).

    Its tables live in the state store of ``site`` or at ``state_url``. ``strict``
    makes a log call for an unknown table or subtype an error; otherwise it is logged
    as a warning and dropped.
    """

    site: str | None = None
    state_url: str | None = None
    strict: bool = True
    tables: list[McqTable] = []
    listeners: list[McqListener] = []
    interests: list[McqInterest] = []
    sources: list[McqSource] = []
    monitor: McqMonitor = McqMonitor()

    @model_validator(mode="after")
    def _references(self) -> McqConfig:
        if (self.site is None) == (self.state_url is None):
            raise ValueError("mcq: give exactly one of site and state_url")
        _unique("tables", [(t.tname, t.subtype) for t in self.tables])
        _unique("listeners", [(li.proc_name,) for li in self.listeners])
        _unique("sources", [(s.name,) for s in self.sources])
        pairs = {(t.tname, t.subtype) for t in self.tables}
        names = {li.proc_name for li in self.listeners}
        for i, it in enumerate(self.interests):
            if it.proc_name not in names:
                raise ValueError(f"mcq.interests.{i}.proc_name: unknown listener {it.proc_name!r}")
            known = (it.tname, it.subtype) in pairs or (
                it.subtype == "*" and any(t == it.tname for t, _ in pairs))
            if not known:
                raise ValueError(f"mcq.interests.{i}: unknown table {it.tname!r} subtype "
                                 f"{it.subtype!r} (declare it under mcq.tables)")
        sources = {s.name for s in self.sources}
        for i, li in enumerate(self.listeners):
            h = li.handler
            for attr in ("source", "target"):
                ref = getattr(h, attr, None)
                if ref is not None and ref not in sources:
                    raise ValueError(f"mcq.listeners.{i}.handler.{attr}: unknown source {ref!r}")
        return self

    def listener(self, name: str) -> McqListener:
        """A declared listener by name.

        Raises:
            KeyError: no listener of that name is declared.
        """
        for li in self.listeners:
            if li.proc_name == name:
                return li
        raise KeyError(name)

    def source(self, name: str) -> McqSource:
        """A declared source by name.

        Raises:
            KeyError: no source of that name is declared.
        """
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(name)


def _unique(section: str, keys: list[tuple[str, ...]]) -> None:
    seen: set[tuple[str, ...]] = set()
    for i, k in enumerate(keys):
        if k in seen:
            raise ValueError(f"mcq.{section}.{i}: duplicate {' '.join(k).strip()!r}")
        seen.add(k)
