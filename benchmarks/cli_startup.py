"""Start-up cost of the command line: wall time and peak memory of light commands, and of ``query`` on a
built corpus (``--home``), two revisions side by side.

Each command runs in a fresh interpreter (``python -c`` calling the CLI's ``app``), alternating
between the revisions ``--repeat`` times; the table gives the median wall time and the median peak
resident memory of the child (``ru_maxrss``), and the ratio after / before. The ``before`` revision
is put first on ``PYTHONPATH`` (:func:`common.revision_on_path`), so both run on the same interpreter
and dependencies.

    python benchmarks/cli_startup.py --before 8bb8e22 [--repeat 5] [--home <lake> --corpus scifact]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from common import ROOT, child_usage, header, revision_on_path, revisions_options

COMMANDS = {"--help": ["--help"], "sql": ["sql", "select 1"], "corpora": ["corpora"]}
QUERY = "what causes inflammation"
QUERIES = {f"query --method {method}": ["query", "--method", method, "--top", "3", QUERY] for method in ("bm25", "dense", "ap_three")}
RUN = "import sys; from graphlake.cli import app; sys.argv = ['graphlake', *sys.argv[1:]]; app()"


def measure(args: list[str], pythonpath: Path | None, home: Path) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of one run of the CLI in a fresh interpreter."""
    env = {**os.environ, "GRAPHLAKE_HOME": str(home)}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    seconds, _, peak, _ = child_usage([sys.executable, "-c", RUN, *args], env)
    return seconds, peak


def main() -> None:
    def lake_options(parser) -> None:
        parser.add_argument("--home", type=Path, help="a lake with --corpus built: query it too (read, never written)")
        parser.add_argument("--corpus", default="scifact")

    options = revisions_options(__doc__, lake_options)
    commands = dict(COMMANDS)
    if options.home:
        commands |= {name: [args[0], "--corpus", options.corpus, *args[1:]] for name, args in QUERIES.items()}
    with tempfile.TemporaryDirectory() as scratch, revision_on_path(options.before) as before:
        sides = {"before": before, "after": None}
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(options.repeat):
            for command, args in commands.items():
                home = options.home if command.startswith("query") else Path(scratch) / "lake"
                for side, path in sides.items():
                    results.setdefault((command, side), []).append(measure(args, path, home))
    lines = ["| command | before s | after s | after / before | before MiB | after MiB | after / before |", "|---|---:|---:|---:|---:|---:|---:|"]
    for command in commands:
        b, a = results[(command, "before")], results[(command, "after")]
        bs, as_ = statistics.median(x[0] for x in b), statistics.median(x[0] for x in a)
        bm, am = statistics.median(x[1] for x in b), statistics.median(x[1] for x in a)
        lines.append(f"| graphlake {command} | {bs:.2f} | {as_:.2f} | {as_ / bs:.2f} | {bm:.0f} | {am:.0f} | {am / bm:.2f} |")
    table = "\n".join(lines)
    print(table)
    command = f"python benchmarks/cli_startup.py --before {options.before} --repeat {options.repeat}" + (f" --home <lake> --corpus {options.corpus}" if options.home else "")
    text = [*header("CLI start-up: light commands before and after", command), "", f"Median of {options.repeat} alternating runs; before = {options.before}, after = the working tree.", "", table]
    (ROOT / "benchmarks" / "results" / "cli_startup.md").write_text("\n".join(text) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
