"""Tables and the scaling plot from the newest archived benchmark results.

Usage: ``python -m bench.report [--write-readme] [--write-docs] [--plot] [--dir DIR]``.

Without options it prints the README table. ``--write-readme`` replaces the table
between ``<!-- bench-table:start -->`` and ``<!-- bench-table:end -->`` in README.md
(the headline entries of each suite's newest archive, every skipped baseline or peer,
and how many others missed);
``--write-docs`` replaces the same markers in docs/benchmarks.md with every entry;
``--plot`` draws docs/bench-scaling.png from the newest ``scaling`` archive. Nothing
here runs a benchmark: it reads ``docs/results/bench-<suite>-*.json`` only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.results import RESULTS_DIR

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"
VERDICT = {True: "met", False: "**missed**", None: "reported"}


def load_archives(directory: Path = RESULTS_DIR) -> list[dict[str, Any]]:
    """Every archived run (``bench-<suite>-*.json`` with entries), with its file name."""
    runs = []
    for path in sorted(directory.glob("bench-*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and "entries" in doc and "suite" in doc and "ended" in doc:
            runs.append({**doc, "file": path.name})
    return runs


def newest(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per suite, its newest full-size run (or its newest run when none is full size)."""
    best: dict[str, dict[str, Any]] = {}
    for r in runs:
        have = best.get(r["suite"])
        key = (r.get("size") == "full", r["ended"])
        if have is None or key > (have.get("size") == "full", have["ended"]):
            best[r["suite"]] = r
    return dict(sorted(best.items()))


def fmt(x: Any) -> str:
    """A number as a table shows it (3 significant digits, thousands separated).

    >>> fmt(1234567.8), fmt(0.123456), fmt(12.345), fmt(None)
    ('1,234,568', '0.123', '12.3', '-')
    """
    if x is None:
        return "-"
    x = float(x)
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}" if abs(x) >= 1 else f"{x:.3f}".rstrip("0").rstrip(".") or "0"


def target_text(e: dict[str, Any]) -> str:
    """``<= 0.2`` for a ratio target, ``<= 50 ms`` for a value target, ``-`` for none."""
    if e.get("target") is None:
        return "-"
    unit = "" if e.get("judged", "ratio") == "ratio" else f" {e['unit']}"
    return f"{e['direction']} {fmt(e['target'])}{unit}"


def row(e: dict[str, Any], run: dict[str, Any]) -> str:
    """One table row: benchmark, value, baseline, ratio, target, verdict, run."""
    if e.get("error"):
        return (f"| {e['name']} | suite failed: {e['error'][:120]} | | | | **missed** | "
                f"{run_label(run)} |")
    if e.get("skipped"):
        figure = f"skipped: {e['skipped']}"
    else:
        figure = f"{fmt(e.get('value'))} {e['unit']}"
    base = e["baseline"]
    if e.get("baseline_value") is not None:
        base = f"{base}: {fmt(e['baseline_value'])} {e['unit']}"
    cells = [e["name"], figure, base, fmt(e.get("ratio")), target_text(e),
             VERDICT[e.get("met")], run_label(run)]
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def run_label(run: dict[str, Any]) -> str:
    """``2026-11-28 full @abc1234`` (``+local changes`` when the tree was dirty)."""
    dirty = " +local changes" if run.get("dirty") else ""
    return f"{run['ended'][:10]} {run.get('size', '?')} @{run['commit']}{dirty}"


HEADER = ("| benchmark | figure | baseline (same run) | ratio | target | verdict | run |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")


def table(latest: dict[str, dict[str, Any]], *, headline_only: bool,
          expected: list[str] | None = None) -> str:
    """The markdown table of the newest runs (headline entries, or all of them); a
    suite in ``expected`` without any archived run gets a row saying so."""
    lines = [HEADER]
    notes = []
    order = list(expected or []) + [s for s in latest if s not in (expected or [])]
    for suite in order:
        run = latest.get(suite)
        if run is None:
            lines.append(f"| {suite} | no archived run | | | | **missed** | |")
            continue
        shown = [e for e in run["entries"]
                 if not headline_only or e.get("headline") or e.get("error")
                 or e.get("skipped")]
        lines += [row(e, run) for e in shown]
        hidden = [e for e in run["entries"] if e not in shown]
        missed = [e for e in hidden if e.get("met") is False]
        if hidden:
            notes.append(f"{suite}: {len(hidden)} more entries, {len(missed)} missed "
                         f"(`docs/results/{run['file']}`)")
    out = "\n".join(lines)
    if notes:
        out += "\n\nNot shown above: " + "; ".join(notes) + "."
    return out


