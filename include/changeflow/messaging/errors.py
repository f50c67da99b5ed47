"""Errors of Advanced Queuing for applications.

Every refusal happens before anything is written (or rolls its transaction back), so
a refused call changes nothing. All are terminal (retrying the same call cannot
succeed) except :class:`QueueBusyError`. The errors the project already defines are
reused: :class:`~changeflow.errors.QueueNotFoundError` (unknown queue),
:class:`~changeflow.errors.QueueDroppedError`,
:class:`~changeflow.errors.PayloadTypeError` (a payload that does not match its type)
and :class:`~changeflow.errors.SecurityError` (a missing privilege).

Each error has an ``oracle_code`` the IDAP service can put into ``error_code``.
"""

from __future__ import annotations

from changeflow.errors import (
    PayloadTypeError,
    QueueDroppedError,
    QueueNotFoundError,
    SecurityError,
    TerminalError,
    TransientError,
)
from changeflow.rules.errors import RuleError

__all__ = [
    "AlreadyExistsError", "CapturedMessageError", "EndOfGroupError", "MessagePropertyError",
    "MessageTooLargeError", "MessagingError", "NoRecipientsError", "NotSubscribedError",
    "PayloadTypeError", "QueueBusyError", "QueueDroppedError", "QueueNotFoundError",
    "QueueStoppedError", "SecurityError", "SelectorError", "TransactionExpiredError",
    "UnknownTypeError", "oracle_code",
]


class MessagingError(TerminalError):
    """Base of the messaging errors that are not shared with the rest of changeflow."""

    oracle_code = 25200


class AlreadyExistsError(MessagingError):
    """A queue table, queue, type or subscriber of that name exists already."""

    oracle_code = 24001


class UnknownTypeError(MessagingError):
    """A message type name is not defined (neither built in nor declared)."""

    oracle_code = 24009


class MessagePropertyError(MessagingError):
    """A message property or option is invalid (negative delay, unknown mode, ...)."""

    oracle_code = 25240


class MessageTooLargeError(MessagingError):
    """A message's encoded payload is over the configured size limit."""

    oracle_code = 25251


class QueueStoppedError(MessagingError):
    """Enqueue (or dequeue) is disabled on the queue: ``start_queue`` enables it."""

    oracle_code = 25207


class NotSubscribedError(MessagingError):
    """A dequeue by a consumer that is neither a subscriber nor a named recipient."""

    oracle_code = 24047


class NoRecipientsError(MessagingError):
    """A message for a multi-consumer queue has no recipient and no subscriber takes it."""

    oracle_code = 24033


class CapturedMessageError(MessagingError):
    """A user dequeue reached captured LCRs: only an apply process may dequeue them."""

    oracle_code = 25263


class EndOfGroupError(MessagingError):
    """NEXT_MESSAGE fetched every message of the current transaction group."""

    oracle_code = 25235


class TransactionExpiredError(MessagingError):
    """The session's transaction lapsed (its locks expired); its work was rolled back."""

    oracle_code = 25254


class QueueBusyError(TransientError):
    """The state store is busy; the operation can be retried."""

    oracle_code = 25228


class SelectorError(RuleError, MessagingError):
    """A dequeue selector or subscriber rule does not parse; names line and column."""

    oracle_code = 25212


def oracle_code(exc: BaseException) -> int:
    """The Oracle error number an IDAP response reports for an error.

    >>> oracle_code(QueueNotFoundError("q")), oracle_code(SecurityError("no"))
    (24010, 1031)
    """
    found = getattr(exc, "oracle_code", None)
    if isinstance(found, int):
        return found
    if isinstance(exc, QueueNotFoundError):
        return 24010
    if isinstance(exc, SecurityError):
        return 1031
    if isinstance(exc, PayloadTypeError):
        return 25215
    return 25200
