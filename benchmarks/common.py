"""What every benchmark script shares: driving the ``graphlake`` CLI and describing the machine."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("GRAPHLAKE_DATASETS", ROOT.parent / "shared" / "datasets"))


def graphlake(*args: str) -> str:
    """Run the project's ``graphlake`` command (the venv beside this interpreter); its stdout."""
    command = [str(Path(sys.executable).with_name("graphlake")), *args]
    print("$ graphlake " + " ".join(args), file=sys.stderr, flush=True)
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), "?")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores, {memory:.0f} GiB RAM, Python {platform.python_version()}"


def header(title: str, command: str) -> list[str]:
    """The opening lines of a results file: what, when, where, how to reproduce."""
    return [f"# {title}", "", f"- date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC", f"- machine: {machine()}", f"- command: `{command}`"]


def arguments(description: str, results: str, extra=None):
    """``--datasets``, ``--output`` (default ``benchmarks/results/<results>``) and whatever ``extra(parser)``
    adds, after checking the venv."""
    import argparse
    import shutil

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--datasets", type=Path, default=DATASETS)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / results)
    if extra:
        extra(parser)
    args = parser.parse_args()
    if not shutil.which("graphlake", path=str(Path(sys.executable).parent)):
        sys.exit(f"run with the project's venv: .venv/bin/python {Path(sys.argv[0]).as_posix()}")
    return args


def table(title: str, columns: list[str]) -> list[str]:
    """A markdown section opening on a table header (numeric columns right-aligned after the first two)."""
    return ["", f"## {title}", "", "| " + " | ".join(columns) + " |", "|---|---|" + "---:|" * (len(columns) - 2)]


QPT_QUERIES = 40  # the seeded query sample every timing script draws per set


def timing_sample(corpus: str, split: str):
    """What a timing needs from the lake (GRAPHLAKE_HOME): its methods, the seeded sample of
    ``split`` queries shared by the CPU and GPU timings, and the corpus's indexes."""
    import numpy as np

    from graphlake.assets.retrieval import LakeIndexes, load_methods
    from graphlake.warehouse.home import lake_home
    from graphlake.warehouse.storage import Lake

    lake = Lake(lake_home())
    methods, _ = load_methods(lake_home())
    queries = [q["text"] for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split]
    sample = [queries[i] for i in np.random.default_rng(0).choice(len(queries), min(QPT_QUERIES, len(queries)), replace=False)]
    return methods, sample, LakeIndexes(lake, corpus, lake.read("nodes", {"corpus": corpus}).column("node_id").to_pylist())
