"""What a newcomer's ``graphlake demo`` costs: wall and CPU seconds, peak memory and the assets it
builds, for a revision and the working tree side by side.

Each side runs the demo in a fresh lake, in a fresh interpreter, alternating ``--repeat`` times; the
``before`` revision is put first on ``PYTHONPATH`` (:func:`common.revision_on_path`), so both run on
the same interpreter and dependencies. Run it on an idle machine: README states the demo's time.

    python benchmarks/demo.py --before 7b54b89 [--repeat 1]
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, header, revision_on_path, revisions_options

DEMO = "import sys; from graphlake.cli import app; sys.argv = ['graphlake', 'demo']; app()"


def measure(pythonpath: Path | None, home: Path) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds (the demo and what it waited for), peak resident MiB, assets built."""
    env = {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "COLUMNS": "80"}
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    log = home.parent / f"{home.name}.log"
    started = time.perf_counter()
    with open(log, "w") as output:
        child = subprocess.Popen([sys.executable, "-c", DEMO], env=env, stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    text = log.read_text()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"demo failed ({pythonpath or 'working tree'}):\n{text[-3000:]}")
    steps = [int(total) for total in re.findall(r"^demo: \d+/(\d+) ", text, re.MULTILINE)]
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, max(steps, default=0)


def main() -> None:
    options = revisions_options(__doc__)
    runs: dict[str, list[tuple[float, float, float, int]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as scratch, revision_on_path(options.before) as before:
        for attempt in range(options.repeat):
            for side, path in (("before", before), ("after", None)):
                runs[side].append(measure(path, Path(scratch) / f"{side}-{attempt}"))
                print(side, runs[side][-1], file=sys.stderr, flush=True)
    medians = {side: [statistics.median(run[i] for run in found) for i in range(4)] for side, found in runs.items()}
    (bw, bc, bm, ba), (aw, ac, am, aa) = medians["before"], medians["after"]
    rows = [
        "| | before | after | after / before |",
        "|---|---:|---:|---:|",
        f"| wall s | {bw:.0f} | {aw:.0f} | {aw / bw:.2f} |",
        f"| CPU s | {bc:.0f} | {ac:.0f} | {ac / bc:.2f} |",
        f"| peak MiB | {bm:.0f} | {am:.0f} | {am / bm:.2f} |",
        f"| assets materialized | {ba:.0f} | {aa:.0f} | {aa / ba:.2f} |",
    ]
    print("\n".join(rows))
    command = f"python benchmarks/demo.py --before {options.before} --repeat {options.repeat}"
    text = [
        *header("graphlake demo: before and after", command),
        "",
        f"`graphlake demo` in a fresh lake, median of {options.repeat} alternating run(s) a side; CPU s counts the demo's process",
        "and the processes it waited for; assets: the steps of its one Dagster run.",
        "",
        *rows,
        "",
    ]
    (ROOT / "benchmarks" / "results" / "demo.md").write_text("\n".join(text))


if __name__ == "__main__":
    main()
