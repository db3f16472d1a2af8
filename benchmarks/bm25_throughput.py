"""BM25 query throughput on SciFact: our O_vs operator against bm25s and rank-bm25, in one run.

Why: the ``bm25`` operator answers one query at a time through ``BM25Index.search`` (a thin layer
over bm25s). This measures what that layer costs against calling bm25s directly, with bm25s's
batched retrieval and rank-bm25 as references, and checks with nDCG@10 that every system ranks
with the same function (Lucene BM25, k1 = 0.9, b = 0.4, Porter stems, English stopwords).

Every system sees the same corpus text (``retrieval_texts``: title + " " + text), the same tokens
and k. Timed query runs go from query text to the top-k (tokenising included), after one warm-up
query, best of ``--repeats``; index builds are best of ``--repeats`` too. Everything runs on one
thread: bm25s uses its numpy backend (numba is not used) and numpy's element-wise kernels do not
thread, so no OMP/numba thread settings are needed. Rankings for nDCG keep positive scores only
(the operator's contract) and are ordered with ``rank_by_score``.

Run from the repo root: ``python benchmarks/bm25_throughput.py`` (needs ``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import TypeVar

import bm25s
import numpy as np
import Stemmer
from bm25s.tokenization import Tokenizer
from rank_bm25 import BM25Okapi

from graphlake.common import settings
from graphlake.kernels.eval.metrics import evaluate, mean, rank_by_score
from graphlake.kernels.text.bm25 import TOKEN_PATTERN, BM25Index
from graphlake.retrieval.index.tables import retrieval_texts
from graphlake.retrieval.methods import parse_methods
from graphlake.warehouse.readers.base import ReadRequest
from graphlake.warehouse.readers.beir import read

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASETS = ROOT.parent / "shared" / "datasets"
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "bm25_throughput.md"
K1, B = 0.9, 0.4
T = TypeVar("T")
Hits = list[tuple[np.ndarray, np.ndarray]]  # (rows, scores) per query, best first


@dataclass
class Row:
    system: str
    build_s: float | None  # None: reuses the index of the row above
    query_s: float
    ndcg10: float
    same_top10: int


@dataclass
class OnlyBM25:
    """The one index the bm25 operator reads, as ``LakeIndexSet.bm25`` gives it."""

    bm25: BM25Index


def tokenizer() -> Tokenizer:
    return Tokenizer(lower=True, splitter=TOKEN_PATTERN, stopwords="en", stemmer=Stemmer.Stemmer("porter"))


def best_of(repeats: int, run: Callable[[], T]) -> tuple[float, T]:
    """Shortest wall time over ``repeats`` calls, and the last call's result."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return min(times), result


def build_bm25s(texts: list[str]) -> tuple[bm25s.BM25, Tokenizer]:
    tok = tokenizer()
    retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
    retriever.index(tok.tokenize(texts, show_progress=False, return_as="tuple"), show_progress=False)
    return retriever, tok


def build_rank_bm25(texts: list[str]) -> tuple[BM25Okapi, Tokenizer, dict[int, str]]:
    tok = tokenizer()
    ids = tok.tokenize(texts, show_progress=False, return_as="ids")
    stems = {sid: stem for stem, sid in tok.get_vocab_dict().items()}
    return BM25Okapi([[stems[i] for i in doc] for doc in ids], k1=K1, b=B), tok, stems


