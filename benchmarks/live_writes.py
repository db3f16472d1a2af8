"""Writes from the application to a corpus the lake owns, over HTTP against ``graphlake serve``, with
the working tree and with ``--before REV`` side by side in one run (each on a lake of its own, built
here from the same ``--docs`` SciFact abstracts, one after the other on the same machine):

1. quiet: 8 clients searching (the default methods in turn, SciFact's test questions) on the lake
   with no pending write, ``--seconds``: the p50 / p95 every loaded phase is compared with;
2. visible: per default method, the seconds from an acknowledged upsert of one page (four HotpotQA
   passages, one document) to a search ranking it in its top 3 (its question: the page's first title
   and sentence), over ``--pages`` pages a method;
3. sustained: 2 clients upserting one short document after another (a HotpotQA sentence; each
   answered once the server has encoded it: the rate this machine encodes at) while the 8 search;
4. the fold: the log topped up to ``--fold`` writes, then ``graphlake materialize`` folds them while
   the 8 search until it has committed and 5 s more: the searches' p95 and max, the fold's wall and
   CPU seconds, and the nodes it encoded;
5. a burst of 8 clients writing 400 documents each at once: how many are pushed back (429); then
   restart: ``--restart`` (1,000) single-document writes, the server killed (SIGKILL) and started again, the
   seconds of its first search (``rrf``: BM25, dense and SPLADE) and the ones after;
6. ``--pending`` (10,000) pending documents (the restart's and the rest in writes of 100): the 8 searching,
   their p95, and the server's resident memory against the quiet one and the search budget.

A search that does not answer within 60 s is counted as unanswered, never waited on longer.

    .venv/bin/python benchmarks/live_writes.py --before a68f781 [--docs 2000] [--pages 3] [--seconds 20] [--fold 3000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from common import DATASETS, ROOT, header, revision_on_path, table

CORPUS = "live"
HOTPOT = "hotpotqa/ircot/processed_data/hotpotqa/dev_subsampled.jsonl.gz"
CLIENTS, WRITERS = 8, 2
ANSWER_S = 60.0  # a search not answered by then counts as unanswered
BURST = (8, 400)  # clients writing at once, documents each
PORT = 8977


def graphlake_command(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("graphlake")), *args]


def environment(home: Path, path: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHLAKE_")}
    env |= {"GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    return env | ({"PYTHONPATH": path} if path else {})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


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
    """``graphlake serve`` on the arm's lake; its resident memory and CPU read from /proc."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.url, self.env, self.log = f"http://127.0.0.1:{PORT}", env, log
        self.start()

    def start(self) -> float:
        """Start it; the seconds until it answers /health."""
        started = time.perf_counter()
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(graphlake_command("serve", "--port", str(PORT)), env=self.env, stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return time.perf_counter() - started
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.perf_counter() - started > 180:
                raise SystemExit(f"graphlake serve did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def rss_mib(self) -> float:
        return _status_kib(self.process.pid, "VmRSS") / 1024

    def peak_mib(self) -> float:
        return _status_kib(self.process.pid, "VmHWM") / 1024


def _status_kib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return float("nan")


class Load:
    """8 clients searching until ``stop`` is set, each request bounded by ``ANSWER_S``."""

    def __init__(self, url: str, methods: list[str], questions: list[str]) -> None:
        self.url, self.methods, self.questions = url, methods, questions
        self.latencies: list[float] = []
        self.errors = self.unanswered = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._search, args=(c,)) for c in range(CLIENTS)]

    def _search(self, client: int) -> None:
        with httpx.Client(timeout=ANSWER_S) as http:
            n = client
            while not self.stop.is_set():
                body = {"corpus": CORPUS, "method": self.methods[n % len(self.methods)], "query": self.questions[n % len(self.questions)], "k": 10}
                started = time.perf_counter()
                try:
                    ok = http.post(f"{self.url}/search", json=body).status_code == 200
                except httpx.TimeoutException:
                    with self._lock:
                        self.unanswered += 1
                    continue
                except httpx.HTTPError:
                    ok = False
                with self._lock:
                    self.latencies.append(time.perf_counter() - started)
                    self.errors += not ok
                n += CLIENTS

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join()

    def summary(self, seconds: float) -> dict:
        return {"searches": len(self.latencies), "per_s": len(self.latencies) / seconds, "p50": percentile(self.latencies, 0.5), "p95": percentile(self.latencies, 0.95),
                "max": max(self.latencies, default=float("nan")), "errors": self.errors, "unanswered": self.unanswered}  # fmt: skip


def upsert(http: httpx.Client, url: str, documents: list[dict]) -> int:
    """One write; its status (0: no answer)."""
    try:
        return http.post(f"{url}/corpora/{CORPUS}/documents", json={"documents": documents}).status_code
    except httpx.HTTPError:
        return 0


