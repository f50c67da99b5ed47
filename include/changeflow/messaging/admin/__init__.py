"""Administration, like Oracle's ``DBMS_AQADM``: queue tables, queues, types, subscribers, access.

Every function takes the site to act on (a :class:`~changeflow.state.StateStore`, a
:class:`~changeflow.queues.catalog.QueueCatalog` or a site runtime) and either does
all it is asked or raises and changes nothing. Queues are rows of the queue catalog,
its single owner; queue tables add their own properties; each queue table has an
exception queue ``owner.aq$_<table>_e``.

A queue is created *stopped*, as in Oracle: :func:`start_queue` enables enqueue and
dequeue (``create_queue(..., start=True)`` does both at once).

>>> from changeflow.state import StateStore
>>> store = StateStore("sqlite://")
>>> create_queue_table(store, "oe.orders_qt", "RAW", sort_list="priority,enq_time",
...                    multiple_consumers=True)
True
>>> create_queue(store, "oe.orders", "oe.orders_qt", max_retries=2, start=True)
True
>>> add_subscriber(store, "oe.orders", "shipping", rule="priority <= 2")
>>> drop_queue_table(store, "oe.orders_qt")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.messaging.errors.MessagingError: queue table oe.orders_qt still has queues oe.orders; ...
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from changeflow.errors import QueueDroppedError
from changeflow.messaging import dictionary as D
from changeflow.messaging import types as T
from changeflow.messaging.admin.agents import add_subscriber as add_subscriber
from changeflow.messaging.admin.agents import alter_subscriber as alter_subscriber
from changeflow.messaging.admin.agents import disable_db_access as disable_db_access
from changeflow.messaging.admin.agents import enable_db_access as enable_db_access
from changeflow.messaging.admin.agents import grant_queue_privilege as grant_queue_privilege
from changeflow.messaging.admin.agents import remove_subscriber as remove_subscriber
from changeflow.messaging.admin.agents import revoke_queue_privilege as revoke_queue_privilege
from changeflow.messaging.admin.base import Target as Target
from changeflow.messaging.admin.base import catalog as catalog
from changeflow.messaging.admin.base import changes as _changes
from changeflow.messaging.admin.base import store_of as _store
from changeflow.messaging.constants import MESSAGE_GROUPING, sort_order
from changeflow.messaging.errors import (
    AlreadyExistsError,
    MessagePropertyError,
    MessagingError,
)
from changeflow.messaging.model import queue_name
from changeflow.state import schema, utcnow
from changeflow.state import schema_messaging as S

Q = schema.queues
QT = S.queue_tables
M = S.messages


# -- message types ------------------------------------------------------------------------
@_changes
def create_type(target: Target, name: str, fields: dict[str, str] | list[tuple[str, str]], *,
                comment: str | None = None, if_not_exists: bool = False) -> T.TypeDef:
    """``CREATE TYPE name AS OBJECT (field type, ...)``: a typed payload for queue tables.

    Raises:
        AlreadyExistsError: a type of that name exists with other fields (or at all,
            unless ``if_not_exists``); PayloadTypeError: a bad field type.
    """
    tdef = T.TypeDef.object(name, fields)
    if T.builtin(tdef.name) is not None:
        raise AlreadyExistsError(f"{tdef.name} is a built-in type")
    t = S.message_types
    with _store(target).begin() as conn:
        row = conn.execute(select(t).where(t.c.name == tdef.name)).first()
        if row is not None:
            existing = T.from_row(row.name, row.kind, row.fields_json)
            if if_not_exists and existing == tdef:
                return existing
            raise AlreadyExistsError(
                f"type {tdef.name} exists already with fields "
                f"{', '.join(f'{n} {ft}' for n, ft in existing.fields)}")
        conn.execute(t.insert().values(name=tdef.name, kind=tdef.kind,
                                       fields_json=T.fields_json(tdef), comment=comment,
                                       created_at=utcnow()))
    return tdef


@_changes
def drop_type(target: Target, name: str) -> None:
    """``DROP TYPE``; refused while a queue table or a message uses the type."""
    canonical = T.canonical_type_name(name)
    store = _store(target)
    t = S.message_types
    with store.begin() as conn:
        if conn.execute(select(t.c.name).where(t.c.name == canonical)).first() is None:
            raise T.unknown_type(name, [r[0] for r in conn.execute(select(t.c.name))])
        users = [r[0] for r in conn.execute(select(Q.c.name).where(
            Q.c.payload_type == canonical, Q.c.status != "dropped"))]
        used = conn.execute(select(M.c.id).where(M.c.msg_type == canonical).limit(1)).first()
        if users or used:
            raise MessagingError(
                f"type {canonical} is in use by "
                + (f"queues {', '.join(users)}" if users else "stored messages"))
        conn.execute(delete(t).where(t.c.name == canonical))
    D.TYPES.forget(store.url, canonical)


# -- queue tables --------------------------------------------------------------------------
@_changes
def create_queue_table(target: Target, queue_table: str, payload_type: str, *,
                       sort_list: str = "enq_time", multiple_consumers: bool = False,
                       message_grouping: str = "none", secure: bool = False,
                       comment: str | None = None, if_not_exists: bool = False) -> bool:
    """``DBMS_AQADM.CREATE_QUEUE_TABLE``, and its exception queue ``aq$_<table>_e``.

    Args:
        payload_type: RAW, a declared object type, SYS.ANYDATA or a JMS type.
        sort_list: enq_time (default), priority, commit_time, priority,enq_time or
            priority,commit_time.
        message_grouping: none or transactional (needed by NEXT_TRANSACTION).

    Returns:
        Whether it was created (False: it existed and ``if_not_exists`` was given).
    """
    name = queue_name(queue_table)
    order = sort_order(sort_list)
    grouping = str(message_grouping).lower()
    if grouping not in MESSAGE_GROUPING:
        raise MessagePropertyError(f"message_grouping must be none or transactional, not "
                                   f"{message_grouping!r}")
    cat = catalog(target)
    with cat.store.begin() as conn:
        ptype = D.message_type(conn, cat.store.url, payload_type)
        if conn.execute(select(QT.c.name).where(QT.c.name == name)).first() is not None:
            if if_not_exists:
                return False
            raise AlreadyExistsError(f"queue table {name} exists already")
        conn.execute(QT.insert().values(
            name=name, payload_type=ptype.name, sort_order=order,
            multiple_consumers=multiple_consumers, message_grouping=grouping, secure=secure,
            comment=comment, created_at=utcnow()))
    exq = D.exception_queue_name(name)
    cat.create_queue(exq, queue_table=name, sort_order=order,
                     multiple_consumers=multiple_consumers, recreate_dropped=True,
                     queue_type="exception", payload_type=ptype.name, secure=secure,
                     max_retries=0, enqueue_enabled=False, dequeue_enabled=False,
                     comment=f"exception queue of queue table {name}")
    return True


@_changes
def alter_queue_table(target: Target, queue_table: str, *, comment: str | None = None) -> None:
    """``DBMS_AQADM.ALTER_QUEUE_TABLE`` (the comment)."""
    name = queue_name(queue_table)
    with _store(target).begin() as conn:
        _queue_table(conn, name)
        conn.execute(update(QT).where(QT.c.name == name).values(comment=comment))


def _queue_table(conn: Connection, name: str) -> Any:
    row = conn.execute(select(QT).where(QT.c.name == name)).first()
    if row is None:
        raise MessagingError(f"queue table {name} does not exist")
    return row


@_changes
def drop_queue_table(target: Target, queue_table: str, *, force: bool = False) -> list[str]:
    """``DBMS_AQADM.DROP_QUEUE_TABLE``. Returns the queues dropped with it.

    Refused while it has queues (other than its exception queue) unless ``force``,
    which drops them, and their messages, first.
    """
    name = queue_name(queue_table)
    cat = catalog(target)
    exq = D.exception_queue_name(name)
    with cat.store.read() as conn:
        _queue_table(conn, name)
        queues = [r[0] for r in conn.execute(select(Q.c.name).where(
            Q.c.queue_table == name, Q.c.status != "dropped", Q.c.name != exq))]
    if queues and not force:
        raise MessagingError(
            f"queue table {name} still has queues {', '.join(queues)}; drop them first, or "
            "drop the queue table with force")
    for q in [*queues, exq]:
        if cat.exists(q):
            drop_queue(cat, q, force=force)
    with cat.store.begin() as conn:
        conn.execute(delete(QT).where(QT.c.name == name))
    return queues


# -- queues -------------------------------------------------------------------------------
#: ``DBMS_AQADM.CREATE_QUEUE``'s queue types, and the catalog's names for them.
QUEUE_TYPES = {"NORMAL_QUEUE": "normal", "NORMAL": "normal",
               "EXCEPTION_QUEUE": "exception", "EXCEPTION": "exception"}


def _check_numbers(**values: float | int | None) -> None:
    for key, value in values.items():
        if value is not None and (value < 0 or value != value):
            raise MessagePropertyError(f"{key} must be >= 0, not {value!r}")


@_changes
def create_queue(target: Target, queue: str, queue_table: str, *, max_retries: int = 5,
                 retry_delay: float = 0.0, retention_time: float = 0.0,
                 comment: str | None = None, start: bool = False,
                 if_not_exists: bool = False, recreate_dropped: bool = True,
                 queue_type: str = "NORMAL_QUEUE") -> bool:
    """``DBMS_AQADM.CREATE_QUEUE`` in a queue table (created stopped unless ``start``).

    Args:
        queue_type: ``NORMAL_QUEUE`` (default) or ``EXCEPTION_QUEUE``: a user exception
            queue, which messages of the queue table's payload type may name as their
            ``exception_queue``. It never takes enqueues; ``start`` (or
            :func:`start_queue`) enables its dequeues.
        max_retries: rollbacks of a REMOVE dequeue before the message goes to the
            exception queue.
        retry_delay: seconds a rolled-back message waits before it is dequeued again.
        retention_time: seconds a consumed message is kept (PROCESSED).
        recreate_dropped: an explicit create brings a dropped queue back (the
            declarative setup passes False: nothing re-creates a queue unasked).

    Returns:
        Whether it was created.
    """
    name, qt_name = queue_name(queue), queue_name(queue_table)
    _check_numbers(max_retries=max_retries, retry_delay=retry_delay,
                   retention_time=retention_time)
    kind = QUEUE_TYPES.get(str(queue_type).strip().upper())
    if kind is None:
        raise MessagePropertyError(f"queue_type must be NORMAL_QUEUE or EXCEPTION_QUEUE, not "
                                   f"{queue_type!r}")
    cat = catalog(target)
    with cat.store.read() as conn:
        qt = _queue_table(conn, qt_name)
        row = conn.execute(select(Q.c.status).where(Q.c.name == name)).first()
    if row is not None and (row.status != "dropped" or not recreate_dropped):
        if if_not_exists:
            return False
        if row.status == "dropped":
            raise QueueDroppedError(f"queue {name} was dropped; it is not re-created")
        raise AlreadyExistsError(f"queue {name} exists already")
    return cat.create_queue(
        name, queue_table=qt_name, sort_order=qt.sort_order,
        multiple_consumers=qt.multiple_consumers, recreate_dropped=recreate_dropped,
        queue_type=kind, payload_type=qt.payload_type, secure=qt.secure,
        max_retries=int(max_retries), retry_delay=float(retry_delay),
        retention_time=float(retention_time), comment=comment,
        enqueue_enabled=start and kind == "normal", dequeue_enabled=start)


@_changes
def alter_queue(target: Target, queue: str, *, max_retries: int | None = None,
                retry_delay: float | None = None, retention_time: float | None = None,
                comment: str | None = None) -> None:
    """``DBMS_AQADM.ALTER_QUEUE``: change retries, retry delay, retention or comment."""
    _check_numbers(max_retries=max_retries, retry_delay=retry_delay,
                   retention_time=retention_time)
    changes = {k: v for k, v in (("max_retries", max_retries), ("retry_delay", retry_delay),
                                 ("retention_time", retention_time), ("comment", comment))
               if v is not None}
    catalog(target).alter_queue(queue_name(queue), **changes)


@_changes
def start_queue(target: Target, queue: str, *, enqueue: bool = True,
                dequeue: bool = True) -> None:
    """``DBMS_AQADM.START_QUEUE``: enable enqueue and/or dequeue.

    An exception queue only ever takes dequeues (its ``enqueue`` is ignored).
    """
    name = queue_name(queue)
    cat = catalog(target)
    props = cat.properties(name)
    if props["status"] == "dropped":
        raise QueueDroppedError(f"queue {name} was dropped")
    changes: dict[str, bool] = {}
    if enqueue and props["queue_type"] != "exception":
        changes["enqueue_enabled"] = True
    if dequeue:
        changes["dequeue_enabled"] = True
    cat.alter_queue(name, **changes)


@_changes
def stop_queue(target: Target, queue: str, *, enqueue: bool = True,
               dequeue: bool = True) -> None:
    """``DBMS_AQADM.STOP_QUEUE``: disable enqueue and/or dequeue."""
    changes = {k: False for k, on in (("enqueue_enabled", enqueue),
                                      ("dequeue_enabled", dequeue)) if on}
    catalog(target).alter_queue(queue_name(queue), **changes)


@_changes
def drop_queue(target: Target, queue: str, *, force: bool = False) -> int:
    """``DBMS_AQADM.DROP_QUEUE``. Returns the LCR batches dropped with it.

    Refused while the queue holds messages (LCR batches or user messages) unless
    ``force``. The queue stays in the catalog as dropped: nothing re-creates it unasked,
    and a propagation into it marks its messages UNDELIVERABLE. Its subscribers,
    privileges and registrations go with it.
    """
    name = queue_name(queue)
    cat = catalog(target)
    batches = cat.drop_queue(name, force=force)
    with cat.store.begin() as conn:
        for t, col in ((S.subscribers, "queue"), (S.privileges, "queue"),
                       (S.registrations, "queue")):
            conn.execute(delete(t).where(t.c[col] == name))
    _delete_batch_files([b.path for b in batches])
    from changeflow.messaging import buffered

    buffered.forget(cat.store, name)
    return len(batches)


def _delete_batch_files(paths: list[str]) -> None:
    import shutil

    from changeflow.fs import local_path

    for p in paths:
        local = local_path(p)
        if local:
            shutil.rmtree(local, ignore_errors=True)


# -- the exception queue -------------------------------------------------------------------
def requeue(target: Target, queue: str, msg_ids: list[str] | None = None) -> int:
    """Put messages of an exception queue back into their original queue, READY again.

    Args:
        queue: the exception queue (or any queue holding EXPIRED/UNDELIVERABLE rows).
        msg_ids: which messages (None: all of them).

    Returns:
        The deliveries re-enqueued (retry count reset, a fresh expiration window).
    """
    from changeflow.messaging.exceptions import requeue as _requeue

    return _requeue(_store(target), queue_name(queue), msg_ids)


def delete_exceptions(target: Target, queue: str, msg_ids: list[str] | None = None) -> int:
    """Delete messages from an exception queue (None: all). Returns the rows deleted."""
    from changeflow.messaging.exceptions import delete_messages

    return delete_messages(_store(target), queue_name(queue), msg_ids)


def run_time_manager(target: Target) -> dict[str, int]:
    """One pass of the time manager on this site (see :mod:`.timemanager`)."""
    from changeflow.messaging.timemanager import run_once

    return run_once(_store(target)).as_dict()


# -- reading the dictionary ----------------------------------------------------------------
def queue_properties(target: Target, queue: str) -> D.QueueProps:
    """A queue's properties (payload type, sort order, consumers, security, state).

    Raises:
        QueueNotFoundError, QueueDroppedError: no such queue.
    """
    with _store(target).read() as conn:
        return D.queue(conn, queue_name(queue))


def message_type(target: Target, name: str) -> T.TypeDef:
    """A message type (built in or declared): its kind and fields, e.g. to map XML payloads.

    Raises:
        UnknownTypeError: no such type.
    """
    store = _store(target)
    with store.read() as conn:
        return D.message_type(conn, store.url, name)


# -- DBMS_STREAMS_ADM.SET_UP_QUEUE ---------------------------------------------------------
def set_up_queue(target: Target, queue_name_: str = "strmadmin.streams_queue",
                 queue_table: str | None = None, *, queue_users: tuple[str, ...] = (),
                 sort_list: str = "commit_time", multiple_consumers: bool = True,
                 comment: str | None = None) -> dict[str, Any]:
    """``DBMS_STREAMS_ADM.SET_UP_QUEUE``: a secure, transactional, commit-time queue.

    Creates, when missing, the queue table (``SYS.ANYDATA``, ``sort_list`` commit_time,
    multiple consumers, transactional message grouping, secure) and the queue, started.
    An existing queue table keeps its ordering and properties, and an existing queue is
    not created again (seed 001); either way each ``queue_users`` entry becomes a
    secure-queue user of the queue: an agent of its name enabled for it, with ENQUEUE
    and DEQUEUE.

    Args:
        queue_name_: ``owner.name`` (default ``strmadmin.streams_queue``).
        queue_table: default ``<queue>_table`` (the catalog's name for a queue's table).

    Returns:
        ``queue``, ``queue_table``, whether each was created, and the users configured.
    """
    name = queue_name(queue_name_)
    qt = queue_name(queue_table) if queue_table else f"{name}_table"
    with _store(target).read() as conn:
        row = conn.execute(select(Q.c.queue_table, Q.c.status).where(Q.c.name == name)).first()
    if row is not None and row.status != "dropped" and row.queue_table != qt:
        raise MessagingError(f"queue {name} exists in queue table {row.queue_table}, not {qt}")
    made_table = create_queue_table(target, qt, "SYS.ANYDATA", sort_list=sort_list,
                                    multiple_consumers=multiple_consumers,
                                    message_grouping="transactional", secure=True,
                                    comment=comment, if_not_exists=True)
    made_queue = create_queue(target, name, qt, comment=comment, start=True,
                              if_not_exists=True, recreate_dropped=False)
    users = []
    for user in queue_users:
        enable_db_access(target, user, user)
        grant_queue_privilege(target, "ALL", name, user, granted_by="set_up_queue")
        users.append(user.upper())
    return {"queue": name, "queue_table": qt, "queue_table_created": made_table,
            "queue_created": made_queue, "queue_users": users}
