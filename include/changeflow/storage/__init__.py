"""Object storage for every path changeflow opens with Python, and its errors.

:func:`filesystem` is the one place a path or URI becomes a pyarrow file system: local
paths and ``file:`` URIs the local one, ``s3a://``/``s3://`` an ``S3FileSystem`` built
from :class:`~changeflow.storage.settings.S3Settings` (the same variables Spark's S3A is
given), anything else what pyarrow makes of it (``hdfs://``). Every Python reader and
writer of queue batches, error-queue files and orphans goes through it.

Object stores fail in ways a disk does not; :func:`error_for` turns pyarrow's errors into
changeflow's, naming the site and the URI (:func:`name_root` learns which root belongs to
which site when a pipeline's sites are opened):

* credentials missing or refused, a bucket that does not exist: :class:`StorageAccessError`
  (terminal: no retry fixes it);
* the store unreachable, answering 5xx or throttling, a request (a slow listing) past
  ``CHANGEFLOW_S3_TIMEOUT``: :class:`StorageUnavailableError` (transient: the schedule's
  backoff retries it; nothing was committed).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from changeflow.errors import DestinationUnavailableError, TerminalError
from changeflow.storage.settings import S3Settings, in_use

__all__ = ["S3Settings", "StorageAccessError", "StorageUnavailableError", "error_for",
           "filesystem", "in_use", "is_object_store", "is_store_error", "jvm_error_for",
           "name_root", "settings", "where"]

SCHEMES = ("s3a://", "s3://", "s3n://")
_lock = threading.Lock()
_cache: dict[S3Settings, Any] = {}
_roots: dict[str, str] = {}


class StorageAccessError(TerminalError):
    """The object store refuses the request (credentials, bucket): no retry fixes it."""


class StorageUnavailableError(DestinationUnavailableError):
    """The object store cannot answer right now (down, 5xx, throttled, too slow)."""


def settings() -> S3Settings:
    """The object-store settings of this process's environment."""
    return S3Settings.from_env()


def is_object_store(uri: str) -> bool:
    """Whether a path is on an S3-compatible object store.

    >>> is_object_store("s3a://bucket/root"), is_object_store("/tmp/root")
    (True, False)
    """
    return uri.startswith(SCHEMES)


def name_root(root: str, label: str) -> None:
    """Remember that ``root`` is, e.g., ``site s2 staging root`` (for error messages)."""
    with _lock:
        _roots[root.rstrip("/")] = label


def where(uri: str) -> str:
    """The site and root a URI is under, and the URI itself.

    >>> name_root("s3a://b/s2/staging", "site s2 staging root")
    >>> where("s3a://b/s2/staging/hr/q/batch-1")
    'site s2 staging root s3a://b/s2/staging (s3a://b/s2/staging/hr/q/batch-1)'
    """
    best = max((r for r in _roots if uri == r or uri.startswith(r + "/")), key=len,
               default=None)
    if best is None:
        return uri
    return f"{_roots[best]} {best}" + ("" if uri == best else f" ({uri})")


def _s3(cfg: S3Settings) -> Any:
    from pyarrow import fs as pafs

    # Third-party stores (S3Proxy, MinIO, Ceph) do not all take the newer SDK's default
    # request checksums; ask for them only where the operation requires one.
    os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
    kw: dict[str, Any] = {
        "region": cfg.region, "force_virtual_addressing": not cfg.path_style,
        "request_timeout": cfg.timeout, "connect_timeout": min(cfg.timeout, 30.0),
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=cfg.attempts),
        "check_directory_existence_before_creation": True,
    }
    if cfg.endpoint:
        scheme, _, host = cfg.endpoint.partition("://")
        kw.update(endpoint_override=host, scheme=scheme)
    if not cfg.chain:
        kw.update(access_key=cfg.access_key, secret_key=cfg.secret_key,
                  session_token=cfg.session_token)
    return pafs.S3FileSystem(**kw)


def filesystem(uri: str) -> tuple[Any, str]:
    """The pyarrow file system of a path or URI, and the path inside it.

    >>> filesystem("/tmp/x")[1]
    '/tmp/x'

    Raises:
        StorageAccessError: an object-store URI while no credentials are configured.
    """
    from pyarrow import fs as pafs

    if is_object_store(uri):
        cfg = settings()
        if (why := cfg.missing_credentials) is not None:
            raise StorageAccessError(f"{where(uri)}: {why}")
        with _lock:
            s3 = _cache.get(cfg)
            if s3 is None:
                s3 = _cache[cfg] = _s3(cfg)
        return s3, uri.split("://", 1)[1]
    if uri.startswith("file:"):
        uri = "/" + uri[len("file:"):].lstrip("/")
    return pafs.FileSystem.from_uri(uri) if "://" in uri else (pafs.LocalFileSystem(), uri)


