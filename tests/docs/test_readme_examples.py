"""The README and ``docs/*.md`` stay true: every usage example runs, as written, after a demo.

How the documents say what runs (see ``docs/cli.md``, "The examples are tested"):

* fenced blocks tagged ``bash``, ``sh``, ``shell`` or ``console`` are run, one command
  per line (a trailing ``\\`` joins lines; in a block with ``$ `` prompts only the
  prompted lines are commands, the rest is their output);
* ``export NAME=value`` sets the environment of the document's later commands; every
  document starts from what the README exports (its ``export`` lines are applied first
  when the README's own examples were not selected), and nothing else is set but what
  a user who activated the project's virtualenv has (a temporary ``HOME``, a plain
  ``PATH`` with the venv's ``bin`` in front, ``VIRTUAL_ENV``);
* ``<!-- docs-test: skip: REASON -->`` before a block skips it, visibly (set-up commands
  CI runs anyway, servers, synopses with placeholders);
* ``<!-- docs-test: exit N -->`` before a block: its commands exit N (an error shown on
  purpose), and still print no traceback;
* any other block (untagged, ``text``, ``yaml``, ``python``) is not run, and a line in it
  that looks like a command must be marked ``skip``: nothing is left out silently.

The examples run in a temporary copy of the project (its tracked and new files, the
project's ``.venv``), after the demo ran there once (``scripts/demo.sh`` on the initial
snapshot alone), in document order. An example fails if it exits otherwise than documented
or prints a Python traceback.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHELL_TAGS = {"bash", "sh", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(skip|exit)\b:?\s*(.*?)\s*-->\s*$")
COMMAND_LIKE = re.compile(
    r"^\s*(\$ |changeflow\s|make\s|scripts/|\.venv/|airflow\s|pytest\s|curl\s|export\s)")
#: commands that must never run here, marked or not: set-up CI runs, servers
NEVER = re.compile(r"^\s*(make\s+(demo|test|test-fast|setup|airflow|bench|cluster)\b|"
                   r"changeflow\s+(\S+\s+)*serve\b|airflow\s+(standalone|api-server|scheduler)\b|"
                   r"scripts/(airflow|demo)\.sh\b)")
#: the PATH a login shell starts with on Debian (root's: runuser is in /usr/sbin)
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


@dataclass
class Example:
    """One command of a document, where it is, and what it should do."""

    file: str
    line: int
    command: str
    expect: int = 0
    skip: str | None = None

    @property
    def id(self) -> str:
        short = re.sub(r"\s+", " ", self.command)
        return f"{self.file}:{self.line}: {short[:70]}"


@dataclass
class Block:
    """A fenced block: its tag, first line number, lines and the marker before it."""

    file: str
    line: int
    tag: str
    lines: list[str]
    marker: tuple[str, str] | None = None


@dataclass
class Parsed:
    """What a set of documents holds: examples to run, skipped blocks, problems."""

    examples: list[Example] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def blocks(name: str, text: str) -> Iterator[Block]:
    """The fenced blocks of a Markdown text, with the docs-test marker before each."""
    lines = text.splitlines()
    i, marker = 0, None
    while i < len(lines):
        m = MARKER.search(lines[i])
        fence = FENCE.match(lines[i])
        if m:
            marker = (m.group(1), m.group(2))
        elif fence:
            ticks, start, body = fence.group(2), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(ticks):
                body.append(lines[i])
                i += 1
            yield Block(name, start, fence.group(3).lower(), body, marker)
            marker = None
        elif lines[i].strip():
            marker = None  # a marker counts only right before its block
        i += 1


def commands(block: Block) -> list[tuple[int, str]]:
    """(line number, command) of a shell block: continuations joined, output left out."""
    prompted = any(ln.lstrip().startswith("$ ") for ln in block.lines)
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for offset, raw in enumerate(block.lines, start=block.line + 1):
        text = raw.rstrip()
        if pending is not None:
            text = pending[1] + "\n" + text
        elif prompted:
            if not text.lstrip().startswith("$ "):
                continue
            text = text.lstrip()[2:]
        elif not text.strip() or text.lstrip().startswith("#"):
            continue
        start = pending[0] if pending else offset
        if text.endswith("\\"):
            pending = (start, text)
            continue
        pending = None
        out.append((start, text))
    return out


def parse(documents: list[tuple[str, str]]) -> Parsed:
    """Examples, skipped blocks and unmarked command lines of (name, text) documents."""
    parsed = Parsed()
    for name, text in documents:
        for b in blocks(name, text):
            kind, arg = b.marker or ("", "")
            if kind == "skip":
                if not arg:
                    parsed.problems.append(f"{name}:{b.line}: a skip marker needs a reason")
                first = next((ln.strip() for ln in b.lines if ln.strip()), "(empty block)")
                parsed.examples.append(Example(name, b.line, first, skip=arg or "no reason"))
                continue
            if b.tag not in SHELL_TAGS:
                found = [(n, ln) for n, ln in enumerate(b.lines, start=b.line + 1)
                         if COMMAND_LIKE.match(ln)]
                if found:
                    n, ln = found[0]
                    parsed.problems.append(
                        f"{name}:{n}: a command in a block that is not run ({b.tag or 'no'} "
                        f"tag): tag the block bash/console, or mark it <!-- docs-test: "
                        f"skip: why -->: {ln.strip()}")
                continue
            expect = int(arg) if kind == "exit" else 0
            for n, cmd in commands(b):
                if NEVER.match(cmd):
                    parsed.problems.append(f"{name}:{n}: `{cmd}` must not run in this test; "
                                           "mark its block <!-- docs-test: skip: why -->")
                else:
                    parsed.examples.append(Example(name, n, cmd, expect))
    return parsed


README = "README.md"
DOCUMENTS = [ROOT / README, *sorted((ROOT / "docs").glob("*.md"))]
PARSED = parse([(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in DOCUMENTS])


def test_every_command_in_the_docs_is_run_or_visibly_skipped() -> None:
    assert not PARSED.problems, "\n".join(PARSED.problems)
    run = [e for e in PARSED.examples if e.skip is None]
    assert any(e.file == "README.md" and "add-table-rules" in e.command for e in run)
    assert any(e.file == "README.md" and e.command.startswith("make demo") and e.skip
               for e in PARSED.examples)


SAMPLE = """
Set up:

