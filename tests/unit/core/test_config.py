"""Configuration loading: validation with errors naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.config import load_config
from changeflow.errors import ConfigError

GOOD = """
version: 1
sites:
  s1: {staging_root: st, target_root: tg, state_url: "sqlite:///state.db", database: DBS1}
queues:
  - {name: strmadmin.q1, site: s1}
  - {name: strmadmin.q2, site: s1}
captures:
  - name: cap
    queue: strmadmin.q1
    source: {type: snapshot, database: DBS1, root: src, tables: [{name: hr.regions, key: [region_id]}]}
propagations:
  - {name: p, source_queue: strmadmin.q1, destination_queue: strmadmin.q2}
applies:
  - {name: a, queue: strmadmin.q2}
"""


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "pipeline.yaml"
    p.write_text(text)
    return str(p)


def test_good_config_resolves_paths_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CF_STAGE", "s3a://bucket/stage")
    cfg = load_config(write(tmp_path, GOOD.replace("staging_root: st", "staging_root: \"${CF_STAGE}\"")))
    site = cfg.sites["s1"]
    assert site.staging_root == "s3a://bucket/stage"
    assert site.target_root == str(tmp_path / "tg")
    assert site.state_url == f"sqlite:///{tmp_path / 'state.db'}"
    assert cfg.qualify("strmadmin.q1") == "strmadmin.q1@s1"
    assert cfg.component("apply", "a").queue == "strmadmin.q2"


def test_env_default_is_used(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, GOOD.replace("staging_root: st",
                                                   "staging_root: \"${CF_UNSET_VAR:-/abs/st}\"")))
    assert cfg.sites["s1"].staging_root == "/abs/st"


@pytest.mark.parametrize(
    ("mutation", "key", "message"),
    [
        (("{name: a, queue: strmadmin.q2}", "{name: a, queue: strmadmin.nope}"), "applies.0.queue", "unknown queue"),
        (("name: strmadmin.q1,", "name: q1,"), "queues.0.name", "owner.name"),
        (("key: [region_id]", "key: []"), "captures.0.source.tables.0.key", "at least 1"),
        (("site: s1}\n  - {name: strmadmin.q2", "site: s9}\n  - {name: strmadmin.q2"),
         "queues.0.site", "unknown site"),
        (("{name: a, queue", "{name: a, colour: red, queue"), "applies.0.colour", "not permitted"),
        (("type: snapshot", "type: oracle"), "captures.0.source", ""),
        (("{name: a, queue", "{name: a, parallelism: 0, queue"), "applies.0.parallelism",
         "greater than or equal to 1"),
        (("{name: a, queue", "{name: a, keep_running: {every: 60, minutes: 1}, queue"),
         "applies.0.keep_running", "every (60 s) must be shorter than the 54 s a DAG run of 1"
         " minutes starts runs for"),
        (("{name: a, queue", "{name: a, keep_running: {every: 0}, queue"),
         "applies.0.keep_running.every", "greater than 0"),
        (("{name: a, queue", "{name: a, keep_running: {minutes: 5}, queue"),
         "applies.0.keep_running.every", "required"),
    ],
)
def test_bad_config_names_file_and_key(
    tmp_path: Path, mutation: tuple[str, str], key: str, message: str
) -> None:
    path = write(tmp_path, GOOD.replace(*mutation))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.file == path
    assert err.value.key is not None and err.value.key.startswith(key)
    assert message in str(err.value)


def test_duplicate_propagation_pair_is_refused(tmp_path: Path) -> None:
    text = GOOD + "  - {name: p2, source_queue: strmadmin.q1, destination_queue: strmadmin.q2}\n"
    text = text.replace("applies:\n  - {name: a, queue: strmadmin.q2}\n", "") + \
        "applies:\n  - {name: a, queue: strmadmin.q2}\n"
    with pytest.raises(ConfigError, match="at most one propagation"):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("text", ["a: [unclosed", "- just\n- a list\n", ""])
def test_malformed_yaml_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="pipeline.yaml"):
        load_config(write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_an_apply_that_keeps_running_renders_its_period(tmp_path: Path) -> None:
    """The rendered spec carries the period, the interval and how long each DAG run's
    job starts runs (a tenth of the period, at most a minute, before its end)."""
    from changeflow.airflow.render import pipeline_spec

    text = GOOD.replace("{name: a, queue", "{name: a, keep_running: {every: 30}, queue")
    cfg = load_config(write(tmp_path, text))
    spec = pipeline_spec(cfg, pipeline="t", config_rel="pipeline.yaml")
    assert spec["keep_running"] == {"a": {"every": 30.0, "minutes": 60.0, "for": 3540.0}}
    short = load_config(write(tmp_path, GOOD.replace(
        "{name: a, queue", "{name: a, keep_running: {every: 2, minutes: 0.5}, queue")))
    assert pipeline_spec(short, pipeline="t", config_rel="p.yaml")["keep_running"]["a"][
        "for"] == 27.0
    assert "keep_running" not in pipeline_spec(load_config(write(tmp_path, GOOD)),
                                               pipeline="t", config_rel="p.yaml")
