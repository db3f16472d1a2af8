"""The default build at three sizes of real text: what each step costs per passage, and how it grows.

Corpora (written as JSON lines outside the repository, ingested with ``graphlake ingest jsonl`` as a
user would, no queries):

- ``pooled``: every distinct passage of the staged sets under the datasets folder (SciFact, HotpotQA
  dev and train, 2Wiki dev and train, HippoRAG's 2Wiki corpus, MIGRES' HotpotQA), about 22.6k;
- a number (``10000``): a seeded sample of that many of those passages;
- ``windows``: the pooled passages cut into windows of two sentences, sliding by one (a passage of one
  sentence is one window), about 100k: real text whose neighbours are the text around it.

Each size is ingested and then built by ``materialize`` with the default selection in a child process
of its own, on a fresh lake. A thread of that child samples the process's CPU time and its peak
resident memory (VmHWM, reset after each reading through ``/proc/self/clear_refs``) every 0.1 s; the
samples are assigned to the step the Dagster event log says was running. Reported per size: the whole
build's CPU-seconds, wall seconds and peak RSS, and CPU-seconds per passage; per step the same, and
the growth exponent ``log(cost_b / cost_a) / log(n_b / n_a)`` between sizes.

``--workers SIZE`` also builds the per-node steps (dense and SPLADE encoding, spaCy NER and triples)
of that corpus on a Dask ``LocalCluster`` of one worker and then of two, one thread each
(``GRAPHLAKE_DASK``; ``common/shards.py`` cuts each step into shards that are tasks of their own), and
reports the wall seconds of each.

Run from the repo root::

    .venv/bin/python benchmarks/scale.py --sizes 10000,pooled,windows [--before REV] [--workers pooled] [--work DIR]

``--resume`` keeps the sizes an earlier run into the same ``--work`` measured (each result carries
its date) and measures the rest. ``--before REV`` builds a 2,000-passage sample with that revision and with the working tree, one
after the other in the same run. Writes ``benchmarks/results/scale.md`` and ``scale.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from common import DATASETS, INGEST, ROOT, child_usage, header, revision_on_path, table

SOURCES = {  # corpus label: (format, path under the datasets folder): INGEST's sets and two more corpus files
    **INGEST,
    "2wiki-hipporag": ("hipporag", "2wikimultihopqa/hipporag_corpus_only/reproduce/dataset"),
    "hotpotqa-migres": ("hotpotqa", "hotpotqa/migres/data/hotpot.json.gz"),
}
BEFORE_SAMPLE = "2000"
SAMPLE_SECONDS = 0.1
PER_NODE = ("dense_vectors", "splade_vectors", "entities_spacy")  # the steps common/shards.py shards (spaCy: entities and triples)
RESULTS = ROOT / "benchmarks" / "results"
NOISE_CPU = 2.0  # below this many CPU-seconds a step's cost is its fixed start (Dagster, imports, inputs): no exponent
N_LOG_N = 1.15  # n log n's exponent between these sizes is at most about 1.1; a step above gets its reason below
WHY = {  # why a step grows faster than n log n in these runs
    "semantic_edges": "exact k-NN (every pair's cosine) in these runs: n² by design. It now takes a faiss HNSW graph above "
    "10,000 nodes; `benchmarks/results/semantic_knn.md` compares the two at 94,874 nodes.",
    "dense_hnsw_index": "faiss HNSW insertion is n log n in its hops; each hop's reads leave the cache as the graph grows. "
    "Between 11k and 26k nodes the step is 4 and 16 CPU-s, near its fixed cost; 1.22 from 26k to 95k.",
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def pooled_passages(datasets: Path) -> list[tuple[str, str]]:
    """(title, text) of every distinct passage text of the staged sets, in a fixed order."""
    from graphlake.warehouse.readers import FORMATS, ReadRequest

    seen: dict[str, str] = {}
    for fmt, relative in SOURCES.values():
        documents = FORMATS[fmt](ReadRequest(datasets / relative)).documents
        for title, text in zip(documents.column("title").to_pylist(), documents.column("text").to_pylist(), strict=True):
            if text.strip():
                seen.setdefault(text, title)
    return [(title, text) for text, title in seen.items()]


def windows(text: str) -> list[str]:
    """Two-sentence windows sliding by one sentence; one window for a text of one sentence."""
    sentences = [s for s in _SENTENCE_END.split(text) if s.strip()]
    return [" ".join(sentences[i : i + 2]) for i in range(max(1, len(sentences) - 1))]


def corpus(size: str, datasets: Path) -> list[dict]:
    passages = pooled_passages(datasets)
    if size.isdigit():
        keep = np.sort(np.random.default_rng(0).choice(len(passages), min(int(size), len(passages)), replace=False))
        passages = [passages[i] for i in keep]
    elif size == "windows":
        passages = [(f"{title} ({n + 1})", window) for title, text in passages for n, window in enumerate(windows(text))]
    elif size != "pooled":
        raise SystemExit(f"unknown size {size!r}: a number of passages, pooled or windows")
    return [{"id": f"p{i}", "title": title, "text": text} for i, (title, text) in enumerate(passages)]


# ---------------------------------------------------------------- the child: one measured build


class Sampler:
    """Process CPU time and peak RSS every ``SAMPLE_SECONDS``: (epoch, cpu seconds, peak MiB since the last sample)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        times = os.times()
        status = Path("/proc/self/status").read_text()
        peak = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        self.samples.append((time.time(), times.user + times.system, peak))

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def build(home: Path, corpus_name: str, out: Path) -> None:
    """Materialize the corpus's default selection in this process; per-step figures to ``out``."""
    from dagster import DagsterEventType, DagsterInstance
    from rich.console import Console

    from graphlake.pipelines.runner import materialize_corpus

    with Sampler() as sampler:
        materialize_corpus(home, corpus_name, None, Console(file=sys.stderr))
    with DagsterInstance.get() as instance:  # materialize_corpus pointed DAGSTER_HOME at the lake's
        run = instance.get_runs(limit=1)[0]
        starts = {r.dagster_event.step_key: r.timestamp for r in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_START)}
        ends = {r.dagster_event.step_key: r.timestamp for r in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_SUCCESS)}
    steps = {key: {"wall": ends[key] - start, "cpu": 0.0, "peak_mib": 0.0} for key, start in starts.items()}
    windows_ = sorted((start, ends[key], key) for key, start in starts.items())
    for (t0, cpu0, _), (t1, cpu1, peak) in zip(sampler.samples, sampler.samples[1:], strict=False):
        middle = (t0 + t1) / 2
        step = next((key for start, end, key in windows_ if start <= middle <= end), None)
        if step is not None:
            steps[step]["cpu"] += cpu1 - cpu0
            steps[step]["peak_mib"] = max(steps[step]["peak_mib"], peak)
    out.write_text(json.dumps(steps, indent=1))


