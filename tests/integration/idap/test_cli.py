"""``changeflow serve`` as a user starts it: embedded defaults, a generated password."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .conftest import COMMIT, free_port, texts


def test_serve_on_embedded_defaults(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("CHANGEFLOW_CONFIG", "CHANGEFLOW_IDAP_PASSWORD")}
    exe = str(Path(sys.executable).parent / "changeflow")
    proc = subprocess.Popen([exe, "serve", "--port", str(port)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/aq"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(url + "?wsdl", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "changeflow serve did not start"
            time.sleep(0.2)
        secret = tmp_path / "work/aq/idap-password"
        assert secret.stat().st_mode & 0o777 == 0o600
        assert (tmp_path / "work/aq/state.db").exists()
        ok = httpx.post(url, content=COMMIT, auth=("aq", secret.read_text().strip()),
                        headers={"Content-Type": "text/xml"})
        assert ok.status_code == 200 and texts(ok, "status_code") == ["0"]
        assert httpx.post(url, content=COMMIT, auth=("aq", "guess"),
                          headers={"Content-Type": "text/xml"}).status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert f"changeflow IDAP service at {url}" in out
    assert "password in work/aq/idap-password" in out
