"""Where the test suite spends its time: the slowest tests of one or more pytest runs, side by side.

Run the suite with ``--durations=0`` (setup, call and teardown of every test are then listed), keep
its output, and give the logs here, oldest first::

    .venv/bin/pytest -q --durations=0 > before.log    # at the old revision
    .venv/bin/pytest -q --durations=0 > after.log     # at the new one, right after, same machine
    .venv/bin/python benchmarks/test_suite.py before=before.log after=after.log

A test's time is its setup + call + teardown: a session fixture's build (the demo lake) counts
against the first test that asks for it, as it does in the wall time.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

from common import header

DURATION = re.compile(r"^(?P<seconds>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<test>.+?)\s*$")
SUMMARY = re.compile(r"^=* ?(?P<outcome>\d+ (?:passed|failed).*?) in (?P<seconds>\d+(?:\.\d+)?)s")


def parse(log: Path) -> tuple[dict[str, float], str, float]:
    """Seconds per test (phases summed), pytest's outcome line, and its total wall time."""
    per_test: dict[str, float] = defaultdict(float)
    outcome, total = "", 0.0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if match := DURATION.match(line):
            per_test[match["test"]] += float(match["seconds"])
        elif match := SUMMARY.search(line):
            outcome, total = match["outcome"], float(match["seconds"])
    if not per_test:
        raise SystemExit(f"{log}: no durations found; run pytest with --durations=0")
    return per_test, outcome, total


def table(label: str, per_test: dict[str, float], outcome: str, total: float, top: int) -> list[str]:
    ranked = sorted(per_test.items(), key=lambda item: -item[1])[:top]
    lines = [f"### {label}: {outcome} in {total / 60:.1f} min", "", "| # | seconds | share | test |", "|---:|---:|---:|---|"]
    lines += [f"| {i} | {seconds:.1f} | {seconds / total:.1%} | `{test}` |" for i, (test, seconds) in enumerate(ranked, start=1)]
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", help="LABEL=PATH of a pytest log run with --durations=0, oldest first")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "test_suite.md")
    parser.add_argument("--note", default="", help="what the runs were (revisions, conditions)")
    args = parser.parse_args()
    runs = [(label, *parse(Path(path))) for label, _, path in (item.partition("=") for item in args.logs)]
    lines = header("The test suite's time", "python benchmarks/test_suite.py " + " ".join(args.logs))
    lines += [f"- {args.note}" if args.note else "", ""]
    lines += ["| run | outcome | pytest wall time |", "|---|---|---:|"]
    lines += [f"| {label} | {outcome} | {total / 60:.1f} min |" for label, _, outcome, total in runs]
    lines.append("")
    for label, per_test, outcome, total in runs:
        lines += table(label, per_test, outcome, total, args.top)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