#: pyarrow's (the AWS SDK's) words for a request refused for good
_ACCESS = ("ACCESS_DENIED", "SIGNATURE_DOES_NOT_MATCH", "INVALID_ACCESS_KEY_ID",
           "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "HTTP status 403",
           "Forbidden")
_BUCKET = ("NO_SUCH_BUCKET", "NoSuchBucket", "not found. To create buckets")
_TIMEOUT = ("REQUEST_TIMEOUT", "curlCode: 28", "Timeout was reached", "timed out")


def is_store_error(exc: BaseException) -> bool:
    """Whether a pyarrow error is the object store's (a request failed), not the data's.

    >>> is_store_error(OSError("When listing objects: AWS Error NETWORK_CONNECTION ..."))
    True
    >>> is_store_error(OSError("Couldn't deserialize thrift: TProtocolException"))
    False
    """
    text = str(exc)
    return isinstance(exc, OSError) and any(
        m in text for m in ("AWS Error", "curlCode", "not found. To create buckets"))


def error_for(exc: BaseException, uri: str, action: str) -> Exception:
    """changeflow's error for a failed object-store request (``action``: what was tried).

    >>> err = error_for(OSError("AWS Error NETWORK_CONNECTION during ListObjectsV2"),
    ...                 "s3a://b/k", "list")
    >>> type(err).__name__, err.transient
    ('StorageUnavailableError', True)
    >>> str(error_for(OSError("AWS Error ACCESS_DENIED"), "s3a://b/k", "list"))[:49]
    's3a://b/k: list failed, access denied (check AWS_'
    """
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:400]
    at = where(uri)
    if isinstance(exc, StorageAccessError | StorageUnavailableError):
        return exc  # type: ignore[return-value]
    if any(m in text for m in _BUCKET):
        bucket = uri.split("://", 1)[-1].split("/", 1)[0]
        return StorageAccessError(f"{at}: {action} failed, bucket {bucket!r} does not exist: "
                                  f"{text}")
    if any(m in text for m in _ACCESS):
        return StorageAccessError(f"{at}: {action} failed, access denied (check "
                                  f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY): {text}")
    if any(m in text for m in _TIMEOUT):
        return StorageUnavailableError(
            f"{at}: {action} took longer than CHANGEFLOW_S3_TIMEOUT={settings().timeout:g} s "
            f"(a slow listing? retried later): {text}")
    return StorageUnavailableError(
        f"{at}: {action} failed, the object store is unavailable (retried later): {text}")


#: the S3A connector's words (in a JVM error's text) for a request refused for good ...
_JVM_ACCESS = ("AccessDeniedException", "NoAuthWithAWSException", "InvalidAccessKeyId",
               "SignatureDoesNotMatch", "403 Forbidden", "Status Code: 403",
               "UnknownStoreException", "NoSuchBucket")
#: ... and for a store that cannot answer right now
_JVM_UNAVAILABLE = ("AWSClientIOException", "SdkClientException", "Unable to execute HTTP",
                    "AWSServiceThrottledException", "AWSStatus500Exception",
                    "AWSServiceUnavailableException", "Status Code: 503", "Status Code: 500",
                    "SlowDown", "ConnectTimeoutException", "SocketTimeoutException",
                    "Connection refused", "ConnectException", "connection timed out")


def jvm_error_for(text: str, uri: str, action: str) -> Exception | None:
    """changeflow's error for a failed Spark (S3A) request on ``uri``; None: not the store's.

    >>> type(jvm_error_for("org.apache.hadoop.fs.s3a.AWSClientIOException: ...",
    ...                    "s3a://b/k", "read")).__name__
    'StorageUnavailableError'
    """
    first = next((ln.strip() for ln in text.splitlines() if any(
        m in ln for m in _JVM_ACCESS + _JVM_UNAVAILABLE)), text.strip()[:300])[:400]
    at = where(uri)
    if any(m in text for m in ("UnknownStoreException", "NoSuchBucket")):
        return StorageAccessError(f"{at}: {action} failed, the bucket does not exist: {first}")
    if any(m in text for m in _JVM_ACCESS):
        return StorageAccessError(f"{at}: {action} failed, access denied (check "
                                  f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY): {first}")
    if any(m in text for m in _JVM_UNAVAILABLE):
        return StorageUnavailableError(
            f"{at}: {action} failed, the object store is unavailable (retried later): {first}")
    return None