def summary(latest: dict[str, dict[str, Any]], expected: list[str] | None = None) -> str:
    """A sentence: how many judged entries met their targets, and which missed."""
    entries = [e for r in latest.values() for e in r["entries"]]
    judged = [e for e in entries if e.get("met") is not None]
    missed = [e["name"] for e in judged if e["met"] is False]
    absent = [s for s in expected or [] if s not in latest]
    text = (f"{len(judged) - len(missed)} of {len(judged)} judged entries met their targets "
            f"in the newest archived runs; missed: {', '.join(missed) or 'none'}.")
    if absent:
        text += f" Suites without an archived run: {', '.join(absent)}."
    return text


def replace_between(text: str, body: str) -> str:
    """``text`` with what lies between the markers replaced by ``body``.

    Raises:
        ValueError: the markers are missing.
    """
    a, b = text.find(START), text.find(END)
    if a < 0 or b < a:
        raise ValueError(f"the markers {START} ... {END} are missing")
    return text[:a + len(START)] + "\n" + body.strip() + "\n" + text[b:]


def generated(latest: dict[str, dict[str, Any]], *, headline_only: bool,
              expected: list[str] | None = None) -> str:
    """The text the markers enclose."""
    return ("<!-- generated by `python -m bench.report --write-readme`; do not edit -->\n"
            + table(latest, headline_only=headline_only, expected=expected) + "\n\n"
            + summary(latest, expected))


def plot(run: dict[str, Any], out: Path) -> Path:
    """Draw the scaling run's curves (candidate and baseline seconds per size)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    def human(v: float, _pos: object = None) -> str:
        for div, suffix in ((1e6, "M"), (1e3, "k")):
            if v >= div:
                return f"{v / div:g}{suffix}"
        return f"{v:g}"

    curves = [e for e in run["entries"] if e.get("figures", {}).get("curve")]
    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 4), squeeze=False)
    for ax, e in zip(axes[0], curves, strict=True):
        f = e["figures"]
        xs = [p["size"] for p in f["curve"]]
        ax.plot(xs, [p["candidate_s"] for p in f["curve"]], "o-", label=f["candidate"])
        ax.plot(xs, [p["baseline_s"] for p in f["curve"]], "s--", label=f["baseline_curve"])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(human))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _p: ""))
        ax.yaxis.set_major_formatter(FuncFormatter(human))
        ax.yaxis.set_minor_formatter(FuncFormatter(human))
        ax.set_xticks(xs)
        ax.set_xlabel(f["x"])
        ax.set_ylabel("seconds (warm)")
        ax.set_title(e["name"], fontsize=10)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"Cost as the work grows ({run_label(run)})", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print or write the tables, and draw the plot."""
    p = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write-readme", action="store_true")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--plot", action="store_true")
    p.add_argument("--dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    from bench.__main__ import SUITES

    latest = newest(load_archives(args.dir))
    expected = [name for name, *_ in SUITES]
    if not latest:
        print(f"no archived results in {args.dir}", file=sys.stderr)
        return 1
    for flag, path, headline in ((args.write_readme, ROOT / "README.md", True),
                                 (args.write_docs, ROOT / "docs" / "benchmarks.md", False)):
        if flag:
            path.write_text(replace_between(path.read_text(),
                                            generated(latest, headline_only=headline,
                                                      expected=expected)))
            print(f"wrote {path}")
    if args.plot:
        if "scaling" not in latest:
            print("no archived scaling run to plot", file=sys.stderr)
            return 1
        print(f"wrote {plot(latest['scaling'], ROOT / 'docs' / 'bench-scaling.png')}")
    if not (args.write_readme or args.write_docs or args.plot):
        print(generated(latest, headline_only=True, expected=expected))
    return 0


if __name__ == "__main__":
    sys.exit(main())
