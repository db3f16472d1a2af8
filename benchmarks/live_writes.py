"""Writes from the application to a corpus the lake owns, measured over HTTP against ``graphlake serve``:

1. searchable: per default method, the time from an acknowledged upsert of one page of text (four
   HotpotQA passages, about 400 words) to a search that ranks it in its top 10 (its question: the
   page's first title and sentence), p50 / p95 over ``--pages`` pages;
2. sustained writes: two clients upserting one short document (a HotpotQA sentence) after another for
   ``--seconds``, while 8 clients search (the default methods in turn, SciFact's test questions):
   documents accepted a second, errors, and the searches' p50 / p95 against the same 8 clients on the
   lake with no pending write;
3. the fold: ``graphlake materialize`` folding everything written (CPU-seconds, wall) against a full
   build of the same final documents in a lake of their own.

The corpus (``live``) holds SciFact's 5,183 abstracts (``--docs`` fewer) as its committed snapshot,
built here when the lake (GRAPHLAKE_HOME, a lake of its own) lacks it.

    .venv/bin/python benchmarks/live_writes.py [--docs 5183] [--pages 10] [--seconds 30] [--output ...]
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from common import arguments, child_usage, header, table
from graphlake.api import GraphLake
from graphlake.warehouse.config_files import load_mapping
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage

CORPUS = "live"
HOTPOT = "hotpotqa/ircot/processed_data/hotpotqa/dev_subsampled.jsonl.gz"
CLIENTS, WRITERS = 8, 2
STAMP = time.strftime("%Y%m%d%H%M%S")  # this run's ids: a lake measured before keeps its pages


def graphlake_command(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("graphlake")), *args]


def environment(home: Path) -> dict[str, str]:
    return {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}


def built(home: Path, documents: list[dict]) -> tuple[float, float]:
    """The corpus declared, filled with ``documents`` and built in ``home``: the build's wall and CPU seconds."""
    (home / "dagster").mkdir(parents=True, exist_ok=True)
    lake = GraphLake(home)
    lake.create_corpus(CORPUS)
    for start in range(0, len(documents), 1000):
        lake.upsert(CORPUS, documents[start : start + 1000])
    wall, cpu, _, _ = child_usage(graphlake_command("materialize", "--corpus", CORPUS), environment(home))
    return wall, cpu


