"""The declarative configuration: sites, queues, captures, propagations and applies.

One YAML file declares a pipeline. It is validated entirely at load time; an error
names the file and the dotted key path of the offending entry. Values may refer to
the environment as ``${VAR}`` or ``${VAR:-default}``, which is how the same file is
pointed at a real cluster (staging root URI, state store URL) without editing it.
Relative paths are resolved against the directory holding the file.

See ``docs/configuration.md`` for the format.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from changeflow.apply.config import (
    ConflictConfig,
    EnqueueDestination,
    ErrorPolicy,
    HandlerConfig,
    PositionPolicy,
)
from changeflow.debezium.config import DebeziumSource, KafkaSource
from changeflow.errors import ConfigError
from changeflow.idap.config import IdapConfig
from changeflow.mcq.config import McqConfig
from changeflow.messaging.config import MessagingConfig
from changeflow.targets.policy import IcebergConfig

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_QUEUE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$#]*\.[A-Za-z_][A-Za-z0-9_$#]*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _is_uri(value: str) -> bool:
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value))


class Site(_Model):
    """One site: a staging root for queues, a target root and a state store."""

    staging_root: str
    target_root: str
    state_url: str
    database: str = Field(description="global name of the site's database, e.g. DBS2.EXAMPLE.COM")


class QueueSpec(_Model):
    """A queue and the properties of its queue table."""

    name: str
    site: str
    queue_table: str | None = None
    sort_order: Literal[
        "commit_time", "enq_time", "priority", "priority,commit_time"
    ] = "commit_time"
    multiple_consumers: bool = True

    @field_validator("name")
    @classmethod
    def _owner_name(cls, v: str) -> str:
        if not _QUEUE_NAME.match(v):
            raise ValueError(f"queue name {v!r} must be owner.name")
        return v.lower()


class RuleSetRef(_Model):
    """A client's rule sets, by name, as declared in the rules file."""

    positive: str | None = None
    negative: str | None = None


class SnapshotTable(_Model):
    """A source table captured by comparing successive snapshots."""

    name: str
    key: list[str] = Field(min_length=1)
    schema_ddl: str | None = Field(default=None, description="column types for CSV snapshots")

    @field_validator("name")
    @classmethod
    def _owner_name(cls, v: str) -> str:
        if not _QUEUE_NAME.match(v):
            raise ValueError(f"table name {v!r} must be owner.table")
        return v


class SnapshotSource(_Model):
    """Snapshots of tables, one directory per snapshot: ``root/<owner.table>/snap=<n>/``."""

    type: Literal["snapshot"]
    database: str
    root: str
    format: Literal["parquet", "csv"] = "parquet"
    tables: list[SnapshotTable] = Field(min_length=1)


class PostgresSource(_Model):
    """A PostgreSQL database read through a logical replication slot (wal2json).

    The connection is given by ``url_env`` (an environment variable holding a libpq
    URL) or ``conn_id`` (an Airflow connection), never in the file itself.
    """

    type: Literal["postgres"]
    database: str = Field(description="global name of the source database, e.g. PG1.EXAMPLE.COM")
    url_env: str | None = None
    conn_id: str | None = None
    slot: str = Field(pattern=r"^[a-z0-9_]{1,63}$")
    plugin: Literal["wal2json"] = "wal2json"
    tables: list[str] = Field(default=[], description="schema.table; empty means all")
    schemas: list[str] = []
    create_slot: bool = True
    include_tagged_lcr: bool = False
    batch_changes: int = Field(default=50000, ge=1)

    @model_validator(mode="after")
    def _one_connection(self) -> PostgresSource:
        if (self.url_env is None) == (self.conn_id is None):
            raise ValueError("give exactly one of url_env and conn_id")
        for t in self.tables:
            if not _QUEUE_NAME.match(t):
                raise ValueError(f"table name {t!r} must be schema.table")
        return self


