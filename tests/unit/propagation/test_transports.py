"""Propagation finds its transports and carriers through entry points, by what they reach."""

from __future__ import annotations

from changeflow.config import PipelineConfig
from changeflow.propagation import transports

SITE = {"staging_root": "/tmp/s", "target_root": "/tmp/t", "state_url": "sqlite://"}


def _cfg(destination: str) -> PipelineConfig:
    return PipelineConfig.model_validate({
        "sites": {"s1": {**SITE, "database": "DB1"}, "s2": {**SITE, "database": "DB2"}},
        "queues": [{"name": "hr.q", "site": "s1"}, {"name": "hr.q", "site": "s2"}],
        "propagations": [{"name": "p", "source_queue": "hr.q@s1",
                          "destination_queue": destination}],
        "idap": {"remote_sites": {"dba": {"url": "http://127.0.0.1:8043/aq"}}},
    })


def test_a_remote_destination_is_reached_by_the_idap_transport_with_its_probe() -> None:
    cfg = _cfg("cars_q2@dba")
    found = transports.transport_for(cfg, cfg.component("propagation", "p"))
    assert found is not None and found.name == "idap_http" and found.probe is not None


def test_a_local_destination_has_no_transport_and_carries_user_messages() -> None:
    cfg = _cfg("hr.q@s2")
    assert transports.transport_for(cfg, cfg.component("propagation", "p")) is None
    assert [c.name for c in transports.carriers()] == ["user_messages"]
