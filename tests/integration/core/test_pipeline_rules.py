"""Rule sets wired into the pipeline: a negative propagation rule and apply-time row migration."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.apply.engine import apply_once, targets_of
from changeflow.capture.snapshot import run_capture
from changeflow.config import load_config
from changeflow.errors import ConfigError
from changeflow.propagation import propagate_once
from changeflow.rules import RuleRegistry, admin, save_rules
from changeflow.runner import rule_filter_for
from changeflow.targets.read import read_table

pytestmark = pytest.mark.spark
REGIONS = "region_id int, region_name string, zone int"


def with_rules(pipeline_path: Path) -> None:
    reg = RuleRegistry()
    admin.add_table_propagation_rules(
        reg, "hr.staff", "p12", "strmadmin.streams_queue", "strmadmin.streams_queue@site2",
        inclusion_rule=False)
    admin.add_subset_rules(reg, "hr.regions", "zone = 1", "apply", "ap",
                           "strmadmin.streams_queue")
    save_rules(reg, pipeline_path.parent / "rules.yaml")
    text = pipeline_path.read_text().replace("version: 1", "version: 1\nrules: rules.yaml", 1)
    pipeline_path.write_text(text)


def test_rules_filter_and_migrate_rows(spark, pipeline, snapshot) -> None:  # type: ignore[no-untyped-def]
    path = Path(pipeline.source_path)
    with_rules(path)
    cfg = load_config(path)
    assert rule_filter_for(cfg, "capture", "cap") is None  # no rule set: everything passes

    def run() -> None:
        run_capture(spark, cfg, "cap", rule_filter_for(cfg, "capture", "cap"))
        res = propagate_once(spark, cfg, "p12", rule_filter=rule_filter_for(cfg, "propagation", "p12"))
        assert res.messages_discarded == res.messages_read - res.messages_propagated
        apply_once(spark, cfg, "ap", rule_filter=rule_filter_for(cfg, "apply", "ap"))

    snapshot("hr.regions", 1, [(1, "Europe", 1), (2, "Americas", 1), (3, "Asia", 2)], REGIONS)
    snapshot("hr.staff", 1, [(1, "King")], "staff_id int, name string")
    run()
    cat = targets_of(cfg, cfg.applies[0])
    assert "hr.staff" not in cat.names(spark)  # discarded by the negative propagation rule

    def regions() -> list[tuple]:
        return sorted(tuple(r) for r in read_table(spark, cat, "hr.regions").collect())

    assert regions() == [(1, "Europe", 1), (2, "Americas", 1)]  # the subset: zone = 1
    # Region 3 moves into the subset (UPDATE -> INSERT), region 2 moves out (UPDATE -> DELETE).
    snapshot("hr.regions", 2, [(1, "Europe", 1), (2, "Americas", 2), (3, "Asia", 1)], REGIONS)
    run()
    assert regions() == [(1, "Europe", 1), (3, "Asia", 1)]


def test_undefined_rule_set_is_refused_at_load(pipeline) -> None:  # type: ignore[no-untyped-def]
    from changeflow.clients import check_references

    path = Path(pipeline.source_path)
    (path.parent / "rules.yaml").write_text("rules: {}\nrule_sets: {}\nclients: {}\n")
    text = path.read_text().replace("version: 1", "version: 1\nrules: rules.yaml", 1)
    text = text.replace("{name: ap, queue:", "{name: ap, rule_sets: {positive: NOPE}, queue:")
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"applies\.0\.rule_sets.*NOPE"):
        check_references(load_config(path))
