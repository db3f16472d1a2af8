"""What importing the Dagster Definitions costs: wall and CPU seconds, peak memory, two revisions side by side.

The UI, the runner, every step's subprocess and many tests import ``graphlake.pipelines.definitions``.
Each import runs in a fresh interpreter on an empty lake, alternating between the revisions
``--repeat`` times; the table gives medians and the ratio after / before. The ``before`` revision is
put first on ``PYTHONPATH`` (:func:`common.revision_on_path`), so both run on the same interpreter
and dependencies.

    python benchmarks/definitions_import.py --before 8d15e8e [--repeat 5]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from common import ROOT, child_usage, header, revision_on_path, revisions_options

HEAVY = ("torch", "spacy", "transformers", "sentence_transformers", "openai", "dask", "matplotlib", "faiss", "bm25s", "numba")
PROBE = f"import sys, graphlake.pipelines.definitions; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))"


def measure(pythonpath: Path | None, home: Path) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds, peak resident MiB and the heavy libraries loaded, for one import."""
    env = {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    seconds, cpu, peak, out = child_usage([sys.executable, "-c", PROBE], env)
    return seconds, cpu, peak, out.strip()


def main() -> None:
    options = revisions_options(__doc__)
    with tempfile.TemporaryDirectory() as scratch, revision_on_path(options.before) as before:
        sides = {"before": before, "after": None}
        runs: dict[str, list[tuple[float, float, float, str]]] = {side: [] for side in sides}
        for _ in range(options.repeat):
            for side, path in sides.items():
                runs[side].append(measure(path, Path(scratch) / side))
    medians = {side: [statistics.median(run[i] for run in found) for i in range(3)] for side, found in runs.items()}
    (bw, bc, bm), (aw, ac, am) = medians["before"], medians["after"]
    table = "\n".join(
        [
            "| | before | after | after / before |",
            "|---|---:|---:|---:|",
            f"| wall s | {bw:.2f} | {aw:.2f} | {aw / bw:.2f} |",
            f"| CPU s | {bc:.2f} | {ac:.2f} | {ac / bc:.2f} |",
            f"| peak MiB | {bm:.0f} | {am:.0f} | {am / bm:.2f} |",
            f"| heavy libraries loaded | {runs['before'][-1][3] or '-'} | {runs['after'][-1][3] or '-'} | |",
        ]
    )
    print(table)
    command = f"python benchmarks/definitions_import.py --before {options.before} --repeat {options.repeat}"
    text = [
        *header("Importing the Definitions: before and after", command),
        "",
        f"`import graphlake.pipelines.definitions` in a fresh interpreter on an empty lake; median of {options.repeat} alternating runs;",
        f"before = {options.before}, after = the working tree.",
        "",
        table,
    ]
    (ROOT / "benchmarks" / "results" / "definitions_import.md").write_text("\n".join(text) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