<!-- docs-test: skip: CI runs it -->
```bash
make demo
```

```bash
export A=1
changeflow queues list   # a comment
changeflow rules add-table-rules --table hr.x \\
    --streams-type apply
```

<!-- docs-test: exit 1 -->
```console
$ changeflow rules check "x ="
Error: line 1, column 4: ...
```

```
changeflow schedules NAME      # a synopsis nobody marked
```

```text
+---+ a diagram
```

```bash
make airflow
```
"""


def test_the_convention_is_parsed_as_documented() -> None:
    parsed = parse([("doc.md", SAMPLE)])
    got = [(e.line, e.command, e.expect, e.skip) for e in parsed.examples]
    assert got == [
        (5, "make demo", 0, "CI runs it"),
        (10, "export A=1", 0, None),
        (11, "changeflow queues list   # a comment", 0, None),
        (12, "changeflow rules add-table-rules --table hr.x \\\n    --streams-type apply",
         0, None),
        (18, 'changeflow rules check "x ="', 1, None),
    ]
    assert len(parsed.problems) == 2
    assert parsed.problems[0].startswith("doc.md:23: a command in a block that is not run")
    assert parsed.problems[1].startswith("doc.md:31: `make airflow` must not run")


# --------------------------------------------------------------------------- running


def _copy_project(dest: Path) -> None:
    """The project as a fresh clone would have it, plus files not committed yet."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
        capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    (dest / "jars").symlink_to(ROOT / "jars")  # what `make setup` fetched (git-ignored)


UNSAFE = re.compile(r"[$`*?~\[\]{}\\'\"]")


def cli_args(command: str, env: dict[str, str], project: Path) -> list[str] | None:
    """The arguments of a plain ``changeflow …`` line that runs the project's command.

    ``None`` for anything the shell must interpret (variables, quotes, globs, ``;``,
    pipes, redirections) and for a ``changeflow`` the document's ``PATH`` does not lead
    to: such lines run in bash, so a document that puts another ``PATH`` still fails.
    """
    if UNSAFE.search(command.partition(" #")[0]):
        return None
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    words = list(lex)
    if not words or words[0] != "changeflow" or any(set(w) <= set("();<>|&") for w in words):
        return None
    found = shutil.which("changeflow", path=env.get("PATH", ""))
    mine = project / ".venv" / "bin" / "changeflow"
    if found is None or Path(found).resolve() != mine.resolve():
        return None
    return words[1:]


