"""Administration of who may use a queue: subscribers and their rules, privileges, agents.

Like ``DBMS_AQADM.ADD_SUBSCRIBER``, ``GRANT_QUEUE_PRIVILEGE``, ``ENABLE_DB_ACCESS``;
re-exported by :mod:`changeflow.messaging.admin`. Each call raises the dictionary
version, so sessions in every process see the change at their next enqueue or dequeue.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update

from changeflow.messaging import conditions as C
from changeflow.messaging import dictionary as D
from changeflow.messaging import privileges
from changeflow.messaging import types as T
from changeflow.messaging.admin.base import Target
from changeflow.messaging.admin.base import changes as _changes
from changeflow.messaging.admin.base import store_of as _store
from changeflow.messaging.constants import LIVE_STATES
from changeflow.messaging.errors import AlreadyExistsError, MessagePropertyError, MessagingError
from changeflow.messaging.model import agent_name, queue_name
from changeflow.state import schema_messaging as S
from changeflow.state import utcnow

M = S.messages


# -- subscribers ---------------------------------------------------------------------------
@_changes
def add_subscriber(target: Target, queue: str, name: str | None = None, *,
                   address: str | None = None, rule: str | None = None,
                   kind: str = "subscriber", created_by: str | None = None,
                   if_not_exists: bool = False) -> None:
    """``DBMS_AQADM.ADD_SUBSCRIBER``: a (local or remote) subscriber with an optional rule.

    Args:
        name: the agent; may be empty for a remote subscriber, which then stands for
            the remote queue itself (seed 002, case 1).
        address: ``owner.queue@site`` of a remote subscriber; messages for it wait
            in this queue until the propagation to that queue carries them.
        rule: a condition over message properties and payload fields (``priority <
            3 AND tab.user_data.region = 'WEST'``), checked now with its position.
        kind: ``subscriber``, or ``messaging_client`` (its rule sets come from the
            rules file and are applied when it dequeues).
    """
    qname, agent = queue_name(queue), agent_name(name)
    addr = queue_name(address) if address else ""
    if not agent and not addr:
        raise MessagePropertyError("a subscriber needs a name, an address or both")
    if kind not in ("subscriber", "messaging_client"):
        raise MessagePropertyError(f"subscriber kind {kind!r}: use subscriber or "
                                   "messaging_client")
    store = _store(target)
    t = S.subscribers
    with store.begin() as conn:
        props = D.queue(conn, qname)
        if not props.multiple_consumers or props.is_exception:
            raise MessagePropertyError(
                f"queue {qname} has a single consumer: subscribers are for multi-consumer "
                "queues")
        if rule:
            qtype = D.message_type(conn, store.url, props.payload_type)
            C.compile_condition(rule, qtype.field_names if qtype.kind == T.OBJECT else None)
        found = conn.execute(select(t.c.rule).where(t.c.queue == qname, t.c.name == agent,
                                                    t.c.address == addr)).first()
        if found is not None:
            if if_not_exists:
                return
            raise AlreadyExistsError(f"{agent or addr} is already a subscriber of {qname}")
        conn.execute(t.insert().values(queue=qname, name=agent, address=addr, rule=rule or None,
                                       kind=kind, created_by=created_by, created_at=utcnow()))


@_changes
def alter_subscriber(target: Target, queue: str, name: str | None, *,
                     address: str | None = None, rule: str | None = None) -> None:
    """``DBMS_AQADM.ALTER_SUBSCRIBER``: change a subscriber's rule (None: no rule)."""
    qname, agent = queue_name(queue), agent_name(name)
    addr = queue_name(address) if address else ""
    store = _store(target)
    t = S.subscribers
    with store.begin() as conn:
        props = D.queue(conn, qname)
        if rule:
            qtype = D.message_type(conn, store.url, props.payload_type)
            C.compile_condition(rule, qtype.field_names if qtype.kind == T.OBJECT else None)
        done = conn.execute(update(t).where(t.c.queue == qname, t.c.name == agent,
                                            t.c.address == addr).values(rule=rule or None))
        if not done.rowcount:
            raise MessagingError(f"{agent or addr} is not a subscriber of {qname}")


@_changes
def remove_subscriber(target: Target, queue: str, name: str | None, *,
                      address: str | None = None) -> int:
    """``DBMS_AQADM.REMOVE_SUBSCRIBER``. Returns the waiting messages it had, now removed."""
    qname, agent = queue_name(queue), agent_name(name)
    addr = queue_name(address) if address else ""
    t = S.subscribers
    with _store(target).begin() as conn:
        D.queue(conn, qname)
        done = conn.execute(delete(t).where(t.c.queue == qname, t.c.name == agent,
                                            t.c.address == addr))
        if not done.rowcount:
            raise MessagingError(f"{agent or addr} is not a subscriber of {qname}")
        dropped = conn.execute(delete(M).where(
            M.c.queue == qname, M.c.consumer == agent, M.c.address == addr,
            M.c.state.in_(LIVE_STATES), M.c.lock_txn.is_(None)))
    return int(dropped.rowcount or 0)


# -- access --------------------------------------------------------------------------------
@_changes
def grant_queue_privilege(target: Target, privilege: str, queue: str, grantee: str, *,
                          grant_option: bool = False, granted_by: str | None = None) -> None:
    """``DBMS_AQADM.GRANT_QUEUE_PRIVILEGE`` (ENQUEUE, DEQUEUE or ALL; queue ``*``: all)."""
    qname = "*" if queue == "*" else queue_name(queue)
    with _store(target).begin() as conn:
        if qname != "*":
            D.queue(conn, qname)
        privileges.grant(conn, privilege, qname, agent_name(grantee), grant_option=grant_option,
                         granted_by=granted_by)


@_changes
def revoke_queue_privilege(target: Target, privilege: str, queue: str, grantee: str) -> int:
    """``DBMS_AQADM.REVOKE_QUEUE_PRIVILEGE``. Returns the privileges removed."""
    qname = "*" if queue == "*" else queue_name(queue)
    with _store(target).begin() as conn:
        return privileges.revoke(conn, privilege, qname, agent_name(grantee))


@_changes
def enable_db_access(target: Target, agent: str, user: str) -> bool:
    """``DBMS_AQADM.ENABLE_DB_ACCESS``: let a user act as an agent on secure queues."""
    with _store(target).begin() as conn:
        return privileges.enable_db_access(conn, agent_name(agent), agent_name(user))


@_changes
def disable_db_access(target: Target, agent: str, user: str) -> bool:
    """``DBMS_AQADM.DISABLE_DB_ACCESS``."""
    with _store(target).begin() as conn:
        return privileges.disable_db_access(conn, agent_name(agent), agent_name(user))