# ---------------------------------------------------------------- the parent: sizes, revisions, report


def fresh_lake(label: str, rows: list[dict], work: Path) -> tuple[Path, Path]:
    """An empty lake folder under ``work`` and the corpus written beside it as JSON lines."""
    source = work / f"{label}.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return Path(tempfile.mkdtemp(prefix=f"lake-{label}-", dir=work)), source


def measure(size: str, rows: list[dict], work: Path, shim: Path | None = None) -> dict:
    """Ingest and build one corpus on a fresh lake; totals and per-step figures."""
    home, source = fresh_lake(size, rows, work)
    env = {**os.environ, "GRAPHLAKE_HOME": str(home), **({"PYTHONPATH": str(shim)} if shim else {})}
    name = f"scale-{size}"
    cli = [str(Path(sys.executable).with_name("graphlake"))]
    ingest = child_usage([*cli, "ingest", "jsonl", str(source), "--corpus", name], env)
    steps_file = home / "steps.json"
    built = child_usage([sys.executable, __file__, "child", "--home", str(home), "--corpus", name, "--out", str(steps_file)], env)
    nodes = _count(home, name, env)
    return {
        "size": size,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "passages": len(rows),
        "nodes": nodes,
        "ingest": {"wall": ingest[0], "cpu": ingest[1], "peak_mib": ingest[2]},
        "build": {"wall": built[0], "cpu": built[1], "peak_mib": built[2]},
        "steps": json.loads(steps_file.read_text()),
        "home": str(home),
    }


