"""Errors of the IDAP service, each rendered as a SOAP Fault (seed 003).

A Fault carries ``faultcode`` (the error code, as the seed says), ``faultstring``
(``Client error: ...`` when the request is not valid, ``Server error: ...`` when the
service failed) and ``detail`` holding a ``status_response`` (``status_code`` -1,
``error_code``, ``error_message``). Errors of the messaging layer keep their Oracle
codes (:func:`changeflow.messaging.errors.oracle_code`); the service's own are:

====== ===================================================================
31011  the body is not well-formed XML, or holds a DTD/entity (XXE, billion laughs)
31154  the document is not a valid IDAP request (namespace, operation, element)
25254  the session's transaction was rolled back (idle timeout) or the cookie expired
1017   the session cookie is forged, or belongs to another user
600    an unexpected failure of the service (a Server error)
====== ===================================================================

>>> fault_of(InvalidRequestError("no destination")).code
31154
>>> from changeflow.errors import QueueNotFoundError
>>> f = fault_of(QueueNotFoundError("queue 'a.b' does not exist"))
>>> (f.code, f.side)
(24010, 'Client')
"""

from __future__ import annotations

from dataclasses import dataclass

from changeflow.errors import ChangeflowError, TerminalError, is_transient


class IdapError(TerminalError):
    """A request the service refuses; ``oracle_code`` goes into ``error_code``."""

    oracle_code = 31154


class XmlParseError(IdapError):
    """The body is not well-formed XML, or uses a DTD or entities (refused, never expanded)."""

    oracle_code = 31011


class InvalidRequestError(IdapError):
    """A wrong namespace, an unknown operation, a missing or invalid element."""

    oracle_code = 31154


class SessionExpiredError(IdapError):
    """The session's transaction was rolled back after its idle timeout, or is unknown."""

    oracle_code = 25254


class SessionForgedError(IdapError):
    """The session cookie's signature does not verify, or it belongs to another user."""

    oracle_code = 1017


@dataclass(frozen=True)
class Fault:
    """What a SOAP Fault says: the error code, client or server side, and the message."""

    code: int
    side: str  # Client | Server
    message: str

    @property
    def faultstring(self) -> str:
        """``Client error: ...`` or ``Server error: ...`` (the seed's faultstring)."""
        return f"{self.side} error: {self.message}"


def fault_of(exc: BaseException) -> Fault:
    """The Fault for an exception: changeflow errors are the client's, others the server's.

    A transient error of the store (busy, unreachable) is a server error too: the
    request was valid and may be retried.
    """
    from changeflow.messaging.errors import oracle_code

    message = str(exc).strip() or type(exc).__name__
    if isinstance(exc, ChangeflowError) and not is_transient(exc):
        return Fault(oracle_code(exc), "Client", message)
    if isinstance(exc, ChangeflowError):
        return Fault(oracle_code(exc), "Server", f"{message} (transient: retry the request)")
    return Fault(600, "Server", f"{type(exc).__name__}: {message}")
