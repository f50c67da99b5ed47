"""Bad command-line input of every kind: a clear error naming the problem, nothing changed.

Each case runs against a copy of the demo configuration (and, for ``quality``, state
stores that exist), and checks the exit code, that the message names what was wrong,
that no traceback is printed, and that no file under the project changed or appeared.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from changeflow.cli import main

C = ["--config", "config/demo.yaml"]
USAGE, REFUSED = 2, 1

CASES = [
    # the command line itself
    (["nope"], USAGE, "No such command 'nope'"),
    (["--nope"], USAGE, "No such option '--nope'"),
    # run
    (["run", "teleport", "capture_hr", *C], USAGE,
     "Invalid value for '{capture|propagation|apply|verify}': 'teleport' is not one of"),
    (["run", "capture", "nope", *C], REFUSED, "no capture named 'nope'"),
    (["run", "apply", "capture_hr", *C], REFUSED, "no apply named 'capture_hr'"),
    (["run", "capture"], USAGE, "Missing argument 'NAME'"),
    (["run", "capture", "capture_hr"], USAGE,
     "Missing option '--config' (env var: 'CHANGEFLOW_CONFIG')"),
    (["run", "capture", "capture_hr", "--config", "config/absent.yaml"], USAGE,
     "File 'config/absent.yaml' does not exist"),
    (["run", "capture", "capture_hr", "--config", "config"], USAGE,
     "File 'config' is a directory"),
    (["run", "capture", "capture_hr", "--config", "config/demo-rules.yaml"], REFUSED,
     "config/demo-rules.yaml is a rules file: --config takes the pipeline file"),
    (["run", "capture", "capture_hr", "--config", "config/bad.yaml"], REFUSED,
     "config/bad.yaml:sites.site1.target_root: Field required"),
    (["run", "capture", "capture_hr", "--config", "config/broken.yaml"], REFUSED,
     "config/broken.yaml: not valid YAML"),
    (["run", "capture", "capture_hr", *C, "-o", "xml"], USAGE,
     "Invalid value for '--output' / '-o': 'xml' is not one of 'table', 'json', 'yaml'"),
    (["run", "capture", "capture_hr", *C, "extra"], USAGE, "unexpected extra argument (extra)"),
    # demo
    (["demo", "generate", "--root", "work/src", "--rounds", "-1"], USAGE,
     "-1 is not in the range 0<=x<=1000"),
    (["demo", "generate", "--root", "work/src", "--rounds", "two"], USAGE,
     "'two' is not a valid integer"),
    (["demo", "generate"], USAGE, "Missing option '--root'"),
    (["demo", "generate", "--root", "config/demo.yaml"], USAGE, "is a file"),
    # rules
    (["rules", "add-table-rules", *C, "--streams-type", "apply", "--streams-name", "a"], USAGE,
     "Missing option '--table'"),
    (["rules", "add-table-rules", *C, "--table", "hr.x", "--streams-type", "applier",
      "--streams-name", "a"], USAGE, "Invalid value for '--streams-type': 'applier'"),
    (["rules", "add-schema-rules", "--config", "config/demo-rules.yaml", "--schema", "hr",
      "--streams-type", "apply", "--streams-name", "a"], REFUSED, "is a rules file"),
    (["rules", "add-message-rule", *C, "--message-type", "t", "--rule-condition", ":msg.x = ",
      "--streams-type", "dequeue", "--streams-name", "m"], REFUSED, "line 1, column"),
    (["rules", "add-table-propagation-rules", *C, "--table", "hr.x", "--streams-name", "p"],
     USAGE, "Missing option '--source-queue'"),
    (["rules", "remove-rule", *C, "--streams-type", "apply", "--streams-name", "apply_dbs2"],
     USAGE, "Missing argument 'RULE_NAME'"),
    (["rules", "remove-rule", "NOPE", *C, "--streams-type", "apply", "--streams-name",
      "apply_dbs2"], REFUSED, "rule NOPE is not in the positive rule set RULESET$_7"),
    (["rules", "list", *C, "--client", "nobody"], REFUSED,
     "no client 'nobody' in config/demo-rules.yaml (clients: apply_dbs2, capture_hr, "
     "dbs1_to_dbs2)"),
    (["rules", "list", *C, "-o", "csv"], USAGE, "'csv' is not one of 'table', 'json', 'yaml'"),
    (["rules", "show", "NOPE", *C], REFUSED, "no rule 'NOPE' in config/demo-rules.yaml"),
    (["rules", "check", ":dml.get_object_owner() = 'HR' AND"], REFUSED, "line 1, column 35"),
    (["rules", "check", ""], REFUSED, "line 1, column 1"),
    # quality
    (["quality", "latest", *C, "--output", "xml"], USAGE, "'xml' is not one of"),
    (["quality", "latest", "--config", "config/absent.yaml"], USAGE, "does not exist"),
    (["quality", "docs", *C, "--out", "config/demo.yaml"], USAGE, "is a file"),
]


@pytest.fixture
def bad_configs(project: Path) -> Path:
    (project / "config" / "bad.yaml").write_text(
        "version: 1\nsites:\n  site1: {staging_root: s, state_url: 'sqlite:///x.db', "
        "database: D}\n")
    (project / "config" / "broken.yaml").write_text("version: 1\nsites: {site1: [\n")
    return project


@pytest.mark.parametrize(("args", "code", "message"), CASES,
                         ids=[" ".join(a)[:60] for a, _, _ in CASES])
def test_bad_arguments_are_named_and_change_nothing(
        bad_configs: Path, tree: Callable[[Path], dict[str, str]], args: list[str], code: int,
        message: str) -> None:
    before = tree(bad_configs)
    r = CliRunner().invoke(main, args)
    out = r.stdout + r.stderr
    assert r.exit_code == code, out
    assert message in r.stderr, out
    assert "Traceback" not in out
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert tree(bad_configs) == before


def test_help_works_everywhere_without_a_configuration(project: Path) -> None:
    runner = CliRunner()
    groups = ["run", "demo", "demo generate", "rules", "rules add-table-rules",
              "rules remove-rule", "rules list", "rules show", "rules check", "quality",
              "quality latest", "queues", "queues list", "schedules", "schedules sync"]
    for group in groups:
        r = runner.invoke(main, [*group.split(), "--help"], prog_name="changeflow")
        assert r.exit_code == 0 and "Usage: changeflow" in r.stdout, (group, r.output)
