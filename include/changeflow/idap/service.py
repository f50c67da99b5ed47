"""Running IDAP requests against the messaging API, in the caller's HTTP session.

:class:`Service` is independent of HTTP: the ASGI app (:mod:`changeflow.idap.app`)
authenticates, finds the session and hands it the parsed envelope; the service picks
the database user (the first of the agent's users allowed on the queue, seed 003),
decodes payloads against the queue's type, calls ``enqueue_array``/``dequeue_array``/
``register``/``commit``/``rollback`` of that user's messaging session, and builds the
response element. Every check happens before anything is written: a refused request
changes nothing.
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Callable
from typing import Any
from xml.etree.ElementTree import Element

from changeflow.errors import SecurityError
from changeflow.idap import model as M
from changeflow.idap import payloads as XP
from changeflow.idap.auth import Users
from changeflow.idap.config import IdapConfig
from changeflow.idap.errors import InvalidRequestError
from changeflow.idap.lookups import Lookups
from changeflow.idap.messages import message_set_element
from changeflow.idap.render import response, result
from changeflow.idap.sessions import HttpSession
from changeflow.idap.xmlns import q
from changeflow.messaging import admin, cache, privileges
from changeflow.messaging import dictionary as D
from changeflow.messaging.model import MessageProperties, agent_name
from changeflow.state import StateStore
from changeflow.state import schema_messaging as S

log = logging.getLogger(__name__)
#: Seconds a messaging lock outlives the IDAP idle timeout (the reaper rolls back first).
LOCK_MARGIN = 30.0


class Service:
    """The IDAP operations of one site.

    Args:
        target: the pipeline configuration (its ``site``), or a bare state store.
        cfg: the ``idap`` section.
        users: the configured agents.
        site: the site served (default: ``cfg.site``, or the only one).
    """

    def __init__(self, target: Any, cfg: IdapConfig, users: Users,
                 site: str | None = None) -> None:
        from changeflow.config import PipelineConfig

        self.site: str | None
        self.cfg = cfg
        self.users = users
        self.target = target
        self.catalog = None
        if isinstance(target, PipelineConfig):
            from changeflow.messaging.declare import setup, site_of

            self.site, rt = site_of(target, site or cfg.site)
            setup(target)
            self.store: StateStore = rt.store
            self.catalog = rt.catalog
        else:
            self.site = site
            self.store = target if isinstance(target, StateStore) else StateStore(str(target))
        self._transforms = {k: self._load(k, v) for k, v in cfg.transformations.items()}
        self.lookups = Lookups(self.store)

    @staticmethod
    def _load(name: str, spec: str) -> Callable[[Any], Any]:
        module, _, attr = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            from changeflow.errors import ConfigError

            raise ConfigError(f"transformation {name}: cannot import {spec!r}: {exc}",
                              key=f"idap.transformations.{name}") from exc
        return fn  # type: ignore[no-any-return]

    # -- sessions and users ------------------------------------------------------------------
    def _session(self, http: HttpSession, user: str) -> Any:
        found = http.sessions.get(user)
        if found is None:
            from changeflow.messaging.opening import connect

            found = connect(self.target, user, site=self.site,
                            lock_timeout=self.cfg.idle_timeout + LOCK_MARGIN)
            http.sessions[user] = found
        return found

    def candidates(self, agent: str) -> list[str]:
        """The database users an agent may act as, in order (seed 003's mapping)."""
        return self.lookups.users(agent, lambda: self._candidates(agent))

    def _candidates(self, agent: str) -> list[str]:
        from sqlalchemy import select

        t = S.agents
        with self.store.read() as conn:
            enabled = [r[0] for r in conn.execute(
                select(t.c.db_user).where(t.c.agent == agent_name(agent))
                .order_by(t.c.db_user))]
        users = [agent_name(u) for u in self.users.db_users(agent)] + enabled
        return list(dict.fromkeys(users)) or [agent_name(agent)]

    def user_for(self, http: HttpSession, props: D.QueueProps, privilege: str,
                 acting: str | None) -> str:
        """The first user of the agent allowed to ``privilege`` on the queue.

        Raises:
            SecurityError: none of them is (naming the agent, the users and the queue).
        """
        users = self.candidates(http.agent)
        if not props.secure:
            return next((u for u in users if u in http.sessions), users[0])
        agent = agent_name(acting) if acting else None
        errors = []
        with self.store.read() as conn:
            for user in users:
                try:
                    privileges.check(conn, props, user, privilege, agent)
                    return user
                except SecurityError as exc:
                    errors.append(str(exc))
        raise SecurityError(
            f"agent {http.agent} may not {privilege.lower()} on secure queue {props.name}: "
            f"none of its users ({', '.join(users)}) may ({errors[0]})")

    def _props(self, dest: M.Destination) -> D.QueueProps:
        return self.lookups.props(dest.name)

    # -- dispatch ----------------------------------------------------------------------------
    def handle(self, env: M.Envelope, http: HttpSession) -> Element:
        """Run a parsed request in the session; returns the ``*Response`` element."""
        req = env.request
        self.lookups.begin()
        if env.propagation is not None and env.propagation.kind == "batch":
            from changeflow.idap.inbound import receive_batch

            return receive_batch(self, env, http)
        if isinstance(req, M.Enqueue):
            return self.enqueue(req, http, propagated=env.propagation is not None)
        if isinstance(req, M.Receive):
            return self.receive(req, http)
        if isinstance(req, M.Register):
            return self.register(req, http)
        if isinstance(req, M.Commit):
            from changeflow.idap.inbound import commit_batch

            commit_batch(self, http)
            http.commit()
            return response(M.RESPONSES[M.COMMIT])
        http.rollback()
        return response(M.RESPONSES[M.ROLLBACK])

    def _transform(self, name: str | None, path: str) -> Callable[[Any], Any] | None:
        if name is None:
            return None
        fn = self._transforms.get(name)
        if fn is None:
            raise InvalidRequestError(
                f"{path}/transformation {name!r} is not declared (idap.transformations: "
                f"{', '.join(self._transforms) or 'none'})")
        return fn

    def _commit_now(self, http: HttpSession, user: str) -> bool:
        """Whether the user's session may commit in its own call (nothing else pending)."""
        return not http.extra and not any(
            s.in_transaction for u, s in http.sessions.items() if u != user)

    def enqueue(self, req: M.Enqueue, http: HttpSession, *, propagated: bool = False
                ) -> Element:
        """``AQXmlSend``/``AQXmlPublish``: check, decode, enqueue (commit if asked).

        A propagation (its header present) may use either request on either kind of
        queue: it cannot know the remote queue's kind.
        """
        props = self._props(req.destination)
        if propagated:
            pass
        elif req.op == M.SEND and props.multiple_consumers:
            raise InvalidRequestError(f"queue {props.name} has multiple consumers (a topic): "
                                      "publish to it with AQXmlPublish")
        if req.op == M.PUBLISH and not props.multiple_consumers:
            raise InvalidRequestError(f"queue {props.name} has a single consumer: send to it "
                                      "with AQXmlSend")
        fn = self._transform(req.transformation, f"{req.op}/producer_options")
        with cache.LazyRead(self.store) as conn:  # a cached type opens no transaction
            qtype = D.message_type(conn, self.store.url, props.payload_type)  # type: ignore[arg-type]

        def lookup(name: str) -> Any:
            return admin.message_type(self.store, name)

        decoded = []
        for m in req.messages:
            path = f"{req.op}/message_set/message[{m.number}]/message_payload"
            payload, type_name = XP.decode(m.payload, qtype, path, lookup)
            decoded.append((fn(payload) if fn else payload, type_name,
                            MessageProperties.of(m.properties)))
        senders = {p.sender.name for _, _, p in decoded if p.sender is not None}
        user = self.user_for(http, props, "ENQUEUE", next(iter(senders)) if len(senders) == 1
                             else None)
        session = self._session(http, user)
        groups: list[tuple[str | None, list[Any], list[MessageProperties]]] = []
        for payload, type_name, mp in decoded:
            if not groups or groups[-1][0] != type_name:
                groups.append((type_name, [], []))
            groups[-1][1].append(payload)
            groups[-1][2].append(mp)
        one_call = req.commit and len(groups) == 1 and self._commit_now(http, user)
        ids: list[str] = []
        for type_name, payloads, plist in groups:
            ids += session.enqueue_array(props.name, payloads, plist, type_name=type_name,
                                         visibility=req.visibility, commit=one_call)
        if req.commit and not one_call:
            http.commit()
        out = response(M.RESPONSES[req.op])
        result(out, "send_result" if req.op == M.SEND else "publish_result",
               req.destination.name, ids)
        return out

    def receive(self, req: M.Receive, http: HttpSession) -> Element:
        """``AQXmlReceive``: up to ``batch_size`` messages (waiting at most ``max_wait_time``)."""
        props = self._props(req.destination)
        path = f"{M.RECEIVE}/consumer_options"
        _check_consumer(props, req.consumer_name, path)
        fn = self._transform(req.transformation, path)
        wait = self.cfg.max_wait_time if req.wait_time is None \
            else min(req.wait_time, self.cfg.max_wait_time)
        user = self.user_for(http, props, "DEQUEUE", req.consumer_name)
        session = self._session(http, user)
        one_call = req.commit and self._commit_now(http, user)
        sel = req.selector
        msgs = session.dequeue_array(
            props.name, req.batch_size, consumer=req.consumer_name, mode=req.dequeue_mode,
            navigation=req.navigation_mode, wait=wait if math.isfinite(wait) else None,
            correlation=sel.get("correlation"), msg_id=sel.get("message_id"),
            condition=sel.get("condition"), visibility=req.visibility, commit=one_call)
        if req.commit and not one_call:
            http.commit()
        if fn is not None:
            from dataclasses import replace

            msgs = [replace(m, payload=fn(m.payload)) for m in msgs]
        out = response(M.RESPONSES[M.RECEIVE])
        rr = Element(q("receive_result"))
        out.append(rr)
        dest = Element(q("destination"))
        dest.text = req.destination.name
        rr.append(dest)
        message_set_element(rr, msgs)
        return out

    def register(self, req: M.Register, http: HttpSession) -> Element:
        """``AQXmlRegister``: store the registration; the notifier delivers it."""
        props = self._props(req.destination)
        path = f"{M.REGISTER}/register_options"
        _check_consumer(props, req.consumer_name, path)
        user = self.user_for(http, props, "DEQUEUE", req.consumer_name)
        self._session(http, user).register(props.name, req.notify_url,
                                           consumer=req.consumer_name)
        return response(M.RESPONSES[M.REGISTER])


def _check_consumer(props: D.QueueProps, consumer: str | None, path: str) -> None:
    """A consumer name is given exactly when the queue has multiple consumers.

    Raises:
        InvalidRequestError: naming the element at ``path`` and the queue.
    """
    if props.multiple_consumers and not consumer:
        raise InvalidRequestError(f"{path}/consumer_name is required: queue {props.name} "
                                  "has multiple consumers")
    if not props.multiple_consumers and consumer:
        raise InvalidRequestError(f"{path}/consumer_name must not be given: queue "
                                  f"{props.name} has a single consumer")
