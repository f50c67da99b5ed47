"""The command line as a new user tries it (issue 32, item 12).

- ``-o``/``--output``/``--json`` is accepted before or after the subcommand, by every
  listing and every command that prints a record, with the same output;
- ``changeflow apply errors show|execute|delete`` default to the pipeline's only apply.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from changeflow.cli import main

CFG = "config/demo.yaml"


def run(*args: str, code: int = 0) -> str:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == code, (args, res.output, res.exception)
    return res.output


# (group path, subcommand and its arguments): each prints a listing or a record
COMMANDS = [
    (["schedules"], ["create", "dbs1_to_dbs2", "--latency", "5"]),
    (["schedules"], ["alter", "dbs1_to_dbs2", "--latency", "4"]),
    (["schedules"], ["undeliverable"]),
    (["schedules"], ["sync"]),
    (["aq"], ["queues", "--site", "site1"]),
    (["aq"], ["queue-tables", "--site", "site1"]),
    (["aq"], ["types", "--site", "site1"]),
    (["aq", "subscribers"], ["list", "--site", "site1"]),
    (["aq"], ["set-up-queue", "app.inbox", "--site", "site1"]),
    (["queues"], ["list"]),
    (["views"], ["queues"]),
    (["rules"], ["list"]),
]


@pytest.mark.parametrize("where", ["after", "before", "root"])
@pytest.mark.parametrize(("group", "sub"), COMMANDS, ids=[" ".join(g + s[:1])
                                                          for g, s in COMMANDS])
def test_output_is_accepted_before_or_after_the_subcommand(
        project: Path, group: list[str], sub: list[str], where: str) -> None:
    if where == "after":
        args = [*group, *sub, "-o", "json", "--config", CFG]
    elif where == "before":
        args = [*group[:1], "-o", "json", *group[1:], *sub, "--config", CFG]
    else:
        args = ["--output", "json", *group, *sub, "--config", CFG]
    if group == ["schedules"]:  # the group reads --config
        args = [a for a in args if a not in ("--config", CFG)]
        args[args.index("schedules") + 1:args.index("schedules") + 1] = ["--config", CFG]
    out = run(*args)
    json.loads(out)  # JSON, not a table


def test_yaml_and_json_flag_on_the_group(project: Path) -> None:
    out = run("aq", "--json", "queues", "--site", "site1", "--config", CFG)
    assert isinstance(json.loads(out), list)
    out = run("schedules", "--config", CFG, "-o", "yaml", "create", "dbs1_to_dbs2")
    assert out.lstrip().startswith("- propagation: dbs1_to_dbs2")
    # after the subcommand wins over before it
    out = run("schedules", "--config", CFG, "-o", "yaml", "create", "dbs1_to_dbs2", "-o",
              "json")
    assert json.loads(out)[0]["propagation"] == "dbs1_to_dbs2"


def test_apply_errors_default_to_the_only_apply(project: Path) -> None:
    for sub in (["show", "99"], ["delete", "99"]):
        out = run("apply", "errors", *sub, "--config", CFG, code=1)
        assert "apply apply_dbs2 has no error 99" in out, out


def test_apply_errors_name_the_applies_when_there_are_several(project: Path) -> None:
    text = (project / CFG).read_text()
    (project / "config" / "two.yaml").write_text(text.replace(
        "applies:\n", "applies:\n  - {name: apply_b, queue: strmadmin.streams_queue@site2}\n", 1))
    for sub in (["show", "99"], ["execute", "99"], ["delete", "--all"]):
        out = run("apply", "errors", *sub, "--config", "config/two.yaml", code=2)
        assert "the pipeline has applies" in out and "--apply" in out, out
