"""Who is calling: HTTP basic authentication (or a client certificate) of AQ agents.

The user name an HTTP client logs in with is the *AQ agent* (seed 003: "the
Oracle Streams AQ HTTP agent"). Its password comes from the environment
(``password_env``) or a PBKDF2 hash in the configuration (``password_hash``), never from
the file itself. A successful check of a hashed password is remembered (keyed by a
SHA-256 of the credentials), so keep-alive clients do not pay PBKDF2 on every request.

The agent maps to database users: those of ``db_users`` in its configuration, those
enabled for it with ``enable_db_access`` (``cf_aq_agents``), or else its own name. The
service acts as the first of them that may use the queue of the request.

>>> h = hash_password("welcome", iterations=1000)
>>> verify_hash("welcome", h), verify_hash("wrong", h)
(True, False)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import threading
from collections.abc import Mapping

from changeflow.errors import ConfigError
from changeflow.idap.config import IdapConfig, UserConfig

PBKDF2_ITERATIONS = 200_000


def hash_password(password: str, *, iterations: int = PBKDF2_ITERATIONS) -> str:
    """``pbkdf2_sha256$<iterations>$<salt>$<hash>`` for ``password_hash``."""
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"pbkdf2_sha256${iterations}${salt.hex()}${digest.hex()}"


def verify_hash(password: str, stored: str) -> bool:
    """Whether ``password`` matches a :func:`hash_password` string (constant time)."""
    try:
        _, iterations, salt, digest = stored.split("$")
        found = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt),
                                    int(iterations))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found.hex(), digest)


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """``(user, password)`` of an ``Authorization: Basic ...`` header, or None."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep and user else None


class Users:
    """The configured agents and their secrets (resolved once, at start-up).

    Raises:
        ConfigError: a ``password_env`` variable is not set.
    """

    def __init__(self, cfg: IdapConfig, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._users: dict[str, UserConfig] = {u.name.upper(): u for u in cfg.users}
        self._plain: dict[str, str] = {}
        for u in cfg.users:
            if u.password_env is not None:
                value = env.get(u.password_env)
                if not value:
                    raise ConfigError(f"user {u.name}: environment variable "
                                      f"{u.password_env} (its password_env) is not set",
                                      key="idap.users")
                self._plain[u.name.upper()] = value
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        """The configured agents."""
        return [u.name for u in self._users.values()]

    def check(self, user: str, password: str) -> str | None:
        """The agent's canonical name when the password is right, else None."""
        key = user.upper()
        found = self._users.get(key)
        if found is None:
            return None
        plain = self._plain.get(key)
        if plain is not None:
            return found.name if hmac.compare_digest(plain.encode(), password.encode()) \
                else None
        token = hashlib.sha256(f"{key}\0{password}".encode()).digest()
        with self._lock:
            if token in self._seen:
                return found.name
        if found.password_hash and verify_hash(password, found.password_hash):
            with self._lock:
                self._seen.add(token)
            return found.name
        return None

    def db_users(self, agent: str) -> list[str]:
        """The database users an agent's configuration names (may be empty)."""
        found = self._users.get(agent.upper())
        return list(found.db_users) if found else []
