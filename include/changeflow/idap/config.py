"""The ``idap:`` section of a pipeline file: the SOAP service, its users, remote IDAP sites.

This module only depends on pydantic, so :mod:`changeflow.config` can import it.

.. code-block:: yaml

    idap:
      host: 127.0.0.1              # listen address (localhost by default)
      port: 8042
      path: /aq                    # the IDAP endpoint; GET {path}?wsdl serves the WSDL
      site: site1                  # the site whose queues it serves (default: the only one)
      tls: {cert_file: certs/server.pem, key_file: certs/server.key}
      idle_timeout: 120            # seconds before an idle transaction is rolled back
      max_body_bytes: 1048576      # larger requests are refused (413)
      read_timeout: 10             # seconds to receive a request's head and body (408)
      max_wait_time: 30            # longest wait_time a receive may block (FOREVER too)
      users:                       # HTTP basic authentication: the AQ agents
        - {name: john, password_env: AQ_JOHN_PASSWORD, db_users: [aqxmluser]}
      mail: {host: localhost, port: 25, sender: aq@localhost}    # mailto: notifications
      transformations: {upper: myapp.transforms:upper_case}   # module:function
      remote_sites:                # IDAP endpoints of other changeflow servers
        dba: {url: "https://host:8443/aq", username_env: DBA_USER, password_env: DBA_PWD,
              ca_file: certs/dba.pem}

A propagation whose destination queue is at a remote site (``cars_q2@dba``) publishes
over HTTP(S) to that site's IDAP endpoint instead of writing the queue directly.

>>> cfg = IdapConfig.model_validate({"users": [{"name": "john", "password_env": "X"}],
...     "remote_sites": {"dba": {"url": "http://127.0.0.1:8043/aq"}}})
>>> cfg.idle_timeout, cfg.users[0].name, cfg.remote("cars_q2@dba").url
(120.0, 'john', 'http://127.0.0.1:8043/aq')
>>> cfg.remote("cars_q2@site1") is None
True
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$#.:-]{0,63}$")
#: The IDAP transaction idle timeout of seed 003.
DEFAULT_IDLE_TIMEOUT = 120.0
DEFAULT_PORT = 8042


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsConfig(_Model):
    """HTTPS: a PEM certificate (chain) and its private key; optional client certificates."""

    cert_file: str
    key_file: str
    key_password_env: str | None = None
    client_ca_file: str | None = Field(
        default=None, description="CA of client certificates: a verified certificate's "
                                  "common name authenticates its agent")


class UserConfig(_Model):
    """An AQ HTTP agent: its password (from the environment or a hash) and database users.

    ``password_hash`` is ``pbkdf2_sha256$<iterations>$<salt hex>$<hash hex>`` (make one
    with ``changeflow serve --hash-password``); ``password_env`` names an environment
    variable holding the password. ``db_users`` are the users the agent acts as on
    secure queues, besides those enabled with ``enable_db_access``; default: its name.
    """

    name: str
    password_env: str | None = None
    password_hash: str | None = None
    db_users: list[str] = []

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"user name {v!r} must start with a letter or _ and hold letters, "
                             "digits and _$#.:-")
        return v

    @model_validator(mode="after")
    def _one_secret(self) -> UserConfig:
        if (self.password_env is None) == (self.password_hash is None):
            raise ValueError(f"user {self.name}: give exactly one of password_env and "
                             "password_hash (no password in the file itself)")
        if self.password_hash is not None and not re.fullmatch(
                r"pbkdf2_sha256\$\d+\$[0-9a-f]+\$[0-9a-f]+", self.password_hash):
            raise ValueError(f"user {self.name}: password_hash must be "
                             "pbkdf2_sha256$<iterations>$<salt hex>$<hash hex>")
        return self


class MailConfig(_Model):
    """The SMTP server ``mailto:`` notifications are sent through (DBMS_AQELM's mail host)."""

    host: str = "localhost"
    port: int = Field(default=25, ge=1, le=65535)
    sender: str = "changeflow-aq@localhost"
    starttls: bool = False
    username_env: str | None = None
    password_env: str | None = None
    timeout: float = Field(default=10.0, gt=0)


class NotifyConfig(_Model):
    """How notifications are delivered: retries with exponential backoff, then dropped."""

    timeout: float = Field(default=5.0, gt=0)
    retry_initial: float = Field(default=1.0, gt=0)
    retry_max: float = Field(default=60.0, gt=0)
    max_attempts: int = Field(default=10, ge=1)
    poll_interval: float = Field(default=0.5, gt=0)


class RemoteSite(_Model):
    """Another changeflow server's IDAP endpoint: a destination site for propagations.

    Credentials come from the environment (``username_env``/``password_env``), never
    from the file; ``ca_file`` trusts a (self-signed) server certificate; ``verify``
    false accepts any certificate (tests only).
    """

    url: str
    username_env: str | None = None
    password_env: str | None = None
    ca_file: str | None = None
    verify: bool = True
    timeout: float = Field(default=30.0, gt=0)
    max_messages: int = Field(default=1000, ge=1, description="messages per HTTP request")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"url {v!r} must be http://host[:port]/path or https://...")
        return v.rstrip("/")


class IdapConfig(_Model):
    """The IDAP (SOAP over HTTP) service and the remote IDAP sites (see ``docs/idap.md``)."""

    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    path: str = "/aq"
    site: str | None = None
    tls: TlsConfig | None = None
    idle_timeout: float = Field(default=DEFAULT_IDLE_TIMEOUT, gt=0)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    read_timeout: float = Field(default=10.0, gt=0)
    keep_alive: float = Field(default=30.0, gt=0)
    max_wait_time: float = Field(default=30.0, ge=0)
    max_sessions: int = Field(default=1000, ge=1)
    threads: int = Field(default=32, ge=1, le=512)
    time_manager: float = Field(
        default=1.0, ge=0, description="seconds between the time manager's passes over the "
        "served store (expiry, delays, lapsed locks, retention); 0: off (another process "
        "runs it)")
    users: list[UserConfig] = []
    mail: MailConfig = MailConfig()
    notify: NotifyConfig = NotifyConfig()
    remote_sites: dict[str, RemoteSite] = {}
    transformations: dict[str, str] = Field(
        default={}, description="name -> module:function applied to payloads (the seed's "
                                "PL/SQL transformations); only these names may be requested")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not re.fullmatch(r"/[A-Za-z0-9_./-]*", v):
            raise ValueError(f"path {v!r} must start with / (e.g. /aq)")
        return v.rstrip("/") or "/"

    @model_validator(mode="after")
    def _unique_users(self) -> IdapConfig:
        names = [u.name.upper() for u in self.users]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"users: {sorted(dup)[0]} is declared twice")
        return self

    def remote(self, queue_ref: str) -> RemoteSite | None:
        """The remote IDAP site of ``owner.queue@site``, when ``site`` is one."""
        _, at, site = queue_ref.rpartition("@")
        return self.remote_sites.get(site) if at else None
