"""HTTPS with a self-signed certificate the test creates; a client certificate authenticates."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from changeflow.idap.certs import self_signed
from changeflow.idap.server import Running
from changeflow.state import StateStore

from .conftest import idap_config, make_queue, post, receive, running, send, texts


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d: Path = tmp_path_factory.mktemp("certs")
    server_cert, server_key = self_signed(d / "server", "localhost")
    agent_cert, agent_key = self_signed(d / "agent", "john")
    return {"cert": server_cert, "key": server_key, "agent_cert": agent_cert,
            "agent_key": agent_key}


@pytest.fixture(scope="module")
def server(store: StateStore, certs: dict[str, str]) -> Iterator[Running]:
    make_queue(store, "app.q")
    tls = {"cert_file": certs["cert"], "key_file": certs["key"],
           "client_ca_file": certs["agent_cert"]}
    with running(store, idap_config(tls=tls)) as r:
        yield r


def test_https_with_basic_authentication(server: Running, certs: dict[str, str]) -> None:
    assert server.url.startswith("https://")
    with pytest.raises(httpx.ConnectError):  # the system CAs do not know it
        httpx.get(server.url + "?wsdl")
    ctx = ssl.create_default_context(cafile=certs["cert"])
    with httpx.Client(base_url=server.url, auth=("john", "welcome"), verify=ctx,
                      headers={"Content-Type": "text/xml"}) as c:
        r = post(c, send("app.q", "<raw>51</raw>", commit=True))
        assert r.status_code == 200 and "Secure" in r.headers["set-cookie"]
        assert texts(post(c, receive("app.q", commit=True)), "raw") == ["51"]


def test_a_client_certificate_authenticates_its_agent(server: Running,
                                                      certs: dict[str, str]) -> None:
    ctx = ssl.create_default_context(cafile=certs["cert"])
    ctx.load_cert_chain(certs["agent_cert"], certs["agent_key"])
    with httpx.Client(verify=ctx, headers={"Content-Type": "text/xml"}) as c:
        r = c.post(server.url, content=send("app.q", "<raw>52</raw>", commit=True))
        assert r.status_code == 200, r.text
    plain = httpx.post(server.url, content=send("app.q", "<raw>53</raw>", commit=True),
                       headers={"Content-Type": "text/xml"},
                       verify=ssl.create_default_context(cafile=certs["cert"]))
    assert plain.status_code == 401  # neither a certificate nor a password
