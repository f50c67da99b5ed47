"""A throwaway S3-compatible server on loopback: S3Proxy.

S3Proxy (``org.gaul:s3proxy``, from Maven Central into ``jars/s3proxy`` by ``make
setup``) serves the S3 API, with
AWS v2/v4 signatures checked against one key pair: the same protocol, signatures,
multipart uploads and error codes Spark's S3A and pyarrow meet on AWS. Objects are
kept in the server's memory (jclouds' ``transient-nio2`` store). S3Proxy 3.3 and later
list S3A's directory markers (``dir/`` keys) with their size, and 4.0 deletes them without
a 500: before, S3A's committers failed on both (gaul/s3proxy#1093).

>>> S3Server().endpoint.startswith("http://127.0.0.1:")
True
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from changeflow.testing.pg_cluster import free_port

ACCESS_KEY = "changeflow-test"
SECRET_KEY = "changeflow-test-secret"
PROVIDER = os.environ.get("CHANGEFLOW_S3PROXY_PROVIDER", "transient-nio2")


class S3Server:
    """An S3Proxy process: :meth:`start`, :meth:`env` for clients, :meth:`stop`.

    Args:
        root: where objects and the log live (a temporary directory by default).
        port: the port to listen on (a free one by default; kept across restarts).
    """

    def __init__(self, root: Path | None = None, port: int | None = None):
        self.root = root or Path(tempfile.mkdtemp(prefix="changeflow-s3-"))
        self.port = port or free_port()
        self.data = self.root / "data"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """What a client of this server sets (docs/deploy.md#object-storage)."""
        return {"CHANGEFLOW_S3_ENDPOINT": endpoint or self.endpoint,
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_REGION": "us-east-1", "CHANGEFLOW_S3_ATTEMPTS": "2",
                "CHANGEFLOW_S3_TIMEOUT": "30"}

    def start(self, timeout: float = 60.0) -> S3Server:
        """Start the server and wait until it answers."""
        from changeflow.jvm import jars

        self.data.mkdir(parents=True, exist_ok=True)
        conf = self.root / "s3proxy.conf"
        conf.write_text("\n".join([
            f"s3proxy.endpoint=http://127.0.0.1:{self.port}",
            "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={ACCESS_KEY}", f"s3proxy.credential={SECRET_KEY}",
            f"jclouds.provider={PROVIDER}", f"jclouds.filesystem.basedir={self.data}",
            f"jclouds.identity={ACCESS_KEY}", f"jclouds.credential={SECRET_KEY}", ""]))
        log = open(self.root / "s3proxy.log", "ab")  # noqa: SIM115  (kept open by the child)
        java = shutil.which("java") or "java"
        self.proc = subprocess.Popen(
            [java, "-Xmx512m", "-jar", jars("s3proxy")[0], "--properties", str(conf)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(self.endpoint, timeout=2)  # noqa: S310 (loopback)
            except urllib.error.HTTPError:
                return self  # 403 without a signature: it is serving
            except OSError:
                time.sleep(0.3)
        self.stop(keep=True)
        raise RuntimeError(f"S3Proxy did not start; see {self.root / 's3proxy.log'}")

    def _admin(self) -> Any:
        """A pyarrow client of this server that may create buckets."""
        from pyarrow import fs as pafs

        os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
        os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
        return pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                                 endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                                 region="us-east-1", allow_bucket_creation=True,
                                 force_virtual_addressing=False)

    def create_bucket(self, name: str) -> str:
        """Create a bucket. Returns ``s3a://name``."""
        self._admin().create_dir(name)
        return f"s3a://{name}"

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """Keys (files) under a prefix of a bucket."""
        from pyarrow import fs as pafs

        infos = self._admin().get_file_info(pafs.FileSelector(bucket, recursive=True))
        keys = (i.path[len(bucket) + 1:] for i in infos if i.type == pafs.FileType.File)
        return sorted(k for k in keys if k.startswith(prefix))

    def stop(self, *, keep: bool = False) -> None:
        """Stop the server; remove its objects unless ``keep`` (a restart follows)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def client_env(server: S3Server, endpoint: str | None = None) -> dict[str, str]:
    """The process environment with the server's client settings."""
    return {**os.environ, **server.env(endpoint)}
