"""Applying a pipeline's ``messaging`` section to its sites' stores.

:func:`setup` creates what the configuration declares and is missing: object types
(in every site), queue tables, queues (started unless ``started: false``),
subscribers, agents and grants. It never changes what exists: an operator's
``stop_queue`` or ``alter_queue`` stays, and a queue that was dropped stays dropped
(nothing re-creates it behind the operator's back). It runs once per configuration
object and process, on :func:`changeflow.messaging.connect` and before a propagation
carries user messages.

The pipeline's own queues (``queues:``) come out as ``DBMS_STREAMS_ADM.SET_UP_QUEUE``
makes a Streams queue: a secure, transactional, commit-time ``SYS.ANYDATA`` queue table
(unless ``messaging.queue_tables`` declares theirs), and ``messaging.set_up_queues``
calls ``SET_UP_QUEUE`` with queue users.

It also makes capture, apply and messaging clients secure-queue users of their queue
(seed 001): each gets an agent of its own name, enabled for its user (the client's
name, or ``messaging.client_users``), and the privilege it needs (ENQUEUE for a
capture, DEQUEUE for an apply or a messaging client). A messaging client (a
``dequeue`` client of the rules file) is also registered as a subscriber of its
multi-consumer queue, so it receives the messages its rule sets then select.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from changeflow.errors import ChangeflowError, ConfigError
from changeflow.messaging import admin
from changeflow.messaging.model import agent_name
from changeflow.pipeline import Pipeline, resolve

if TYPE_CHECKING:
    from changeflow.config import PipelineConfig
    from changeflow.sites import SiteRuntime

log = logging.getLogger(__name__)
_lock = threading.Lock()
_done: dict[int, PipelineConfig] = {}


def site_of(pipeline: PipelineConfig | Pipeline,
            site: str | None = None) -> tuple[str, SiteRuntime]:
    """The site a session connects to (the only one, or the one named), from the run's
    resolved pipeline.

    Raises:
        ConfigError: no site given while several are declared, or an unknown site.
    """
    pipe = resolve(pipeline)
    cfg = pipe.cfg
    if site is None:
        if len(cfg.sites) != 1:
            raise ConfigError(f"the pipeline declares sites {', '.join(cfg.sites)}: say which "
                              "one to connect to (site=...)", file=cfg.source_path)
        site = next(iter(cfg.sites))
    if site not in cfg.sites:
        raise ConfigError(f"unknown site {site!r} (sites: {', '.join(cfg.sites)})",
                          file=cfg.source_path)
    return site, pipe.site(site)


def setup(pipeline: PipelineConfig | Pipeline) -> None:
    """Create what the ``messaging`` section declares and is missing (once per process).

    Takes the run's resolved :class:`~changeflow.pipeline.Pipeline` (or a configuration,
    which it resolves): the sites and queues come from it, not from ``sites`` again.

    Raises:
        ConfigError: naming the file and the key of a bad entry.
    """
    pipe = resolve(pipeline)
    cfg = pipe.cfg
    with _lock:
        if _done.get(id(cfg)) is cfg:
            return
        _Setup(pipe).run()
        _done[id(cfg)] = cfg


def run_config(config_path: str) -> dict[str, dict[str, int]]:
    """One time-manager pass over every site of a pipeline, declared first (for an
    Airflow task).

    Returns the report of each site, by site name.
    """
    from changeflow.config import load_config
    from changeflow.messaging.timemanager import run_once

    pipe = resolve(load_config(config_path))
    setup(pipe)
    return {name: run_once(pipe.site(name).store).as_dict() for name in pipe.cfg.sites}


class _Setup:
    def __init__(self, pipe: Pipeline) -> None:
        self.pipe = pipe
        self.cfg = pipe.cfg
        self.mc = pipe.cfg.messaging
        self.queue_site: dict[str, str] = {}

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, file=self.cfg.source_path, key=f"messaging.{key}")

    def site(self, name: str | None, key: str) -> Any:
        if name is None:
            if len(self.cfg.sites) != 1:
                raise self.error(key, "give the site: the pipeline declares several")
            name = next(iter(self.cfg.sites))
        if name not in self.cfg.sites:
            raise self.error(key, f"unknown site {name!r}")
        return self.pipe.site(name)

    def run(self) -> None:
        self.pipe.open()
        for step in (self.types, self.queue_tables, self.queues, self.streams_queues,
                     self.set_up_queues, self.subscribers, self.agents, self.grants,
                     self.clients):
            step()

    def types(self) -> None:
        for i, t in enumerate(self.mc.types):
            for name in self.cfg.sites:
                try:
                    admin.create_type(self.site(name, f"types.{i}"), t.name, dict(t.fields),
                                      comment=t.comment, if_not_exists=True)
                except ChangeflowError as exc:
                    raise self.error(f"types.{i}", str(exc)) from exc

    def queue_tables(self) -> None:
        self.table_site: dict[str, str] = {}
        for i, qt in enumerate(self.mc.queue_tables):
            rt = self.site(qt.site, f"queue_tables.{i}.site")
            try:
                admin.create_queue_table(
                    rt, qt.name, qt.payload_type, sort_list=qt.sort_order,
                    multiple_consumers=qt.multiple_consumers,
                    message_grouping=qt.message_grouping, secure=qt.secure,
                    comment=qt.comment, if_not_exists=True)
            except ChangeflowError as exc:
                raise self.error(f"queue_tables.{i}", str(exc)) from exc
            self.table_site[qt.name.lower()] = rt.name

    def queues(self) -> None:
        for i, q in enumerate(self.mc.queues):
            site = self.table_site.get(q.queue_table.lower())
            if site is None:
                raise self.error(f"queues.{i}.queue_table",
                                 f"queue table {q.queue_table!r} is not declared in "
                                 "messaging.queue_tables")
            rt = self.site(site, f"queues.{i}")
            try:
                created = admin.create_queue(
                    rt, q.name, q.queue_table, max_retries=q.max_retries,
                    retry_delay=q.retry_delay, retention_time=q.retention_time,
                    comment=q.comment, start=q.started, if_not_exists=True,
                    recreate_dropped=False)
            except ChangeflowError as exc:
                raise self.error(f"queues.{i}", str(exc)) from exc
            if not created and not rt.catalog.exists(q.name):
                log.warning("queue %s@%s was dropped; it is not re-created", q.name, site)
            self.queue_site[q.name.lower()] = site

    def streams_queues(self) -> None:
        """The pipeline's queues, as ``SET_UP_QUEUE`` makes them (unless declared here)."""
        for i, q in enumerate(self.cfg.queues):
            rt = self.site(q.site, f"queues.{i}")
            if not rt.catalog.exists(q.name):
                continue  # dropped: it stays so
            table = rt.catalog.properties(q.name)["queue_table"]
            if table.lower() in self.table_site:
                continue
            try:
                admin.set_up_queue(rt, q.name, table, sort_list=q.sort_order,
                                   multiple_consumers=q.multiple_consumers,
                                   comment="set up for the pipeline (SET_UP_QUEUE)")
            except ChangeflowError as exc:
                raise ConfigError(str(exc), file=self.cfg.source_path,
                                  key=f"queues.{i}") from exc
            self.queue_site.setdefault(q.name.lower(), rt.name)

    def set_up_queues(self) -> None:
        for i, d in enumerate(self.mc.set_up_queues):
            rt = self.site(d.site, f"set_up_queues.{i}.site")
            try:
                admin.set_up_queue(rt, d.queue, d.queue_table,
                                   queue_users=tuple(d.queue_users), comment=d.comment)
            except ChangeflowError as exc:
                raise self.error(f"set_up_queues.{i}", str(exc)) from exc
            self.queue_site.setdefault(d.queue.lower(), rt.name)

    def site_of_queue(self, ref: str, key: str) -> tuple[Any, str]:
        name, _, found = ref.lower().partition("@")
        site: str | None = found
        if not site:
            site = self.queue_site.get(name) or next(
                (q.site for q in self.cfg.queues if q.name == name), None)
        if site is None:
            raise self.error(key, f"unknown queue {ref!r}: declare it in messaging.queues or "
                                  "queues, or write owner.name@site")
        return self.site(site, key), name

    def subscribers(self) -> None:
        for i, s in enumerate(self.mc.subscribers):
            rt, queue = self.site_of_queue(s.queue, f"subscribers.{i}.queue")
            if not rt.catalog.exists(queue):
                continue
            try:
                admin.add_subscriber(rt, queue, s.name, address=s.address, rule=s.rule,
                                     created_by="config", if_not_exists=True)
            except ChangeflowError as exc:
                raise self.error(f"subscribers.{i}", str(exc)) from exc

    def agents(self) -> None:
        for i, a in enumerate(self.mc.agents):
            for name in self.cfg.sites:
                for user in a.users:
                    admin.enable_db_access(self.site(name, f"agents.{i}"), a.name, user)

    def grants(self) -> None:
        for i, g in enumerate(self.mc.grants):
            if g.queue == "*":
                rt, queue = self.site(g.site, f"grants.{i}.site"), "*"
            else:
                rt, queue = self.site_of_queue(g.queue, f"grants.{i}.queue")
                if not rt.catalog.exists(queue):
                    continue
            try:
                admin.grant_queue_privilege(rt, g.privilege, queue, g.grantee,
                                            granted_by="config")
            except ChangeflowError as exc:
                raise self.error(f"grants.{i}", str(exc)) from exc

    def clients(self) -> None:
        """Capture, apply and messaging clients become secure-queue users of their queue."""
        wanted: list[tuple[str, str, str, str]] = []  # (queue ref, agent, user, privilege)
        for cap in self.cfg.captures:
            wanted.append((cap.queue, cap.name, cap.name, "ENQUEUE"))
        for app in self.cfg.applies:
            wanted.append((app.queue, app.name, app.name, "DEQUEUE"))
        for name, client in _messaging_clients(self.cfg):
            user = self.mc.client_users.get(name, name)
            wanted.append((client, name, user, "DEQUEUE"))
            self._client_subscriber(client, name)
        for ref, agent, user, privilege in wanted:
            self._secure_user(ref, agent, user, privilege)

    def _client_subscriber(self, ref: str, name: str) -> None:
        try:
            rt, queue = self.site_of_queue(self.cfg.qualify(ref), "client_users")
        except ConfigError:
            return
        if not rt.catalog.exists(queue):
            return
        props = rt.catalog.properties(queue)
        if props["multiple_consumers"] and props["queue_type"] != "exception":
            admin.add_subscriber(rt, queue, name, kind="messaging_client",
                                 created_by="rules", if_not_exists=True)

    def _secure_user(self, ref: str, agent: str, user: str, privilege: str) -> None:
        from changeflow.messaging import dictionary as D

        try:
            rt, queue = self.site_of_queue(self.cfg.qualify(ref), "clients")
        except ConfigError:
            return
        if not rt.catalog.exists(queue):
            return
        with rt.store.read() as conn:
            secure = D.queue(conn, queue).secure
        if secure:
            admin.enable_db_access(rt, agent, user)
            admin.grant_queue_privilege(rt, privilege, queue, user,
                                        granted_by=f"auto:{agent_name(agent)}")


def _messaging_clients(cfg: PipelineConfig) -> list[tuple[str, str]]:
    """(client name, queue) of the rules file's messaging (``dequeue``) clients."""
    from changeflow.clients import registry

    reg = registry(cfg)
    if reg is None:
        return []
    return [(name, c.queue) for name, c in reg.clients.items()
            if c.type == "dequeue" and c.queue]
