"""Secure queues: queue privileges and the agents each user may act as (DBMS_AQADM).

On a *secure* queue (seed 001), an enqueue or dequeue is allowed only when:

* the session's user owns the queue (the schema before the dot), or has been granted
  the privilege (``ENQUEUE``, ``DEQUEUE``; ``ALL`` grants both) on the queue or on
  every queue (``*``); and
* the agent it acts as (the sender of an enqueue, the consumer of a dequeue from a
  multi-consumer queue) is the user itself or an agent enabled for the user
  (``enable_db_access``).

Queues that are not secure take no check (the embedded default is one trusted user).
Capture, apply and messaging clients become secure-queue users of their queue
automatically (:mod:`changeflow.messaging.declare`): an agent of the client's name,
enabled for its user, with the privilege it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection

from changeflow.errors import SecurityError
from changeflow.messaging.dictionary import QueueProps
from changeflow.messaging.errors import MessagePropertyError
from changeflow.state import insert_if_absent, utcnow
from changeflow.state import schema_messaging as S

PRIV = S.privileges
AGENTS = S.agents


def privilege_names(privilege: str) -> tuple[str, ...]:
    """``ENQUEUE``/``DEQUEUE``/``ALL`` as the rows it stands for.

    >>> privilege_names("all")
    ('ENQUEUE', 'DEQUEUE')
    """
    p = str(privilege).strip().upper()
    if p == "ALL":
        return ("ENQUEUE", "DEQUEUE")
    if p not in ("ENQUEUE", "DEQUEUE"):
        raise MessagePropertyError(f"unknown privilege {privilege!r}: use ENQUEUE, DEQUEUE or ALL")
    return (p,)


def check(conn: Connection, props: QueueProps, user: str | None, privilege: str,
          agent: str | None = None) -> None:
    """Refuse an operation on a secure queue that the user may not perform.

    Raises:
        SecurityError: naming the user, the queue, the privilege or the agent.
    """
    if not props.secure:
        return
    what = privilege.lower()
    if not user:
        raise SecurityError(
            f"queue {props.name} is secure: a {what} needs a user (connect(..., user=...)) "
            f"with the {privilege} privilege on it")
    if user != props.owner:
        found = conn.execute(select(PRIV.c.grantee).where(
            PRIV.c.queue.in_((props.name, "*")), PRIV.c.grantee == user,
            PRIV.c.privilege == privilege)).first()
        if found is None:
            raise SecurityError(
                f"user {user} has no {privilege} privilege on secure queue {props.name}; "
                f"grant it with `changeflow aq grant {what} {props.name} {user}`")
    if agent and agent != user:
        mapped = conn.execute(select(AGENTS.c.agent).where(
            AGENTS.c.agent == agent, AGENTS.c.db_user == user)).first()
        if mapped is None:
            raise SecurityError(
                f"agent {agent} is not enabled for user {user} on secure queue {props.name}; "
                f"enable it with `changeflow aq enable-db-access {agent} {user}`")


def grant(conn: Connection, privilege: str, queue: str, grantee: str, *,
          grant_option: bool = False, granted_by: str | None = None) -> int:
    """Grant a privilege (idempotent). Returns the number of rows added."""
    added = 0
    for p in privilege_names(privilege):  # several processes may apply one config at once
        added += insert_if_absent(conn, PRIV, {
            "queue": queue, "grantee": grantee, "privilege": p, "grant_option": grant_option,
            "granted_by": granted_by, "granted_at": utcnow()})
    return added


def revoke(conn: Connection, privilege: str, queue: str, grantee: str) -> int:
    """Revoke a privilege. Returns the number of rows removed."""
    names = privilege_names(privilege)
    done = conn.execute(delete(PRIV).where(PRIV.c.queue == queue, PRIV.c.grantee == grantee,
                                           PRIV.c.privilege.in_(names)))
    return int(done.rowcount or 0)


def enable_db_access(conn: Connection, agent: str, user: str) -> bool:
    """Let ``user`` act as ``agent`` (idempotent). Returns whether it was new."""
    return insert_if_absent(conn, AGENTS, {"agent": agent, "db_user": user,
                                           "created_at": utcnow()})


def disable_db_access(conn: Connection, agent: str, user: str) -> bool:
    """Stop ``user`` acting as ``agent``. Returns whether it was enabled."""
    done = conn.execute(delete(AGENTS).where(AGENTS.c.agent == agent, AGENTS.c.db_user == user))
    return bool(done.rowcount)


@dataclass(frozen=True)
class Grant:
    """One privilege row."""

    queue: str
    grantee: str
    privilege: str
    grant_option: bool
    granted_by: str | None


def grants(conn: Connection, queue: str | None = None) -> list[Grant]:
    """Privileges, of one queue or all."""
    stmt = select(PRIV).order_by(PRIV.c.queue, PRIV.c.grantee, PRIV.c.privilege)
    if queue is not None:
        stmt = stmt.where(PRIV.c.queue == queue)
    return [Grant(r.queue, r.grantee, r.privilege, bool(r.grant_option), r.granted_by)
            for r in conn.execute(stmt)]


def agent_users(conn: Connection) -> list[tuple[str, str]]:
    """Every (agent, user) pair enabled."""
    return [(r.agent, r.db_user) for r in
            conn.execute(select(AGENTS).order_by(AGENTS.c.agent, AGENTS.c.db_user))]