def load_scifact(folder: Path) -> tuple[list[str], list[str], list[str], list[str], dict[str, dict[str, int]]]:
    """Doc ids, corpus texts, test query ids and texts, test qrels."""
    data = read(ReadRequest(folder))
    docs = data.documents
    queries = [q for q in data.queries.to_pylist() if q["split"] == "test"]
    qrels: dict[str, dict[str, int]] = {}
    for qrel in data.qrels.to_pylist():
        if qrel["split"] == "test":
            qrels.setdefault(qrel["query_id"], {})[qrel["doc_id"]] = qrel["relevance"]
    # One node per document: the index input the pipeline builds for an unchunked corpus.
    texts = retrieval_texts(docs, docs)
    return docs.column("doc_id").to_pylist(), texts, [q["query_id"] for q in queries], [q["text"] for q in queries], qrels


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name"))
    model = next(models, platform.processor())
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    ram_kb = next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal")), 0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{platform.platform()}; {model}; {cores} cores usable of {os.cpu_count()}; {ram_kb / 2**20:.1f} GiB RAM"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--datasets",
        type=Path,
        default=Path(settings.DATASETS.text() or DEFAULT_DATASETS),
        help="folder holding scifact/ (default: $GRAPHLAKE_DATASETS or ../shared/datasets)",
    )
    parser.add_argument("--k", type=int, default=100, help="documents retrieved per query")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats; the best is kept")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    k, repeats = args.k, args.repeats

    doc_ids, texts, query_ids, queries, qrels = load_scifact(args.datasets / "scifact")
    print(f"SciFact: {len(texts)} documents, {len(queries)} test queries, k = {k}")

    ours_build, ours_index = best_of(repeats, lambda: BM25Index.build(texts, k1=K1, b=B))
    operator, indexes = parse_methods({"bm25": {"op": "bm25", "k": k}})["bm25"], OnlyBM25(ours_index)

    def run_ours(batch: list[str]) -> Hits:
        return [(c.rows, c.scores) for c in (operator.run(q, indexes) for q in batch)]

    bm25s_build, (retriever, tok) = best_of(repeats, lambda: build_bm25s(texts))

    def run_bm25s(batch: list[str], return_as: str) -> Hits:
        hits = []
        for query in batch:
            tokens = tok.tokenize([query], update_vocab=False, show_progress=False, return_as=return_as)
            rows, scores = retriever.retrieve(tokens, k=k, show_progress=False, n_threads=0)
            hits.append((rows[0], scores[0]))
        return hits

    def run_bm25s_batched(batch: list[str]) -> Hits:
        tokens = tok.tokenize(batch, update_vocab=False, show_progress=False, return_as="ids")
        rows, scores = retriever.retrieve(tokens, k=k, show_progress=False, n_threads=0)
        return list(zip(rows, scores, strict=True))

    okapi_build, (okapi, okapi_tok, stems) = best_of(repeats, lambda: build_rank_bm25(texts))

    def run_okapi(batch: list[str]) -> Hits:
        hits = []
        for query in batch:
            ids = okapi_tok.tokenize([query], update_vocab=False, show_progress=False, return_as="ids")[0]
            scores = okapi.get_scores([stems[i] for i in ids])
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top], kind="stable")]
            hits.append((top, scores[top]))
        return hits

    systems: list[tuple[str, float | None, Callable[[list[str]], Hits]]] = [
        ("graphlake `bm25` operator (BM25Index.search), per query", ours_build, run_ours),
        ("bm25s, per query (token ids)", bm25s_build, lambda batch: run_bm25s(batch, "ids")),
        ("bm25s, per query (Tokenized tuple input)", None, lambda batch: run_bm25s(batch, "tuple")),
        (f"bm25s, batched ({len(queries)} queries, one retrieve call)", None, run_bm25s_batched),
        ("rank-bm25 BM25Okapi, per query (get_scores + argpartition)", okapi_build, run_okapi),
    ]
    rows: list[Row] = []
    reference: list[list[str]] = []
    for name, build_s, run in systems:
        run(queries[:1])  # warm-up
        query_s, hits = best_of(repeats, lambda run=run: run(queries))
        rankings = [rank_by_score({doc_ids[r]: float(s) for r, s in zip(hit_rows.tolist(), hit_scores.tolist(), strict=True) if s > 0}) for hit_rows, hit_scores in hits]
        reference = reference or rankings
        ndcg = mean(evaluate(dict(zip(query_ids, rankings, strict=True)), qrels, ["ndcg@10"]), "ndcg@10")
        same = sum(a[:10] == b[:10] for a, b in zip(rankings, reference, strict=True))
        rows.append(Row(name, build_s, query_s, ndcg, same))
        print(f"{name}: {len(queries) / query_s:,.0f} QPS, nDCG@10 {ndcg:.4f}")

    ratio = rows[1].query_s / rows[0].query_s  # our QPS / bm25s per-query QPS
    print(f"our QPS / bm25s per-query QPS = {ratio:.2f} (acceptance: >= 0.9) -> {'PASS' if ratio >= 0.9 else 'FAIL'}")
    write_report(args, rows, len(texts), len(queries), ratio)
    print(f"wrote {args.output}")


def write_report(args: argparse.Namespace, rows: list[Row], n_docs: int, n_queries: int, ratio: float) -> None:
    def rel(path: Path | str) -> str:
        return os.path.relpath(os.path.abspath(path), ROOT)  # not resolved: keep the venv's python link

    options = ["--datasets", rel(args.datasets), "--k", str(args.k), "--repeats", str(args.repeats), "--output", rel(args.output)]
    command = shlex.join([rel(sys.executable), rel(__file__), *options])
    libs = ", ".join(f"{name} {version(name)}" for name in ("graphlake", "bm25s", "rank-bm25", "PyStemmer", "numpy", "scipy"))
    table = [
        "| system | index build (s) | QPS | ms / query | nDCG@10 | top-10 same as ours (in order) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        build = "same index" if row.build_s is None else f"{row.build_s:.2f}"
        table.append(f"| {row.system} | {build} | {n_queries / row.query_s:,.0f} | {1000 * row.query_s / n_queries:.3f} | {row.ndcg10:.4f} | {row.same_top10}/{n_queries} |")
    lines = [
        "# BM25 query throughput on SciFact",
        "",
        f"- date (UTC): {datetime.now(UTC):%Y-%m-%d %H:%M}",
        f"- machine: {machine()}",
        f"- python {platform.python_version()}; {libs}",
        f"- command (repo root, `pip install -e '.[bench]'`): `{command}`",
        f'- data: SciFact BEIR, {n_docs} documents (title + " " + text), {n_queries} test queries, k = {args.k}',
        (f"- QPS = queries / wall time from query text to top-k (tokenising included), one thread, after one warm-up query, best of {args.repeats}; build = tokenise + index, best of {args.repeats}"),
        (
            "- nDCG@10 over positive scores ranked by score; rank-bm25's BM25Okapi uses idf = log((N - n + 0.5) / (n + 0.5)) "
            "(floored at 0.25 x mean idf), not Lucene's log(1 + ...), so its ranking differs slightly"
        ),
        "",
        *table,
        "",
        f"Our QPS / bm25s per-query QPS (token ids) = **{ratio:.2f}** (acceptance: >= 0.9: {'pass' if ratio >= 0.9 else 'FAIL'}).",
        "The Tokenized-tuple row shows why BM25Index.search passes token ids: for a Tokenized tuple,",
        f"bm25s {version('bm25s')} `retrieve` first inverts the whole vocabulary to turn ids back into strings, on every call.",
        "",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