def scifact(datasets: Path, limit: int) -> list[dict]:
    with gzip.open(datasets / "scifact" / "corpus.jsonl.gz", "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines][:limit]
    return [{"id": f"sf{row['_id']}", "title": row.get("title") or "", "text": row["text"]} for row in rows if row["text"].strip()]


def hotpot(datasets: Path) -> list[dict]:
    """HotpotQA dev's distinct passages, in file order."""
    seen: dict[str, dict] = {}
    with gzip.open(datasets / HOTPOT, "rt", encoding="utf-8") as lines:
        for line in lines:
            for context in json.loads(line)["contexts"]:
                seen.setdefault(context["title"], {"title": context["title"], "text": context["paragraph_text"].strip()})
    return [p for p in seen.values() if len(p["text"]) > 200]


class Server:
    def __init__(self, home: Path, port: int = 8977) -> None:
        import subprocess

        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile("wb", suffix=".log", delete=False)
        self.process = subprocess.Popen(graphlake_command("serve", "--port", str(port)), env=environment(home), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"graphlake serve did not start: {Path(self.log.name).read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def searchable(server: Server, methods: list[str], pages: list[dict]) -> dict[str, list[float]]:
    """Per method, the seconds from each page's acknowledged upsert to a search ranking it in its top 10."""
    found: dict[str, list[float]] = {m: [] for m in methods}
    with httpx.Client(timeout=120) as http:
        for method in methods:
            http.post(f"{server.url}/warm", json={"corpus": CORPUS, "method": method}).raise_for_status()
        per_method = len(pages) // len(methods)
        for i, page in enumerate(pages):
            method = methods[i // per_method]
            doc_id = f"page-{STAMP}-{i}"
            http.post(f"{server.url}/corpora/{CORPUS}/documents", json={"documents": [{**page, "id": doc_id}]}).raise_for_status()
            acknowledged = time.perf_counter()
            question = f"{page['title']}: {page['text'].split('. ')[0]}"
            while time.perf_counter() - acknowledged < 60:
                answer = http.post(f"{server.url}/search", json={"corpus": CORPUS, "method": method, "query": question, "k": 10})
                answer.raise_for_status()
                if doc_id in {hit["doc_id"] for hit in answer.json()["hits"]}:
                    found[method].append(time.perf_counter() - acknowledged)
                    break
            else:
                found[method].append(float("inf"))
    return found


def under_load(server: Server, methods: list[str], questions: list[str], seconds: float, sentences: list[str] | None) -> dict:
    """8 clients searching for ``seconds``; with ``sentences``, two more upserting one document at a time."""
    latencies: list[float] = []
    errors = {"search": 0, "write": 0}
    written: list[int] = []
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def search(client: int) -> None:
        with httpx.Client(timeout=60) as http:
            n = client
            while time.monotonic() < stop:
                started = time.perf_counter()
                answer = http.post(f"{server.url}/search", json={"corpus": CORPUS, "method": methods[n % len(methods)], "query": questions[n % len(questions)], "k": 10})
                with lock:
                    latencies.append(time.perf_counter() - started)
                    errors["search"] += answer.status_code != 200
                n += CLIENTS

    def write(client: int) -> None:
        with httpx.Client(timeout=60) as http:
            n = 0
            while time.monotonic() < stop:
                text = sentences[(client + n * WRITERS) % len(sentences)]
                answer = http.post(f"{server.url}/corpora/{CORPUS}/documents", json={"documents": [{"id": f"w{client}-{n}-{time.time_ns()}", "text": text}]})
                with lock:
                    errors["write"] += answer.status_code != 200
                    written.append(answer.status_code == 200)
                n += 1

    threads = [threading.Thread(target=search, args=(c,)) for c in range(CLIENTS)]
    threads += [threading.Thread(target=write, args=(c,)) for c in range(WRITERS)] if sentences else []
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"searches": len(latencies), "p50": percentile(latencies, 0.5), "p95": percentile(latencies, 0.95), "written": sum(written), "errors": errors, "seconds": seconds}


def main() -> None:
    def extra(parser) -> None:
        parser.add_argument("--docs", type=int, default=5183)
        parser.add_argument("--pages", type=int, default=10)
        parser.add_argument("--seconds", type=float, default=30.0)

    args = arguments(__doc__, "live_writes.md", extra)
    home = lake_home()
    methods = load_mapping(Path(__file__).resolve().parents[1] / "retrieval" / "methods.yaml")["use"]
    passages = hotpot(args.datasets)
    used = 4 * args.pages * len(methods)  # a page of its own for every method: none is encoded before its upsert
    pages = [{"title": passages[i]["title"], "text": "\n\n".join(p["text"] for p in passages[i : i + 4])} for i in range(0, used, 4)]
    sentences = [p["text"].split(". ")[0] for p in passages[used:]]
    questions = [json.loads(line)["text"] for line in (args.datasets / "scifact" / "queries.jsonl").read_text().splitlines()][:200]
    base = scifact(args.datasets, args.docs)
    if not LakeStorage(home).has("nodes", {"corpus": CORPUS}):
        print(f"building {len(base):,} SciFact documents in {home}", file=sys.stderr)
        built(home, base)
    committed = LakeStorage(home).rows("documents", {"corpus": CORPUS})
    server = Server(home)
    try:
        quiet = under_load(server, methods, questions, args.seconds, None)
        latency = searchable(server, methods, pages)
        loaded = under_load(server, methods, questions, args.seconds, sentences)
    finally:
        server.stop()
    final = LakeStorage(home).read("documents", {"corpus": CORPUS}).num_rows
    fold_wall, fold_cpu, _, _ = child_usage(graphlake_command("materialize", "--corpus", CORPUS), environment(home))
    documents = [{"id": row["doc_id"], "title": row["title"], "text": row["text"]} for row in LakeStorage(home).read("documents", {"corpus": CORPUS}).to_pylist()]
    with tempfile.TemporaryDirectory() as scratch:
        full_wall, full_cpu = built(Path(scratch) / "lake", documents)

    shown = [a if not a.startswith(str(home)) else "LAKE" for a in sys.argv[1:]]
    lines = header("Writes from the application: searchable at once, sustained under searches, folded by the build", "GRAPHLAKE_HOME=LAKE benchmarks/live_writes.py " + shlex.join(shown))
    lines += [
        f"- corpus: {committed:,} documents committed ({len(base):,} SciFact abstracts{' and what an earlier run wrote' if committed > len(base) else ''}), then {len(pages)} pages"
        " (4 HotpotQA passages each, one document) and the sustained writes",
        f"- over HTTP against one `graphlake serve` (2 cores shared by the server, its {CLIENTS} searching and {WRITERS} writing clients); searches k=10",
    ]
    lines += table("Acknowledged upsert to searchable (a page ranked in its question's top 10)", ["method", "pages", "p50 s", "p95 s", "max s", "not found"])
    for method, seconds in latency.items():
        seen = [s for s in seconds if s != float("inf")]
        lines.append(f"| {method} | {len(seconds)} | {percentile(seen, 0.5):.2f} | {percentile(seen, 0.95):.2f} | {max(seen, default=float('nan')):.2f} | {len(seconds) - len(seen)} |")
    lines += table(
        f"Sustained writes while {CLIENTS} clients search ({args.seconds:.0f} s each)",
        ["phase", "", "documents accepted / s", "write errors", "searches / s", "search errors", "search p50 ms", "search p95 ms"],
    )
    for name, run in (("no pending write", quiet), ("writing", loaded)):
        lines.append(
            f"| {name} | | {run['written'] / run['seconds']:.1f} | {run['errors']['write']} | {run['searches'] / run['seconds']:.1f} | {run['errors']['search']} | {run['p50'] * 1000:.0f} | {run['p95'] * 1000:.0f} |"
        )
    lines += table("The fold against a full build of the same final documents", ["build", "", "documents", "wall s", "CPU s"])
    lines.append(f"| fold (incremental) | | {len(documents):,} ({len(documents) - final:+,} written) | {fold_wall:.1f} | {fold_cpu:.1f} |")
    lines.append(f"| full build, a lake of its own | | {len(documents):,} | {full_wall:.1f} | {full_cpu:.1f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