def on_workers(size: str, rows: list[dict], work: Path, workers: int) -> float:
    """Wall seconds of the per-node steps of a fresh lake's corpus on a local cluster of ``workers``
    one-thread workers."""
    import distributed

    home, source = fresh_lake(f"{size}-{workers}w", rows, work)
    env = {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    cli, name = str(Path(sys.executable).with_name("graphlake")), f"scale-{size}"
    child_usage([cli, "ingest", "jsonl", str(source), "--corpus", name], env)
    threads = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, env={**env, **threads}) as cluster:
        selection = " or ".join(f"key:{step}" for step in PER_NODE)
        seconds, *_ = child_usage([cli, "materialize", "--corpus", name, "--select", selection], {**env, "GRAPHLAKE_DASK": cluster.scheduler_address})
    return seconds


def _count(home: Path, name: str, env: dict) -> int:
    command = [str(Path(sys.executable).with_name("graphlake")), "sql", "--json", f"SELECT count(*) AS n FROM nodes WHERE corpus = '{name}'"]
    return json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout)[0]["n"]


def exponent(a: float, b: float, n_a: int, n_b: int) -> float | None:
    return round(float(np.log(b / a) / np.log(n_b / n_a)), 2) if min(a, b) >= NOISE_CPU else None


def peak_mib(result: dict) -> float:
    """The build's peak: the ingest child's, or the highest any step's sampler read."""
    return max(result["ingest"]["peak_mib"], *(step["peak_mib"] for step in result["steps"].values()))


def per_passage(result: dict) -> float:
    return (result["ingest"]["cpu"] + result["build"]["cpu"]) / result["passages"]


def report(results: list[dict], before: list[tuple[str, dict]], workers: dict, command: str, output: Path) -> None:
    lines = header("Scale: the default build at three sizes of real text", command)
    lines += [
        "",
        "Fresh lake per size; `graphlake ingest jsonl`, then `materialize` of the default selection (no queries).",
        "CPU-seconds are user + system of the build's process (all threads). Peak RSS is the highest the sampler read (VmHWM);",
        "a step's includes what earlier steps left resident (CPython keeps freed memory). The child's own ru_maxrss is not used:",
        "resetting VmHWM resets what it is computed from.",
    ]
    lines += table("Whole build", ["size", "measured", "passages", "nodes", "CPU-s", "wall s", "peak RSS MiB", "CPU-s / passage"])
    for r in results:
        cpu, wall = r["ingest"]["cpu"] + r["build"]["cpu"], r["ingest"]["wall"] + r["build"]["wall"]
        peak = peak_mib(r)
        lines.append(f"| {r['size']} | {r.get('measured', '')} | {r['passages']:,} | {r['nodes']:,} | {cpu:,.0f} | {wall:,.0f} | {peak:,.0f} | {per_passage(r):.4f} |")
    if before:
        lines += table(f"Before and after, same machine, same run ({BEFORE_SAMPLE}-passage sample)", ["revision", "passages", "CPU-s", "wall s", "peak RSS MiB", "CPU-s / passage"])
        for revision, r in before:
            cpu, wall = r["ingest"]["cpu"] + r["build"]["cpu"], r["ingest"]["wall"] + r["build"]["wall"]
            lines.append(f"| {revision} | {r['passages']:,} | {cpu:,.0f} | {wall:,.0f} | {peak_mib(r):,.0f} | {per_passage(r):.4f} |")
    if workers:
        lines += table(f"One corpus on a Dask cluster: the per-node steps of `{workers['size']}` on 1 and 2 workers (one thread each)", ["workers", "", "wall s", "speed-up"])
        for count, seconds in sorted(workers["seconds"].items()):
            lines.append(f"| {count} | | {seconds:,.0f} | {workers['seconds'][1] / seconds:.2f} |")
    steps = sorted({key for r in results for key in r["steps"]}, key=lambda key: -max(r["steps"].get(key, {}).get("cpu", 0) for r in results))
    columns = ["step"] + [f"{r['size']} CPU-s" for r in results] + [f"{r['size']} wall s" for r in results] + [f"{r['size']} peak MiB" for r in results]
    columns += [f"exp {a['size']}→{b['size']}" for a, b in zip(results, results[1:], strict=False)]
    lines += table("Per step (by CPU-seconds at the largest size)", ["step", *columns[1:]])
    faster: dict[str, float] = {}
    for key in steps:
        got = [r["steps"].get(key) or {"cpu": 0.0, "wall": 0.0, "peak_mib": 0.0} for r in results]
        cells = [f"{g['cpu']:,.1f}" for g in got] + [f"{g['wall']:,.1f}" for g in got] + [f"{g['peak_mib']:,.0f}" for g in got]
        for (ra, ga), (rb, gb) in zip(zip(results, got, strict=True), list(zip(results, got, strict=True))[1:], strict=False):
            found = exponent(ga["cpu"], gb["cpu"], ra["nodes"], rb["nodes"])
            cells.append("" if found is None else f"{found:.2f}")
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
        fast = [float(cell) for cell in cells[3 * len(results) :] if cell and float(cell) > N_LOG_N]
        if fast:
            faster[key] = max(fast)
    lines += ["", f"Exponents are left out where a step costs under {NOISE_CPU:.0f} CPU-s at either size: there its fixed start (Dagster, imports, loading its inputs) is its cost."]
    lines += table("Steps that grow faster than n log n, and why", ["step", "largest exponent", "why"])
    lines += [f"| `{key}` | {value:.2f} | {WHY.get(key, 'not explained')} |" for key, value in faster.items()]
    output.write_text("\n".join(lines) + "\n")
    if results:
        _plot(results, steps[:8], output.with_suffix(".png"))