class PostgresTarget(_Model):
    """A PostgreSQL database an apply writes into (see ``docs/postgres.md``).

    ``import_tables`` maps an LCR table (``OWNER.NAME``) to an import table whose
    trigger applies the target's business rules (seed 004): every change of that table
    is inserted there instead of being applied to a table of the same name.
    """

    type: Literal["postgres"]
    url_env: str | None = None
    conn_id: str | None = None
    schema_map: dict[str, str] = {}
    import_tables: dict[str, str] = {}
    tag_origin: bool = True
    group_changes: int = Field(default=5000, ge=1)

    @model_validator(mode="after")
    def _one_connection(self) -> PostgresTarget:
        if (self.url_env is None) == (self.conn_id is None):
            raise ValueError("give exactly one of url_env and conn_id")
        return self


class CaptureSpec(_Model):
    """A capture: a source, optional rule sets and the queue it enqueues into."""

    name: str
    queue: str
    source: Annotated[SnapshotSource | PostgresSource | DebeziumSource | KafkaSource,
                     Field(discriminator="type")]
    rule_sets: RuleSetRef = RuleSetRef()


class ScheduleConfig(_Model):
    """A propagation's schedule (see ``docs/schedules.md``); the defaults are seed 001's.

    ``start`` None means now (when the schedule is created); ``duration`` None is one
    infinite window; ``next_time`` None restarts as soon as a window ends. Seconds.
    """

    start: datetime | None = None
    duration: float | None = Field(default=None, gt=0)
    next_time: float | None = Field(default=None, gt=0)
    latency: float = Field(default=3.0, ge=0)
    enabled: bool = True


class EmailAlerts(_Model):
    """Alert emails through an SMTP server; credentials come from the environment."""

    host: str
    port: int = 25
    sender: str = "changeflow@localhost"
    to: list[str] = Field(min_length=1)
    starttls: bool = False
    username_env: str | None = None
    password_env: str | None = None


class AirflowAlerts(_Model):
    """Failed and retried tasks notified through Airflow's notifiers (Airflow connections).

    ``smtp_conn_id`` with ``to``: Airflow's ``SmtpNotifier``; ``slack_webhook_conn_id``:
    ``SlackWebhookNotifier`` (needs apache-airflow-providers-slack). See
    ``docs/schedules.md``.
    """

    smtp_conn_id: str | None = None
    to: list[str] = Field(default_factory=list)
    from_email: str | None = None
    slack_webhook_conn_id: str | None = None


class AlertsConfig(_Model):
    """Where schedule alerts go: email, a generic webhook, Slack via Airflow's notifier."""

    email: EmailAlerts | None = None
    webhook_url: str | None = None
    slack_conn_id: str | None = None
    timeout: float = Field(default=10.0, gt=0)
    airflow: AirflowAlerts | None = None


class PassLimits(_Model):
    """The most one pass of a propagation or apply reads, so a backlog drains in steps.

    A pass always takes at least one batch, however big. The defaults suit the
    embedded machine (2 cores, a few GB for Spark); raise them on a cluster.
    """

    max_messages: int = Field(default=2_000_000, ge=1)
    max_bytes: int = Field(default=512 * 1024 * 1024, ge=1)


class KeepRunning(_Model):
    """An apply that keeps running (see ``docs/operations.md``): its Airflow DAG runs every
    ``minutes``, and each DAG run's job applies every ``every`` seconds in one Spark
    session (``--every``), starting no run in the last tenth of the period (at most a
    minute), so it ends before the next DAG run."""

    every: float = Field(gt=0, description="seconds from one run's start to the next's")
    minutes: float = Field(default=60.0, gt=0, description="the DAG's period")

    @property
    def for_seconds(self) -> float:
        """How long each DAG run's job starts runs (``--for``)."""
        return round(self.minutes * 60 - min(60.0, self.minutes * 6), 3)

    @model_validator(mode="after")
    def _room(self) -> KeepRunning:
        if self.every >= self.for_seconds:
            raise ValueError(
                f"every ({self.every:g} s) must be shorter than the {self.for_seconds:g} s "
                f"a DAG run of {self.minutes:g} minutes starts runs for: raise minutes or "
                "lower every")
        return self


