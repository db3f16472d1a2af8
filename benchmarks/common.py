"""What every benchmark script shares: driving the ``graphlake`` CLI and describing the machine."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from graphlake.common import settings

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(settings.DATASETS.text() or ROOT.parent / "shared" / "datasets")


def graphlake(*args: str) -> str:
    """Run the project's ``graphlake`` command (the venv beside this interpreter); its stdout."""
    command = [str(Path(sys.executable).with_name("graphlake")), *args]
    print("$ graphlake " + " ".join(args), file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"graphlake {' '.join(args)[:200]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


@contextmanager
def revision_on_path(revision: str) -> Iterator[Path]:
    """A folder to put first on ``PYTHONPATH`` so that ``graphlake`` is ``revision`` (a temporary git
    worktree behind a shim package) rather than the working tree, on the same interpreter."""
    with tempfile.TemporaryDirectory() as scratch:
        worktree, shim = Path(scratch) / "checkout", Path(scratch) / "shim"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), revision], check=True, capture_output=True)
        try:
            (shim / "graphlake").mkdir(parents=True)
            for entry in worktree.iterdir():
                if not entry.name.startswith("."):
                    (shim / "graphlake" / entry.name).symlink_to(entry)
            code = "import graphlake.cli as cli; print(cli.__file__)"
            found = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(shim)}, capture_output=True, text=True, check=True)
            if not Path(found.stdout.strip()).resolve().is_relative_to(worktree.resolve()):  # the editable install must not win
                raise SystemExit(f"revision {revision} resolves to {found.stdout.strip()}, not to {worktree}")
            yield shim
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False)


def revisions_options(description: str, extra=None):
    """``--before REV`` (the revision the working tree is compared against) and ``--repeat``, and what
    ``extra(parser)`` adds, parsed."""
    import argparse

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision to compare the working tree against")
    parser.add_argument("--repeat", type=int, default=5)
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def child_usage(command: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds (user + system), peak resident MiB and stdout of one child process,
    measured with its own rusage; exits naming the command when it fails."""
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed:\n{child.stderr.read()}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, child.stdout.read()  # KiB on Linux


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


def export_and_run(description: str, exported: str, results: str, *runs: tuple[str, str]):
    """The parser of a script in steps, for a GPU machine that has no lake: ``export`` (beside the
    lake: ``--folder``, ``--datasets``) writes ``exported``; each of the ``runs`` commands (name, help)
    reads that folder anywhere and writes ``--output`` (default ``benchmarks/results/<results>``).
    Returns the parser and the subparsers (export's first), for the scripts' own options."""
    import argparse

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    out = commands.add_parser("export", help=f"{exported}, from the lake (GRAPHLAKE_HOME), built first where it lacks anything")
    out.add_argument("--folder", type=Path, required=True)
    out.add_argument("--datasets", type=Path, default=DATASETS)
    steps = []
    for name, help_text in runs:
        step = commands.add_parser(name, help=help_text)
        step.add_argument("--folder", type=Path, required=True)
        step.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / results)
        steps.append(step)
    return parser, out, *steps


def table(title: str, columns: list[str]) -> list[str]:
    """A markdown section opening on a table header (numeric columns right-aligned after the first two)."""
    return ["", f"## {title}", "", "| " + " | ".join(columns) + " |", "|---|---|" + "---:|" * (len(columns) - 2)]


QPT_QUERIES = 40  # the seeded query sample every timing script draws per set


def timing_sample(corpus: str, split: str):
    """What a timing needs from the lake (GRAPHLAKE_HOME): its methods, the seeded sample of
    ``split`` queries shared by the CPU and GPU timings, and the corpus's indexes."""
    import numpy as np

    from graphlake.retrieval.learned_kinds import open_index_set
    from graphlake.retrieval.methods import load_methods
    from graphlake.warehouse.home import lake_home
    from graphlake.warehouse.storage import LakeStorage

    lake = LakeStorage(lake_home())
    methods = load_methods(lake_home())
    queries = [q["text"] for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split]
    sample = [queries[i] for i in np.random.default_rng(0).choice(len(queries), min(QPT_QUERIES, len(queries)), replace=False)]
    return methods, sample, open_index_set(lake, corpus)


# The FastInsight protocol (benchmarks/fastinsight.py on the lake, gpu_fastinsight.py and
# reranker_training.py on a GPU machine): which corpora, which queries teach, which are evaluated.
HOTPOT = "hotpotqa/ircot/processed_data/hotpotqa/dev_subsampled.jsonl.gz"
HOTPOT_TRAIN = "hotpotqa/hipporag/data"
WIKI_TRAIN = "2wikimultihopqa/migres/data/wikihop_train_preprocess.json.gz"
WIKI_DEV = "2wikimultihopqa/migres/data/wikihop.json.gz"
INGEST = {  # corpus: format, path under the datasets folder
    "scifact": ("beir", "scifact"),
    "hotpotqa-train": ("hipporag", HOTPOT_TRAIN),
    "2wiki-train": ("2wiki", WIKI_TRAIN),
    "hotpotqa": ("hotpotqa-ircot", HOTPOT),
    "2wiki-dev": ("2wiki", WIKI_DEV),
}
TRAINING = {"scifact": "train", "2wiki-train": "train", "hotpotqa-train": "train"}  # this order is part of the model's fingerprint (it fixes the held-out draw)
EVALUATED = {"scifact": "test", "hotpotqa": "dev", "2wiki-dev": "dev"}
CURVE_SET = "2wiki-dev"  # the curves' set: the cheapest to rerank
BUDGETED = ("re2", "gar", "fastinsight")
BUDGETS = (10, 20, 50, 100)
ALPHAS = (0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0)
BETAS = (0.0, 0.5, 1.0, 2.0, 5.0, 100.0)


def prepare_lake(datasets: Path) -> None:
    """Ingest the protocol's corpora and build what the reranker mines from (BM25 and dense on the
    training sets) and what the evaluated sets' methods read (both runs, the corpus graph)."""
    from graphlake.retrieval.evaluation import corpus_graph_built
    from graphlake.warehouse.corpora import CorpusRegistry
    from graphlake.warehouse.home import lake_home
    from graphlake.warehouse.storage import LakeStorage

    for corpus, (fmt, relative) in INGEST.items():
        graphlake("ingest", fmt, str(datasets / relative), "--corpus", corpus)
    for corpus, split in (TRAINING | EVALUATED).items():  # one run per corpus builds its indexes (SciFact: its test split)
        graphlake("eval", "--corpus", corpus, "--methods", "vector,bm25", "--split", split, "--json")
    for corpus in (c for c in EVALUATED if not corpus_graph_built(LakeStorage(lake_home()), c)):  # materialize re-runs NER
        kinds = CorpusRegistry(lake_home()).get(corpus).effective_linking.corpus_graph
        graphlake("materialize", "--corpus", corpus, "--select", " or ".join(f"+key:{kind}_edges" for kind in kinds))