class CliHost:
    """``tests/docs/cli_host.py``: runs ``changeflow`` lines as forked fresh processes."""

    def __init__(self, base: Path, env: dict[str, str]) -> None:
        self.dir = base
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "python"), str(Path(__file__).with_name("cli_host.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=base)

    def run(self, args: list[str], cwd: Path, env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        out, err = self.dir / "host.out", self.dir / "host.err"
        req = {"args": args, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err)}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self.proc.stdout.readline())["pid"]
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)  # the command's own process, forked for it
        code = json.loads(self.proc.stdout.readline())["code"]
        return subprocess.CompletedProcess(["changeflow", *args], code, out.read_text(),
                                           err.read_text())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@dataclass
class Shell:
    """The temporary project and the environment each document has set so far.

    A document starts from the environment the README leaves (its exports); what a
    document exports holds for the rest of that document only. Plain ``changeflow``
    lines run through :class:`CliHost` (a fresh process each, without the seconds of
    start-up), the rest in bash.
    """

    project: Path
    base: dict[str, str]
    host: CliHost | None = None
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    readme_exports: list[str] = field(default_factory=list)

    def env(self, file: str) -> dict[str, str]:
        if file != README and README not in self.envs:
            self._readme_env()
        if file not in self.envs:
            self.envs[file] = dict(self.envs.get(README, self.base))
        return self.envs[file]

    def _readme_env(self) -> None:
        """The README's exports, when its own examples were not run (``-k`` a document)."""
        for command in self.readme_exports:
            r = self.export(README, command)
            assert r.returncode == 0, f"README.md: `{command}` failed\n{r.stderr}"

    def run(self, file: str, command: str,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        args = cli_args(command, self.env(file), self.project)
        if args is not None and self.host is not None:
            return self.host.run(args, self.project, self.env(file), timeout)
        return subprocess.run(["bash", "-c", command], cwd=self.project, env=self.env(file),
                              capture_output=True, text=True, timeout=timeout)

    def export(self, file: str, command: str) -> subprocess.CompletedProcess[str]:
        """Run an ``export`` line and keep the environment it leaves, for this document."""
        r = subprocess.run(["bash", "-c", f"{command}\nenv -0"], cwd=self.project,
                           env=self.env(file), capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            self.envs[file] = dict(kv.split("=", 1) for kv in r.stdout.split("\0") if "=" in kv)
            r.stdout = ""
        return r


@pytest.fixture(scope="session")
def demo_shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    """A copy of the project where the demo has run once, and a bare environment."""
    base = tmp_path_factory.mktemp("readme")
    project, home = base / "project", base / "home"
    home.mkdir()
    _copy_project(project)
    # TMPDIR stays unset, as for a newcomer: the demo's PostgreSQL (run as user postgres)
    # cannot enter pytest's private temporary directories.
    env = {"HOME": str(home), "PATH": STANDARD_PATH, "LANG": "C.UTF-8"}
    demo = subprocess.run(
        ["scripts/env.sh", "bash", "scripts/demo.sh"], cwd=project, capture_output=True,
        text=True, timeout=1200, env={**env, "CHANGEFLOW_DEMO_ROUNDS": "0"})
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-4000:]
    # the documents' reader has activated the project's virtualenv (`changeflow` on PATH)
    venv = project / ".venv"
    env = {**env, "PATH": f"{venv / 'bin'}:{STANDARD_PATH}", "VIRTUAL_ENV": str(venv)}
    host = CliHost(base, env)
    exports = [e.command for e in PARSED.examples
               if e.file == README and e.skip is None and re.match(r"^\s*export\s", e.command)]
    yield Shell(project, env, host, readme_exports=exports)
    host.close()


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.airflow
@pytest.mark.parametrize("example", PARSED.examples, ids=[e.id for e in PARSED.examples])
def test_documented_command_works(request: pytest.FixtureRequest, example: Example) -> None:
    if example.skip is not None:
        pytest.skip(f"marked in the document: {example.skip}")
    demo_shell: Shell = request.getfixturevalue("demo_shell")
    if re.match(r"^\s*export\s", example.command):
        r = demo_shell.export(example.file, example.command)
    else:
        r = demo_shell.run(example.file, example.command)
    out = f"$ {example.command}\n{r.stdout}{r.stderr}"
    assert "Traceback (most recent call last)" not in out, out[-6000:]
    assert r.returncode == example.expect, (
        f"{example.file}:{example.line} exited {r.returncode}, documented "
        f"{example.expect}\n{out[-6000:]}")