def visible(url: str, methods: list[str], pages: list[dict], per_method: int) -> dict[str, list[float]]:
    """Per method, the seconds from each page's acknowledged upsert to a search ranking it in its top 3."""
    found: dict[str, list[float]] = {m: [] for m in methods}
    with httpx.Client(timeout=ANSWER_S) as http:
        for i, page in enumerate(pages[: per_method * len(methods)]):
            method, doc_id = methods[i // per_method], f"page-{i}"
            if upsert(http, url, [{**page, "id": doc_id}]) != 200:
                found[method].append(float("inf"))
                continue
            acknowledged = time.perf_counter()
            question = f"{page['title']}: {page['text'].split('. ')[0]}"
            seconds = float("inf")
            while time.perf_counter() - acknowledged < ANSWER_S:
                try:
                    answer = http.post(f"{url}/search", json={"corpus": CORPUS, "method": method, "query": question, "k": 3})
                except httpx.HTTPError:
                    break
                if answer.status_code == 200 and doc_id in {hit["doc_id"] for hit in answer.json()["hits"]}:
                    seconds = time.perf_counter() - acknowledged
                    break
            found[method].append(seconds)
    return found


def writers(url: str, sentences: list[str], stop: threading.Event, statuses: list[int], prefix: str) -> list[threading.Thread]:
    def write(client: int) -> None:
        with httpx.Client(timeout=ANSWER_S) as http:
            n = 0
            while not stop.is_set():
                statuses.append(upsert(http, url, [{"id": f"{prefix}{client}-{n}", "text": sentences[(client + n * WRITERS) % len(sentences)]}]))
                n += 1

    return [threading.Thread(target=write, args=(c,)) for c in range(WRITERS)]


def burst(url: str, sentences: list[str]) -> dict[int, int]:
    """``BURST`` clients writing at once: how many writes got each status."""
    statuses: list[int] = []
    clients, size = BURST

    def write(client: int) -> None:
        with httpx.Client(timeout=300) as http:
            statuses.append(upsert(http, url, [{"id": f"burst{client}-{i}", "text": sentences[(client * size + i) % len(sentences)]} for i in range(size)]))

    threads = [threading.Thread(target=write, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {status: statuses.count(status) for status in sorted(set(statuses))}


def pending_writes(home: Path) -> int:
    return len(list((home / "writes" / CORPUS).glob("*.json")))


def arm(args: argparse.Namespace) -> None:
    """One revision's measurements (the ``graphlake`` on ``PYTHONPATH``), as JSON in ``--json``."""
    from graphlake.api import GraphLake

    home, path = args.home, os.environ.get("PYTHONPATH")
    env = environment(home, path)
    methods = args.methods.split(",")
    passages = hotpot(args.datasets)
    used = 4 * args.pages * len(methods)
    pages = [{"title": passages[i]["title"], "text": "\n\n".join(p["text"] for p in passages[i : i + 4])} for i in range(0, used, 4)]
    sentences = [p["text"].split(". ")[0] for p in passages[used:]]
    questions = [json.loads(line)["text"] for line in (args.datasets / "scifact" / "queries.jsonl").read_text().splitlines()][:200]
    result: dict = {}

    (home / "dagster").mkdir(parents=True, exist_ok=True)
    os.environ.update(env)  # the in-process API below writes into this arm's lake
    lake = GraphLake(home)
    lake.create_corpus(CORPUS)
    base = scifact(args.datasets, args.docs)
    for start in range(0, len(base), 500):
        lake.upsert(CORPUS, base[start : start + 500])
    started = time.perf_counter()
    subprocess.run(graphlake_command("materialize", "--corpus", CORPUS), env=env, check=True, capture_output=True)
    result["build_s"] = time.perf_counter() - started
    result["committed"] = len(base)

    server = Server(env, home.parent / "server.log")
    try:
        with httpx.Client(timeout=300) as http:
            started = time.perf_counter()  # a server's first search, nothing pending: what a restart is compared with
            code = http.post(f"{server.url}/search", json={"corpus": CORPUS, "method": "rrf", "query": questions[0], "k": 10}).status_code
            result["cold"] = (time.perf_counter() - started, code)
            for method in methods:
                http.post(f"{server.url}/warm", json={"corpus": CORPUS, "method": method})
        with Load(server.url, methods, questions) as load:
            time.sleep(args.seconds)
        result["quiet"] = load.summary(args.seconds) | {"rss": server.rss_mib()}

        result["visible"] = visible(server.url, methods, pages, args.pages)

        statuses: list[int] = []
        with Load(server.url, methods, questions) as load:
            threads = writers(server.url, sentences, load.stop, statuses, "w")
            for thread in threads:
                thread.start()
            time.sleep(args.seconds)
        for thread in threads:
            thread.join()
        result["sustained"] = load.summary(args.seconds) | {"written": statuses.count(200), "refused": statuses.count(429), "failed": len(statuses) - statuses.count(200) - statuses.count(429)}

        with httpx.Client(timeout=ANSWER_S) as http:  # the log topped up to --fold writes
            n = 0
            while pending_writes(home) < args.fold:
                upsert(http, server.url, [{"id": f"top-{n}", "text": sentences[n % len(sentences)]}])
                n += 1
        result["fold_writes"] = pending_writes(home)
        with Load(server.url, methods, questions) as load:
            time.sleep(2)
            started = time.perf_counter()
            with tempfile.TemporaryFile("w+") as said:
                fold = subprocess.Popen(graphlake_command("materialize", "--corpus", CORPUS), env=env, stdout=said, stderr=subprocess.STDOUT, text=True)
                _, status, usage = os.wait4(fold.pid, 0)
                wall = time.perf_counter() - started
                said.seek(0)
                output = said.read()
            time.sleep(5)
        encoded = [line.strip() for line in output.splitlines() if "by dense_vectors" in line or "by splade_vectors" in line]
        result["fold"] = load.summary(wall + 7) | {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "ok": os.waitstatus_to_exitcode(status) == 0, "encoded": encoded, "left": pending_writes(home)}

        result["burst"] = burst(server.url, sentences)  # after the fold: what it takes is pending in the phases below
        with httpx.Client(timeout=ANSWER_S) as http:
            for n in range(args.restart):
                upsert(http, server.url, [{"id": f"r-{n}", "text": sentences[(n * 7) % len(sentences)]}])
        result["restart_writes"] = pending_writes(home)
        server.kill()
        server.start()
        firsts = []
        with httpx.Client(timeout=300) as http:
            for _ in range(3):
                started = time.perf_counter()
                answer = http.post(f"{server.url}/search", json={"corpus": CORPUS, "method": "rrf", "query": questions[0], "k": 10})
                firsts.append((time.perf_counter() - started, answer.status_code))
        result["restart"] = firsts

        with httpx.Client(timeout=300) as http:
            written = args.restart
            for w in range((args.pending - args.restart) // 100):
                if upsert(http, server.url, [{"id": f"p{w}-{i}", "text": sentences[(w * 100 + i) % len(sentences)]} for i in range(100)]) == 200:
                    written += 100
        result["pending_docs"] = written
        before = server.rss_mib()
        with Load(server.url, methods, questions) as load:
            time.sleep(args.seconds)
        result["pending"] = load.summary(args.seconds) | {"rss_before": before, "rss": server.rss_mib(), "peak": server.peak_mib()}
    finally:
        server.stop()
    args.json.write_text(json.dumps(result), encoding="utf-8")


def run_arm(label: str, shim: Path | None, work: Path, args: argparse.Namespace, methods: list[str]) -> dict:
    home, out = work / label / "lake", work / label / "result.json"
    home.mkdir(parents=True)
    command = [sys.executable, __file__, "arm", "--home", str(home), "--json", str(out), "--datasets", str(args.datasets), "--methods", ",".join(methods),
               "--docs", str(args.docs), "--pages", str(args.pages), "--seconds", str(args.seconds), "--fold", str(args.fold),
               "--restart", str(args.restart), "--pending", str(args.pending)]  # fmt: skip
    env = {**os.environ, **({"PYTHONPATH": str(shim)} if shim else {})}
    print(f"{label}: measuring in {home}", file=sys.stderr, flush=True)
    subprocess.run(command, env=env, check=True)
    return json.loads(out.read_text())


def report(arms: dict[str, dict], args: argparse.Namespace, command: str) -> list[str]:
    lines = header("Writes from the application: visible at once, bounded under load, folded without stalling searches", command)
    budget = 384
    lines += [
        f"- corpus: {args.docs:,} SciFact abstracts committed (a lake built per revision), then the writes below; over HTTP against one `graphlake serve`"
        f" (2 cores shared by the server, its {CLIENTS} searching and {WRITERS} writing clients); searches k=10; a search unanswered after {ANSWER_S:.0f} s is counted, not waited on",
        "- revisions: " + ", ".join(f"`{label}`" for label in arms),
    ]
    cols = list(arms)
    lines += table("Acknowledged upsert to a top-3 hit, seconds (p50 / p95 / max; pages not found in 60 s)", ["method", "", *cols])
    methods = list(next(iter(arms.values()))["visible"])
    every: dict[str, list[float]] = {c: [] for c in cols}
    for method in methods:
        cells = []
        for c in cols:
            seconds = arms[c]["visible"].get(method, [])
            seen = [s for s in seconds if s != float("inf")]
            every[c] += seconds
            cells.append(f"{percentile(seen, 0.5):.2f} / {percentile(seen, 0.95):.2f} / {max(seen, default=float('nan')):.2f}; {len(seconds) - len(seen)}")
        lines.append(f"| {method} | | " + " | ".join(cells) + " |")
    lines.append("| **all** | | " + " | ".join(f"p95 {percentile([s for s in every[c] if s != float('inf')], 0.95):.2f}; {sum(s == float('inf') for s in every[c])} not found" for c in cols) + " |")

    lines += table(f"Searches by {CLIENTS} clients, each phase against the quiet one", ["phase", "revision", "searches / s", "p50 ms", "p95 ms", "max ms", "p95 × quiet", "errors", "unanswered"])
    for phase, name in (("quiet", "no pending write"), ("sustained", f"{WRITERS} clients writing"), ("fold", "a fold of the log"), ("pending", f"{args.pending:,} pending documents")):
        for c in cols:
            run, quiet = arms[c][phase], arms[c]["quiet"]["p95"]
            lines.append(
                f"| {name} | {c} | {run['per_s']:.1f} | {run['p50'] * 1000:.0f} | {run['p95'] * 1000:.0f} | {run['max'] * 1000:.0f} | {run['p95'] / quiet:.2f} | {run['errors']} | {run['unanswered']} |"
            )

    lines += table("Writes", ["what", "", *cols])
    rows = [
        (f"documents accepted / s, {WRITERS} clients writing one at a time", lambda a: f"{a['sustained']['written'] / args.seconds:.1f}"),
        ("writes refused (429) / failed, those clients", lambda a: f"{a['sustained']['refused']} / {a['sustained']['failed']}"),
        (f"burst of {BURST[0]} writes of {BURST[1]} documents at once: answers by status", lambda a: ", ".join(f"{k}: {v}" for k, v in a["burst"].items())),
        ("writes folded by the fold", lambda a: f"{a['fold_writes']:,}"),
        ("fold wall s / CPU s", lambda a: f"{a['fold']['wall']:.1f} / {a['fold']['cpu']:.1f}"),
        ("nodes the fold encoded", lambda a: "; ".join(a["fold"]["encoded"]) or "?"),
        ("pending writes at the restart", lambda a: f"{a['restart_writes']:,}"),
        ("a started server's first search, nothing pending, s (rrf)", lambda a: f"{a['cold'][0]:.2f}" + ("" if a["cold"][1] == 200 else f" ({a['cold'][1]})")),
        ("first searches after the restart, s (rrf)", lambda a: ", ".join(f"{s:.2f}" + ("" if code == 200 else f" ({code})") for s, code in a["restart"])),
        ("pending documents in the last phase", lambda a: f"{a['pending_docs']:,}"),
        (
            "server RSS MiB: quiet / before / during the last phase (peak)",
            lambda a: f"{a['quiet']['rss']:.0f} / {a['pending']['rss_before']:.0f} / {a['pending']['rss']:.0f} ({a['pending']['peak']:.0f})",
        ),
        (f"RSS growth over quiet, against the {budget} MB search budget", lambda a: f"{a['pending']['rss'] - a['quiet']['rss']:+.0f} MiB"),
        ("lake build of the committed abstracts, s", lambda a: f"{a['build_s']:.0f}"),
    ]
    for what, cell in rows:
        lines.append(f"| {what} | | " + " | ".join(cell(arms[c]) for c in cols) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("arm")
    one.add_argument("--home", type=Path, required=True)
    one.add_argument("--json", type=Path, required=True)
    one.add_argument("--methods", required=True)
    for p in (parser, one):
        p.add_argument("--datasets", type=Path, default=DATASETS)
        p.add_argument("--docs", type=int, default=2000)
        p.add_argument("--pages", type=int, default=3)
        p.add_argument("--seconds", type=float, default=20.0)
        p.add_argument("--fold", type=int, default=3000)
        p.add_argument("--restart", type=int, default=1000, help="single-document writes pending at the restart")
        p.add_argument("--pending", type=int, default=10000, help="documents pending in the last phase")
    parser.add_argument("--before", help="git revision measured beside the working tree")
    parser.add_argument("--after", help="git revision measured instead of the working tree (so that it can change meanwhile)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "live_writes.md")
    args = parser.parse_args()
    if args.command == "arm":
        return arm(args)
    from graphlake.warehouse.config_files import load_mapping

    methods = load_mapping(ROOT / "retrieval" / "methods.yaml")["use"]
    arms: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if args.before:
            with revision_on_path(args.before) as shim:
                arms[args.before] = run_arm("before", shim, Path(scratch), args, methods)
        if args.after:
            with revision_on_path(args.after) as shim:
                arms[args.after] = run_arm("after", shim, Path(scratch), args, methods)
        else:
            arms["working tree"] = run_arm("after", None, Path(scratch), args, methods)
    lines = report(arms, args, "benchmarks/live_writes.py " + shlex.join(sys.argv[1:]))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
