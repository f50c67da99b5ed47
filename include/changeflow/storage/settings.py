"""The object-store settings, read once from the environment, for every client.

One set of variables configures every client that opens an ``s3a://`` (or ``s3://``)
path: Spark's S3A connector (as ``spark.hadoop.fs.s3a.*``), pyarrow's ``S3FileSystem``
(queue batches, footer checks, error-queue files, orphans, ``changeflow doctor``) and
PyIceberg (``s3.*`` catalog properties). docs/deploy.md#object-storage lists them:

* ``CHANGEFLOW_S3_ENDPOINT``: an S3-compatible endpoint (``http://127.0.0.1:9000``);
  unset: AWS's own endpoint of the region;
* ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (``AWS_SESSION_TOKEN``): the keys;
  ``CHANGEFLOW_S3_CREDENTIALS=chain`` uses the SDKs' default chain instead (instance
  roles, web identity, profiles);
* ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``; default ``us-east-1``);
* ``CHANGEFLOW_S3_PATH_STYLE``: ``true``/``false`` (default: true with an endpoint);
* ``CHANGEFLOW_S3_ATTEMPTS``: attempts per request before an error reaches changeflow
  (default 3); the schedule's backoff retries what is still failing after them;
* ``CHANGEFLOW_S3_TIMEOUT``: seconds a request may take, listings included (default 60);
* ``CHANGEFLOW_S3_COMMITTER``: the S3A committer of Spark's writes: ``magic`` (default),
  ``directory`` or ``partitioned``.

>>> s = S3Settings.from_env({"CHANGEFLOW_S3_ENDPOINT": "http://127.0.0.1:9000",
...                          "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})
>>> s.spark_properties()["spark.hadoop.fs.s3a.path.style.access"]
'true'
>>> s.pyiceberg_properties()["s3.endpoint"]
'http://127.0.0.1:9000'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from changeflow.errors import ConfigError

#: Spark's bindings of the S3A committers (spark-hadoop-cloud, jvm/spark/pom.xml)
COMMIT_PROTOCOL = "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol"
PARQUET_COMMITTER = "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter"
COMMITTERS = ("magic", "directory", "partitioned")
#: the variables that say an object store is in use
MARKERS = ("CHANGEFLOW_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "CHANGEFLOW_S3_CREDENTIALS")


def _flag(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r}: expected true or false")


@dataclass(frozen=True)
class S3Settings:
    """What every S3 client of a process is given.

    Attributes:
        endpoint: the endpoint URL, or None for AWS's own.
        access_key: the access key id (None: missing, or the default chain).
        secret_key: the secret access key.
        session_token: a session token of temporary credentials.
        region: the signing region.
        path_style: bucket in the path (``host/bucket/key``) rather than the host name.
        attempts: attempts per request.
        timeout: seconds per request.
        committer: the S3A committer Spark writes with.
        chain: take credentials from the SDKs' default chain.
    """

    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    region: str = "us-east-1"
    path_style: bool = False
    attempts: int = 3
    timeout: float = 60.0
    committer: str = "magic"
    chain: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Settings:
        """The settings the environment gives.

        Raises:
            ConfigError: a variable has a value it cannot have (named).
        """
        env = os.environ if env is None else env
        endpoint = env.get("CHANGEFLOW_S3_ENDPOINT") or None
        if endpoint and not endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"CHANGEFLOW_S3_ENDPOINT={endpoint!r}: expected http(s)://host:port")
        style = env.get("CHANGEFLOW_S3_PATH_STYLE")
        committer = env.get("CHANGEFLOW_S3_COMMITTER", "magic")
        if committer not in COMMITTERS:
            raise ConfigError(f"CHANGEFLOW_S3_COMMITTER={committer!r}: one of {COMMITTERS}")
        try:
            attempts = int(env.get("CHANGEFLOW_S3_ATTEMPTS", "3"))
            timeout = float(env.get("CHANGEFLOW_S3_TIMEOUT", "60"))
        except ValueError as exc:
            raise ConfigError(f"CHANGEFLOW_S3_ATTEMPTS / CHANGEFLOW_S3_TIMEOUT: {exc}") from exc
        if attempts < 1 or timeout <= 0:
            raise ConfigError("CHANGEFLOW_S3_ATTEMPTS must be >= 1 and CHANGEFLOW_S3_TIMEOUT > 0")
        creds = env.get("CHANGEFLOW_S3_CREDENTIALS", "keys")
        if creds not in ("keys", "chain"):
            raise ConfigError(f"CHANGEFLOW_S3_CREDENTIALS={creds!r}: keys or chain")
        return cls(
            endpoint=endpoint.rstrip("/") if endpoint else None,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            path_style=_flag(style, "CHANGEFLOW_S3_PATH_STYLE") if style else bool(endpoint),
            attempts=attempts, timeout=timeout, committer=committer, chain=creds == "chain")

    @property
    def missing_credentials(self) -> str | None:
        """Why no request can be signed, or None."""
        if self.chain:
            return None
        missing = [n for n, v in (("AWS_ACCESS_KEY_ID", self.access_key),
                                  ("AWS_SECRET_ACCESS_KEY", self.secret_key)) if not v]
        if not missing:
            return None
        return (f"credentials missing: {' and '.join(missing)} not set "
                "(or CHANGEFLOW_S3_CREDENTIALS=chain for the SDK's default chain)")

    def spark_properties(self) -> dict[str, str]:
        """Spark properties of S3A and its committers (``spark.hadoop.fs.s3a.*`` and SQL)."""
        p = "spark.hadoop.fs.s3a."
        out = {
            f"{p}path.style.access": str(self.path_style).lower(),
            f"{p}endpoint.region": self.region,
            f"{p}attempts.maximum": str(self.attempts),
            f"{p}retry.limit": str(self.attempts),
            f"{p}retry.interval": "200ms",
            f"{p}connection.request.timeout": f"{int(self.timeout)}s",
            f"{p}connection.timeout": f"{int(self.timeout)}s",
            f"{p}connection.establish.timeout": f"{min(int(self.timeout), 30)}s",
            # the committers: a write to s3a:// never depends on a rename
            f"{p}committer.name": self.committer,
            f"{p}committer.magic.enabled": "true",
            "spark.hadoop.mapreduce.outputcommitter.factory.scheme.s3a":
                "org.apache.hadoop.fs.s3a.commit.S3ACommitterFactory",
            "spark.sql.sources.commitProtocolClass": COMMIT_PROTOCOL,
            "spark.sql.parquet.output.committer.class": PARQUET_COMMITTER,
            # third-party stores do not all take the SDK's newer checksums
            f"{p}checksum.validation": "false",
        }
        if self.endpoint:
            out[f"{p}endpoint"] = self.endpoint
            out[f"{p}connection.ssl.enabled"] = str(self.endpoint.startswith("https")).lower()
        if not self.chain and self.access_key and self.secret_key:
            out[f"{p}access.key"] = self.access_key
            out[f"{p}secret.key"] = self.secret_key
            provider = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
            if self.session_token:
                out[f"{p}session.token"] = self.session_token
                provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            out[f"{p}aws.credentials.provider"] = provider
        return out

    def pyiceberg_properties(self) -> dict[str, str]:
        """PyIceberg's ``s3.*`` properties (its PyArrow file IO)."""
        out = {"s3.region": self.region,
               "s3.force-virtual-addressing": str(not self.path_style).lower(),
               "s3.request-timeout": str(self.timeout),
               "s3.connect-timeout": str(min(self.timeout, 30.0))}
        if self.endpoint:
            out["s3.endpoint"] = self.endpoint
        if not self.chain and self.access_key and self.secret_key:
            out["s3.access-key-id"] = self.access_key
            out["s3.secret-access-key"] = self.secret_key
            if self.session_token:
                out["s3.session-token"] = self.session_token
        return out


def in_use(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment configures an object store (any of :data:`MARKERS`)."""
    env = os.environ if env is None else env
    return any(env.get(k) for k in MARKERS)