class PropagationSpec(_Model):
    """A propagation from a source queue to a destination queue (``owner.name@site``)."""

    name: str
    source_queue: str
    destination_queue: str
    rule_sets: RuleSetRef = RuleSetRef()
    schedule: ScheduleConfig = ScheduleConfig()
    limits: PassLimits = PassLimits()


class ApplySpec(_Model):
    """An apply process: dequeues from a queue and applies to Iceberg target tables (or,
    with ``target``, to a PostgreSQL database)."""

    name: str
    queue: str
    rule_sets: RuleSetRef = RuleSetRef()
    buckets: int = Field(default=16, ge=1, le=4096)
    apply_tag: str = Field(default="00", pattern=r"^([0-9A-Fa-f]{2})+$")
    parallelism: int = Field(default=4, ge=1, le=64, description=(
        "how many target tables a pass works on at once (driver threads, each running "
        "its table's Spark jobs); 1: one table after the other"))
    target: PostgresTarget | None = None
    limits: PassLimits = PassLimits()
    conflicts: ConflictConfig = ConflictConfig()
    handlers: HandlerConfig = HandlerConfig()
    enqueue: list[EnqueueDestination] = []
    errors: ErrorPolicy = ErrorPolicy()
    positions: PositionPolicy = PositionPolicy()
    iceberg: IcebergConfig = IcebergConfig()
    keep_running: KeepRunning | None = None


class QualityConfig(_Model):
    """Data-quality checks at every hop (see ``docs/quality.md``).

    ``blocking`` lists the checks whose failure quarantines a batch and fails the run;
    ``None`` means the default set (every check except ``commit_order_across_batches``).
    Checks in ``warn_only`` only warn, whatever ``blocking`` says.
    """

    enabled: bool = True
    blocking: list[str] | None = None
    warn_only: list[str] = []
    sample_rows: int = Field(default=5, ge=1, le=100)
    data_docs_dir: str | None = Field(default=None, description="default work/data-docs")


class PipelineConfig(_Model):
    """A whole pipeline declaration."""

    version: Literal[1] = 1
    sites: dict[str, Site]
    queues: list[QueueSpec] = []
    captures: list[CaptureSpec] = []
    propagations: list[PropagationSpec] = []
    applies: list[ApplySpec] = []
    rules: str | None = None
    quality: QualityConfig = QualityConfig()
    alerts: AlertsConfig = AlertsConfig()
    mcq: McqConfig | None = None
    messaging: MessagingConfig = MessagingConfig()
    idap: IdapConfig = IdapConfig()
    spark: dict[str, str] = {}
    source_path: str | None = None

    @model_validator(mode="after")
    def _references(self) -> PipelineConfig:
        _check_names(self)
        queue_keys = {f"{q.name}@{q.site}" for q in self.queues}
        for name in set(self.idap.remote_sites) & set(self.sites):
            raise ValueError(f"idap.remote_sites.{name}: {name} is a local site already")
        for i, q in enumerate(self.queues):
            if q.site not in self.sites:
                raise ValueError(f"queues.{i}.site: unknown site {q.site!r}")
        for section in ("captures", "propagations", "applies"):
            for i, item in enumerate(getattr(self, section)):
                for attr in ("queue", "source_queue", "destination_queue"):
                    ref = getattr(item, attr, None)
                    if ref is not None and self.qualify(ref) not in queue_keys \
                            and not (attr == "destination_queue" and self.idap.remote(ref)):
                        raise ValueError(f"{section}.{i}.{attr}: unknown queue {ref!r}")
        return self

    def qualify(self, ref: str) -> str:
        """Turn ``owner.name`` or ``owner.name@site`` into ``owner.name@site``.

        A reference without a site is allowed only when exactly one site is declared.
        """
        if "@" in ref:
            name, site = ref.rsplit("@", 1)
            return f"{name.lower()}@{site}"
        if len(self.sites) == 1:
            return f"{ref.lower()}@{next(iter(self.sites))}"
        matches = [q for q in self.queues if q.name == ref.lower()]
        if len(matches) == 1:
            return f"{matches[0].name}@{matches[0].site}"
        return f"{ref.lower()}@?"

    def queue(self, ref: str) -> QueueSpec:
        """The declared queue a reference names."""
        name, site = self.qualify(ref).rsplit("@", 1)
        for q in self.queues:
            if q.name == name and q.site == site:
                return q
        raise ConfigError(f"unknown queue {ref!r}", file=self.source_path)

    def component(self, kind: str, name: str) -> Any:
        """A capture, propagation or apply by name."""
        section: dict[str, list[Any]] = {
            "capture": list(self.captures), "propagation": list(self.propagations),
            "apply": list(self.applies),
        }
        for item in section[kind]:
            if item.name == name:
                return item
        raise ConfigError(f"no {kind} named {name!r}", file=self.source_path)