def _plot(results: list[dict], steps: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    nodes = [r["nodes"] for r in results]
    for key in steps:
        axis.plot(nodes, [max(r["steps"].get(key, {}).get("cpu", 0.0), 0.01) for r in results], marker="o", label=key)
    axis.plot(nodes, [r["build"]["cpu"] for r in results], marker="s", color="black", label="whole build")
    axis.set(xscale="log", yscale="log", xlabel="nodes", ylabel="CPU-seconds", title="Default build: CPU-seconds per step")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command")
    child = commands.add_parser("child")
    child.add_argument("--home", type=Path, required=True)
    child.add_argument("--corpus", required=True)
    child.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", default="10000,pooled,windows")
    parser.add_argument("--before", help="git revision whose 2k build is measured beside the working tree's")
    parser.add_argument("--workers", help="a size whose per-node steps are also built on 1 and 2 Dask workers")
    parser.add_argument("--datasets", type=Path, default=DATASETS)
    parser.add_argument("--work", type=Path, help="where the corpora and lakes go (default: a temporary folder, removed)")
    parser.add_argument("--output", type=Path, default=RESULTS / "scale.md")
    parser.add_argument("--resume", action="store_true", help="keep what --work's results.json holds; measure only the sizes it lacks")
    args = parser.parse_args()
    if args.command == "child":
        build(args.home, args.corpus, args.out)
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="graphlake-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    kept = json.loads((work / "results.json").read_text()) if args.resume and (work / "results.json").exists() else {}
    before = [tuple(pair) for pair in kept.get("before", [])]
    if args.before and not before:
        rows = corpus(BEFORE_SAMPLE, args.datasets)
        with revision_on_path(args.before) as shim:
            before.append((args.before, measure(BEFORE_SAMPLE, rows, work, shim)))
        before.append(("working tree", measure(BEFORE_SAMPLE, rows, work)))
    results = kept.get("results", [])
    for size in filter(None, args.sizes.split(",")):
        if any(result["size"] == size for result in results):
            continue
        results.append(measure(size, corpus(size, args.datasets), work))
        (work / "results.json").write_text(json.dumps({"results": results, "before": before}, indent=1))
        print(f"{size}: {per_passage(results[-1]):.4f} CPU-s per passage", file=sys.stderr, flush=True)
    workers = kept.get("workers", {})
    if workers:  # JSON made the worker counts strings
        workers["seconds"] = {int(count): seconds for count, seconds in workers["seconds"].items()}
    if args.workers and workers.get("size") != args.workers:
        rows = corpus(args.workers, args.datasets)
        workers = {"size": args.workers, "seconds": {count: on_workers(args.workers, rows, work, count) for count in (1, 2)}}
        (work / "results.json").write_text(json.dumps({"results": results, "before": before, "workers": workers}, indent=1))
    results.sort(key=lambda result: result["nodes"])  # the exponents read them in order of size
    command = "python benchmarks/scale.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    report(results, before, workers, command, args.output)


if __name__ == "__main__":
    main()
