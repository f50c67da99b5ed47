"""The mcq: section of a pipeline file: validation with the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.config import load_config
from changeflow.errors import ConfigError
from changeflow.mcq.config import seconds
from changeflow.mcq.store import state_url

HEAD = """
version: 1
sites:
  s1: {staging_root: st, target_root: tg, state_url: "sqlite:///s1.db", database: S1.EXAMPLE.COM}
"""


def load(tmp_path: Path, body: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + body)
    return load_config(path)


def test_a_valid_section(tmp_path: Path) -> None:
    cfg = load(tmp_path, """
mcq:
  state_url: sqlite:///mcq/state.db
  tables: [{tname: person, subtype: Telephone}]
  listeners: [{proc_name: LDAP, frequency: 5s, handler: {type: xml, directory: feed}}]
  interests: [{proc_name: LDAP, tname: PERSON, subtype: "*"}]
""")
    assert cfg.mcq is not None and cfg.mcq.tables[0].tname == "PERSON"
    assert state_url(cfg) == f"sqlite:///{tmp_path}/mcq/state.db"
    assert cfg.mcq.listeners[0].runs_as == "poller"


@pytest.mark.parametrize("body,key,msg", [
    ("mcq: {tables: []}", "mcq", "exactly one of site and state_url"),
    ("mcq: {site: s1, listeners: [{proc_name: A}], interests: [{proc_name: B, tname: T}]}",
     "mcq.interests.0.proc_name", "unknown listener 'B'"),
    ("mcq: {site: s1, listeners: [{proc_name: A}], interests: [{proc_name: A, tname: T}]}",
     "mcq.interests.0", "unknown table 'T'"),
    ("mcq: {site: s1, listeners: [{proc_name: A, frequency: often}]}",
     "mcq.listeners.0.frequency", "duration 'often'"),
    ("mcq: {site: s1, listeners: [{proc_name: 'a b'}]}", "mcq.listeners.0.proc_name",
     "listener name 'a b'"),
    ("mcq: {site: s1, listeners: [{proc_name: A}, {proc_name: A}]}", "mcq", "duplicate 'A'"),
    ("mcq: {site: s1, listeners: [{proc_name: A, handler: {type: xml}}]}",
     "mcq.listeners.0.handler", "exactly one of directory and url"),
    ("mcq: {site: s1, listeners: [{proc_name: A, handler: {type: pg_import, source: x, "
     "target: y, import_table: t, queries: {P: q}}}]}", "mcq.listeners.0.handler.source",
     "unknown source 'x'"),
    ("mcq: {site: s1, sources: [{name: x}]}", "mcq.sources.0", "exactly one of url_env"),
    ("mcq: {site: s1, bogus: 1}", "mcq.bogus", "Extra inputs"),
])
def test_bad_sections_name_the_key(tmp_path: Path, body: str, key: str, msg: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, body)
    assert key in str(err.value) and msg in str(err.value), str(err.value)
    assert str(tmp_path / "p.yaml") in str(err.value)


def test_unknown_site_is_reported_on_use(tmp_path: Path) -> None:
    cfg = load(tmp_path, "mcq: {site: nowhere}")
    with pytest.raises(ConfigError, match="mcq.site: unknown site 'nowhere'"):
        state_url(cfg)


def test_no_section(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no mcq section"):
        state_url(load(tmp_path, ""))


def test_durations() -> None:
    assert [seconds(x) for x in ("5s", "3min", "2h", "1d", "daily", 0.5)] == [
        5.0, 180.0, 7200.0, 86400.0, 86400.0, 0.5]
    for bad in ("-1s", "0", "soon", -3):
        with pytest.raises(ValueError):
            seconds(bad)


def test_the_demo_configuration_loads() -> None:
    cfg = load_config(Path(__file__).resolve().parents[3] / "config" / "demo-mcq.yaml")
    assert cfg.mcq is not None
    assert [li.proc_name for li in cfg.mcq.listeners] == ["FEED", "Insite", "LDAP"]
