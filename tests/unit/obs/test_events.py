"""Run events: log records of ``changeflow.events``, routed by ``CHANGEFLOW_EVENTS``.

They never reach standard output: a command's or a benchmark's output stays its own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow import logs


@pytest.fixture(autouse=True)
def events_logger_as_found() -> Iterator[None]:
    """Each test starts with an unconfigured events logger and leaves it as it found it."""
    log = logging.getLogger(logs.EVENTS_LOGGER)
    saved = (list(log.handlers), log.level, log.propagate)
    # an earlier test's dictConfig (Airflow's, in-process) may have disabled existing
    # loggers or logging as a whole: these tests are about this logger alone
    was_disabled, disabled_level = log.disabled, logging.root.manager.disable
    log.disabled = False
    logging.disable(logging.NOTSET)
    for h in saved[0]:
        log.removeHandler(h)
    log.setLevel(logging.NOTSET)
    # pytest attaches its capture handlers to every non-propagating logger when a
    # test's call phase starts: an earlier run left this one non-propagating, so
    # without this the test would begin with foreign handlers on it
    log.propagate = True
    try:
        yield
    finally:
        log.disabled = was_disabled
        logging.disable(disabled_level)
        for h in list(log.handlers):
            log.removeHandler(h)
            if h not in saved[0]:
                h.close()
        for h in saved[0]:
            log.addHandler(h)
        log.setLevel(saved[1])
        log.propagate = saved[2]


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_events_are_json_lines_on_stderr_by_default(capfd: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(logs.EVENTS_ENV, raising=False)
    with logs.context(component="capture:c1", run_id="r1"):
        logs.event("end", messages=4, seconds=0.5)
    out, err = capfd.readouterr()
    assert out == ""
    (rec,) = _json_lines(err)
    assert (rec["logger"], rec["event"], rec["component"], rec["run_id"], rec["messages"]) == (
        "changeflow.events", "end", "capture:c1", "r1", 4)


def test_events_go_to_the_configured_file_and_nowhere_else(
        tmp_path: Path, capfd: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "logs" / "events.jsonl"
    monkeypatch.setenv(logs.EVENTS_ENV, str(path))
    logs.event("start", component="apply:a", run_id="r2")
    logs.event("end", component="apply:a", run_id="r2", status="succeeded")
    assert capfd.readouterr() == ("", "")
    lines = _json_lines(path.read_text())
    assert [(r["event"], r["component"]) for r in lines] == [("start", "apply:a"),
                                                              ("end", "apply:a")]
    # another process (or a later run) appends: nothing written before is lost
    logging.getLogger(logs.EVENTS_LOGGER).handlers[0].close()
    logs.event("progress", component="apply:a", run_id="r3")
    assert [r["event"] for r in _json_lines(path.read_text())] == ["start", "end", "progress"]


def test_events_follow_a_changed_setting(tmp_path: Path, capfd: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(logs.EVENTS_ENV, "off")
    logs.event("start", component="capture:c")
    assert capfd.readouterr() == ("", "")
    monkeypatch.setenv(logs.EVENTS_ENV, str(tmp_path / "e.jsonl"))
    logs.event("end", component="capture:c")
    monkeypatch.setenv(logs.EVENTS_ENV, "stderr")
    logs.event("error", component="capture:c")
    out, err = capfd.readouterr()
    assert out == "" and [r["event"] for r in _json_lines(err)] == ["error"]
    assert [r["event"] for r in _json_lines((tmp_path / "e.jsonl").read_text())] == ["end"]
    assert len(logging.getLogger(logs.EVENTS_LOGGER).handlers) == 1


def test_an_unwritable_file_falls_back_to_stderr_and_says_so(
        tmp_path: Path, capfd: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a-file").write_text("")
    bad = tmp_path / "a-file" / "events.jsonl"  # its parent is a file
    monkeypatch.setenv(logs.EVENTS_ENV, str(bad))
    with caplog.at_level(logging.WARNING, logger="changeflow.logs"):
        logs.event("end", component="propagation:p")
    assert any(str(bad) in r.getMessage() and "CHANGEFLOW_EVENTS" in r.getMessage()
               for r in caplog.records)
    out, err = capfd.readouterr()
    assert out == "" and [r["event"] for r in _json_lines(err)] == ["end"]


def test_a_program_configuring_the_logger_keeps_its_handlers(
        capfd: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(logs.EVENTS_ENV, raising=False)
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    log = logging.getLogger(logs.EVENTS_LOGGER)
    log.addHandler(Keep())
    log.setLevel(logging.INFO)
    logs.event("start", component="capture:c")
    assert [r.fields["event"] for r in seen] == ["start"]  # type: ignore[attr-defined]
    assert capfd.readouterr() == ("", "")
    assert [type(h).__name__ for h in log.handlers] == ["Keep"]
