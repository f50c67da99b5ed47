"""Suites on disk, blocking configuration and the error a blocking failure raises."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.config import load_config
from changeflow.errors import ConfigError, TerminalError
from changeflow.quality import facts, policy
from changeflow.quality.policy import QualityError, QualityReport
from changeflow.quality.validator import CheckResult, SuiteRun, suite_definition, suite_names

PIPELINE = """
version: 1
sites:
  s1: {staging_root: st, target_root: tg, state_url: "sqlite:///state.db", database: DBS1}
queues: [{name: hr.q, site: s1}]
"""


def _cfg(tmp_path: Path, quality: str = ""):  # type: ignore[no-untyped-def]
    (tmp_path / "p.yaml").write_text(PIPELINE + quality)
    return load_config(tmp_path / "p.yaml")


def test_every_expectation_names_a_check_once() -> None:
    checks = policy.all_checks()
    assert len(checks) == len(set(checks))
    for name in suite_names():
        spec = suite_definition(name)
        assert spec["name"] == name and spec["meta"]["version"] >= 1
        assert all(e["meta"]["description"] for e in spec["expectations"])


def test_fact_columns_match_the_suites() -> None:
    cols = {e["kwargs"].get("column") for e in suite_definition("lcr_batch")["expectations"]}
    cols.discard(None)
    assert cols == {f"{c}_violations" for c in facts.MESSAGE_CHECKS} | set(
        facts.TRANSACTION_CHECKS)
    pairs = {e["meta"]["check"]: (e["kwargs"]["column_A"], e["kwargs"]["column_B"])
             for e in suite_definition("lcr_batch")["expectations"] if "column_A" in e["kwargs"]}
    assert pairs == {"unique_msg_id": ("distinct_ids", "messages_with_id"),
                     "hop_reconciled": ("messages_read", "messages_accounted")}


def test_default_blocking_set(tmp_path: Path) -> None:
    blocks = policy.blocking_policy(_cfg(tmp_path))
    assert blocks("insert_no_old_values") and blocks("target_rows_reconcile")
    assert blocks("hop_reconciled") and blocks("unique_msg_id")
    assert not blocks("commit_order_across_batches")


def test_configured_blocking_and_warn_only(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "quality: {blocking: [unique_msg_id, update_has_key], "
                         "warn_only: [update_has_key]}\n")
    blocks = policy.blocking_policy(cfg)
    assert blocks("unique_msg_id")
    assert not blocks("update_has_key") and not blocks("insert_no_old_values")


def test_unknown_check_is_a_config_error(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "quality: {warn_only: [no_such_check]}\n")
    with pytest.raises(ConfigError, match=r"quality.warn_only.0: unknown quality check"):
        policy.blocking_policy(cfg)


def test_quality_section_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="quality.sample_rows"):
        _cfg(tmp_path, "quality: {sample_rows: 0}\n")
    cfg = _cfg(tmp_path, "quality: {enabled: false, data_docs_dir: docs}\n")
    assert not cfg.quality.enabled
    assert cfg.quality.data_docs_dir == str((tmp_path / "docs").resolve())


def test_error_names_expectation_samples_and_quarantine() -> None:
    bad = CheckResult("insert_no_old_values", "expect_column_values_to_be_in_set",
                      {"column": "insert_no_old_values"}, success=False, unexpected_count=2,
                      element_count=10, samples=[{"msg_id": "m1"}])
    warn = CheckResult("commit_order_across_batches", "x", {}, success=False, blocking=False)
    report = QualityReport("propagation:p", "hr.q", "b1", 10,
                           runs=[SuiteRun("lcr_batch", [bad, warn], {})],
                           quarantine_path="/q/b1")
    err = QualityError(report)
    assert isinstance(err, TerminalError) and err.report is report
    text = str(err)
    for part in ("propagation:p", "hr.q", "insert_no_old_values", "2 of 10 rows", '"m1"',
                 "/q/b1"):
        assert part in text
    assert report.status == "failed" and report.warnings == [warn]