def _check_names(cfg: PipelineConfig) -> None:
    seen: set[tuple[str, str]] = set()
    for section in ("captures", "propagations", "applies"):
        for i, item in enumerate(getattr(cfg, section)):
            if not _NAME.match(item.name):
                raise ValueError(f"{section}.{i}.name: {item.name!r} is not a valid name")
            if (section, item.name) in seen:
                raise ValueError(f"{section}.{i}.name: duplicate name {item.name!r}")
            seen.add((section, item.name))
    pairs = [(p.source_queue, p.destination_queue) for p in cfg.propagations]
    if len(pairs) != len({(cfg.qualify(a), cfg.qualify(b)) for a, b in pairs}):
        raise ValueError("propagations: at most one propagation per (source, destination) pair")


def _expand(value: Any) -> Any:
    if isinstance(value, str):
        return _ENV.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, list):
        return [_expand(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    return value


def _resolve_paths(raw: dict[str, Any], base: Path) -> None:
    def fix(p: str) -> str:
        if _is_uri(p) or os.path.isabs(p):
            return p
        return str((base / p).resolve())

    for site in (raw.get("sites") or {}).values():
        if isinstance(site, dict):
            for key in ("staging_root", "target_root"):
                if isinstance(site.get(key), str):
                    site[key] = fix(site[key])
            url = site.get("state_url")
            if isinstance(url, str) and url.startswith("sqlite:///") and not url.startswith(
                "sqlite:////"
            ):
                site["state_url"] = "sqlite:///" + fix(url[len("sqlite:///") :])
    for cap in raw.get("captures") or []:
        src = cap.get("source") if isinstance(cap, dict) else None
        if isinstance(src, dict) and isinstance(src.get("root"), str):
            src["root"] = fix(src["root"])
    if isinstance(raw.get("rules"), str):
        raw["rules"] = fix(raw["rules"])
    quality = raw.get("quality")
    if isinstance(quality, dict) and isinstance(quality.get("data_docs_dir"), str):
        quality["data_docs_dir"] = fix(quality["data_docs_dir"])


def _file_path(raw: Any, loc: tuple[Any, ...]) -> list[Any]:
    """The key path as written in the file: drop the tags pydantic adds for unions."""
    out: list[Any] = []
    node = raw
    for part in loc:
        if isinstance(node, dict) and part not in node and node.get("type") == part:
            continue
        out.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            node = None
    return out


def load_config(path: str | os.PathLike[str]) -> PipelineConfig:
    """Load and validate a pipeline configuration file.

    Raises:
        ConfigError: naming the file and the key when anything is wrong.
    """
    file = str(path)
    try:
        text = Path(file).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration: {exc.strerror}", file=file) from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", file=file) from exc
    if not isinstance(raw, dict):
        raise ConfigError("the top level must be a mapping", file=file)
    raw = _expand(raw)
    _resolve_paths(raw, Path(file).resolve().parent)
    raw["source_path"] = os.path.abspath(file)
    try:
        return PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in _file_path(raw, err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        if not key and ": " in msg:
            key, msg = msg.split(": ", 1)
        raise ConfigError(msg, file=file, key=key or None) from exc
