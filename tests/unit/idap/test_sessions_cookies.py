"""Session cookies and idle rollback with a fake clock (no server)."""

from __future__ import annotations

import pytest

from changeflow.idap.errors import SessionExpiredError, SessionForgedError
from changeflow.idap.sessions import SessionManager, TooManySessionsError


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Pending:
    """A stand-in messaging session that holds a transaction (records its rollback)."""

    in_transaction = True
    id = "p"

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.in_transaction = False


def test_cookies_verify_only_for_their_agent() -> None:
    m = SessionManager(idle_timeout=120)
    s = m.get(None, "JOHN")
    assert m.get(s.cookie, "JOHN") is s
    with pytest.raises(SessionForgedError):
        m.get(s.cookie, "EVE")
    with pytest.raises(SessionForgedError):
        m.get(s.cookie[:-3] + "AAA", "JOHN")
    with pytest.raises(SessionForgedError):
        SessionManager(idle_timeout=120).get(s.cookie, "JOHN")  # another server run


def test_an_idle_transaction_is_rolled_back_at_the_timeout() -> None:
    clock = Clock()
    m = SessionManager(idle_timeout=120, clock=clock)
    s = m.get(None, "JOHN")
    work = Pending()
    s.sessions["U"] = work
    clock.t += 119
    assert m.reap() == 0 and not work.closed
    clock.t += 1
    assert m.reap() == 1 and work.closed and m.rolled_back == 1
    with pytest.raises(SessionExpiredError, match="rolled back after 120 s"):
        m.get(s.cookie, "JOHN")


def test_a_busy_session_is_not_reaped_and_clean_ones_make_room() -> None:
    clock = Clock()
    m = SessionManager(idle_timeout=10, max_sessions=2, clock=clock)
    busy = m.get(None, "A")
    busy.sessions["U"] = Pending()
    m.begin(busy)
    clock.t += 100
    assert m.reap() == 0
    m.end(busy)
    held = m.get(None, "B")
    held.sessions["U"] = Pending()
    with pytest.raises(TooManySessionsError):
        m.get(None, "C")  # both hold transactions: no room
    clean = m.get(held.cookie, "B")
    clean.sessions.clear()
    assert m.get(None, "C").agent == "C"  # the clean one was evicted
