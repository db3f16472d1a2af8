"""FastInsight against Re2, GAR, Vector and BM25 with a GPU-trained reranker, on a GPU machine.

``benchmarks/fastinsight.py`` evaluates the lake's own reranker, trained within the 2-core CPU budget,
and that model is weaker than dense retrieval; this script asks what the comparison looks like with
the same recipe trained longer on a GPU (``benchmarks/reranker_training.py train --save``). A GPU
machine has no lake, so:

* ``export`` (beside the lake) writes, per evaluated set, a folder with the node texts and doc ids,
  the dense vectors (half precision, for the transfer), the corpus graph, and every evaluated query
  with its dense embedding, its dense and BM25 top 100 (the lake's own ``vector`` and ``bm25`` methods),
  its gold documents, and whether it is in the seeded timing sample of the CPU timings;
* ``evaluate`` (anywhere torch sees the device) runs the project's kernels on them: R@10, nDCG@10 and
  Topological Recall with bootstrap intervals, FastInsight's paired differences to Re2 and GAR, the
  budget curves and the alpha/beta sensitivity on 2Wiki dev (pairs scored once per query and shared,
  as ``graphlake eval --reuse-pairs`` does), and cold query processing time on the timing sample,
  the methods taking turns on each query.

    .venv/bin/python benchmarks/gpu_fastinsight.py export --folder <dir>      # GRAPHLAKE_HOME=<lake>
    python benchmarks/gpu_fastinsight.py evaluate --folder <dir> --model <model folder> --output <results.md>
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp
import torch

from common import ALPHAS, BETAS, BUDGETED, BUDGETS, CURVE_SET, EVALUATED, QPT_QUERIES, export_and_run, header, prepare_lake, table, timing_sample
from graphlake.kernels.eval.metrics import bootstrap_interval, evaluate, paired_bootstrap
from graphlake.kernels.eval.topological_recall import DocumentGraph, topological_values
from graphlake.kernels.rerank.adaptive import PairScorer, fastinsight, gar
from graphlake.kernels.rerank.cross_encoder import CrossEncoder
from graphlake.retrieval.index.derived import corpus_graph

DEPTH = 100
METHODS = ("vector", "bm25", "re2", "gar", "fastinsight")
METRICS = ("capped_recall@10", "ndcg@10")


def export(folder: Path, datasets: Path) -> None:
    prepare_lake(datasets)
    for corpus, split in EVALUATED.items():
        methods, sample, indexes = timing_sample(corpus, split)
        lake = indexes.lake
        gold: dict[str, list[str]] = {}
        for row in lake.read("qrels", {"corpus": corpus}).to_pylist():
            if row["relevance"] > 0:
                gold.setdefault(row["query_id"], []).append(row["doc_id"])
        queries = [q for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split and q["query_id"] in gold]
        timed = set(sample)
        out = folder / corpus
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.table(
                {
                    "query_id": [q["query_id"] for q in queries],
                    "query": [q["text"] for q in queries],
                    "embedding": indexes.encoders.dense([q["text"] for q in queries]).tolist(),
                    **{name: [methods[name].run(q["text"], indexes).rows[:DEPTH].tolist() for q in queries] for name in ("vector", "bm25")},
                    "gold": [sorted(gold[q["query_id"]]) for q in queries],
                    "timed": [q["text"] in timed for q in queries],
                }
            ),
            out / "queries.parquet",
            compression="zstd",
        )
        pq.write_table(pa.table({"text": indexes.snapshot.texts(), "doc_id": indexes.snapshot.doc_ids().tolist()}), out / "nodes.parquet", compression="zstd")
        np.save(out / "vectors.npy", np.asarray(indexes.dense, dtype=np.float16))
        graph, _ = corpus_graph(indexes, indexes.snapshot.linking.corpus_graph)
        sp.save_npz(out / "graph.npz", sp.csr_matrix(graph))
        (out / "meta.json").write_text(json.dumps({"corpus": corpus, "split": split, "graph": list(indexes.snapshot.linking.corpus_graph)}))
        print(f"{corpus}: {len(queries)} queries, {len(indexes.snapshot.texts())} nodes", flush=True)


@dataclass
class EvaluatedSet:
    """One exported set, loaded."""

    corpus: str
    split: str
    graph_kinds: list[str]
    texts: list[str]
    docs: list[str]
    vectors: np.ndarray
    graph: sp.csr_matrix
    degrees: np.ndarray
    queries: list[dict]

    @classmethod
    def load(cls, folder: Path, limit: int | None = None) -> EvaluatedSet:
        meta = json.loads((folder / "meta.json").read_text())
        nodes = pq.read_table(folder / "nodes.parquet")
        graph = sp.load_npz(folder / "graph.npz").tocsr()
        return cls(
            meta["corpus"],
            meta["split"],
            meta["graph"],
            nodes.column("text").to_pylist(),
            nodes.column("doc_id").to_pylist(),
            np.load(folder / "vectors.npy").astype(np.float32),
            graph,
            np.diff(graph.indptr),
            pq.read_table(folder / "queries.parquet").to_pylist()[:limit],
        )

    def gold(self) -> dict[str, dict[str, int]]:
        return {q["query_id"]: dict.fromkeys(q["gold"], 1) for q in self.queries}


class Pairs:
    """The cross-encoder for one set, with a stopwatch, a log of the pairs sent to it, and, when
    ``cached``, each (query, node) [CLS] vector kept for the run's other methods (the lake's pair
    cache, in memory)."""

    def __init__(self, encoder: CrossEncoder, texts: list[str], cached: bool) -> None:
        self.encoder, self.texts, self.cached = encoder, texts, cached
        self.memory: dict[tuple[str, int], np.ndarray] = {}
        self.seconds = 0.0
        self.sent: list[tuple[str, list[int]]] = []  # (query, node rows) of each encoder call

    def scorer(self, query: str) -> PairScorer:
        return PairScorer(lambda rows: self._timed(self._features, query, rows), lambda h: self._timed(self.encoder.head, h))

    def _features(self, query: str, rows: np.ndarray) -> np.ndarray:
        if not self.cached:
            return self._encoded(query, [int(r) for r in rows])
        missing = [int(r) for r in rows if (query, int(r)) not in self.memory]
        if missing:
            for row, vector in zip(missing, self._encoded(query, missing), strict=True):
                self.memory[(query, row)] = vector
        return np.stack([self.memory[(query, int(r))] for r in rows])

    def _encoded(self, query: str, rows: list[int]) -> np.ndarray:
        self.sent.append((query, rows))
        return self.encoder.features(query, [self.texts[r] for r in rows])

    def tokens(self, sent: list[tuple[str, list[int]]]) -> tuple[int, int]:
        """Real and padded tokens of logged calls, counted after the timings so as not to slow them."""
        counts = [self.encoder.tokens(query, [self.texts[r] for r in rows]) for query, rows in sent]
        return tuple(map(sum, zip(*counts))) if counts else (0, 0)

    def _timed(self, function, *args):
        started = time.perf_counter()
        try:
            return function(*args)
        finally:
            self.seconds += time.perf_counter() - started


Method = Callable[[dict], np.ndarray]  # a query row -> node rows, best first


def methods(data: EvaluatedSet, pairs: Pairs, budget: int = DEPTH, alpha: float = 0.2, beta: float = 1.0) -> dict[str, Method]:
    """The five methods as the lake declares them (retrieval/methods.yaml and benchmarks/fastinsight.py's
    variants: a budgeted method keeps its b_max best), at one budget."""

    def re2(q: dict) -> np.ndarray:
        rows = np.asarray(q["vector"][:budget], dtype=np.int64)
        scores = pairs.scorer(q["query"]).scores(rows)
        return rows[np.lexsort((rows, -scores))]  # the lake's ``ranked``: best score first, ties by row

    return {
        "vector": lambda q: np.asarray(q["vector"]),
        "bm25": lambda q: np.asarray(q["bm25"]),
        "re2": re2,
        "gar": lambda q: gar(np.asarray(q["vector"]), data.graph, pairs.scorer(q["query"]), 10, budget)[0][:budget],  # k = b_max, as declared
        "fastinsight": lambda q: fastinsight(np.asarray(q["embedding"], dtype=np.float32), data.vectors, data.graph, data.degrees, pairs.scorer(q["query"]), 10, budget, alpha, beta)[0],
    }


def per_query(data: EvaluatedSet, documents: DocumentGraph, method: Method) -> dict[str, np.ndarray]:
    """Per-query R@10, nDCG@10, TR@10, TR@100 and MissTR@100 (the lake's metric functions), in query order."""
    rankings = {q["query_id"]: [data.docs[r] for r in method(q)] for q in data.queries}
    gold = data.gold()
    values = evaluate(rankings, gold, list(METRICS))
    for query_id, extra in topological_values(rankings, gold, documents).items():
        values[query_id] |= extra
    return {name: np.array([values[q["query_id"]][name] for q in data.queries]) for name in (*METRICS, "tr@10", "tr@100", "misstr@100")}


def cell(values: np.ndarray) -> str:
    low, high = bootstrap_interval(values)
    return f"{100 * values.mean():.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def main_rows(data: EvaluatedSet, pairs: Pairs, documents: DocumentGraph) -> tuple[list[str], list[str]]:
    """Main-table rows and FastInsight's paired differences to Re2 and GAR on one set."""
    found = {name: per_query(data, documents, run) for name, run in methods(data, pairs).items()}
    rows = [f"| {data.corpus} | {m} | {cell(found[m][METRICS[0]])} | {cell(found[m][METRICS[1]])} | {100 * found[m]['tr@10'].mean():.1f} |" for m in METHODS]
    paired = []
    for baseline in ("re2", "gar"):
        for metric in METRICS:
            c = paired_bootstrap(found[baseline][metric], found["fastinsight"][metric])
            paired.append(f"| {data.corpus} | fastinsight − {baseline} | {metric} | {100 * c['difference']:+.1f} [{100 * c['low']:+.1f}, {100 * c['high']:+.1f}] | {c['p_value']:.3f} |")
    return rows, paired


def curve_rows(data: EvaluatedSet, pairs: Pairs, documents: DocumentGraph, output: Path) -> list[str]:
    """TR, MissTR and R@10 against b_max (Figure 6) and FastInsight's alpha/beta sensitivity (Figure 7), with plots."""
    plt = pyplot()
    lines = table(f"Budget curves on {data.corpus} {data.split} (TR over every retrieved node, i.e. at b_max)", ["method", "b_max", "TR", "MissTR", "R@10", "nDCG@10"])
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name in BUDGETED:
        points = [per_query(data, documents, methods(data, pairs, budget=b)[name]) for b in BUDGETS]
        for b, m in zip(BUDGETS, points, strict=True):
            lines.append(f"| {name} | {b} | {100 * m['tr@100'].mean():.1f} | {100 * m['misstr@100'].mean():.1f} | {100 * m[METRICS[0]].mean():.1f} | {100 * m[METRICS[1]].mean():.1f} |")
        left.plot(BUDGETS, [m["tr@100"].mean() for m in points], marker="o", label=name)
        right.plot(BUDGETS, [m[METRICS[0]].mean() for m in points], marker="o", label=name)
    left.set(xlabel="budget b_max", ylabel="Topological Recall", title=f"TR vs budget ({data.corpus}, GPU-trained reranker)")
    right.set(xlabel="budget b_max", ylabel="capped R@10", title=f"R@10 vs budget ({data.corpus}, GPU-trained reranker)")
    left.legend(), right.legend()
    figure.tight_layout()
    figure.savefig(output.with_name(output.stem + "_budget.png"), dpi=120)
    lines += table(f"FastInsight sensitivity on {data.corpus} {data.split} (b_max 100; the other parameter at its default)", ["parameter", "value", "R@10", "nDCG@10"])
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, (parameter, values) in zip(axes, (("alpha", ALPHAS), ("beta", BETAS)), strict=True):
        recall = []
        for value in values:
            m = per_query(data, documents, methods(data, pairs, **{parameter: value})["fastinsight"])
            recall.append(m[METRICS[0]].mean())
            lines.append(f"| {parameter} | {value} | {100 * recall[-1]:.1f} | {100 * m[METRICS[1]].mean():.1f} |")
        axis.plot([str(v) for v in values], recall, marker="o")
        axis.set(xlabel=parameter, ylabel="capped R@10", title=f"FastInsight R@10 vs {parameter} ({data.corpus})")
    figure.tight_layout()
    figure.savefig(output.with_name(output.stem + "_sensitivity.png"), dpi=120)
    return lines


def qpt_rows(data: EvaluatedSet, encoder: CrossEncoder) -> list[str]:
    """Cold QPT of the three reranking methods on the timing sample, taking turns on each query."""
    pairs = Pairs(encoder, data.texts, cached=False)
    runs = methods(data, pairs)
    sample = [q for q in data.queries if q["timed"]]
    for name in BUDGETED:
        runs[name](sample[0])  # warm-up: kernels compiled, memory pools filled
    elapsed = {name: [] for name in BUDGETED}
    inside = dict.fromkeys(BUDGETED, 0.0)
    sent = {name: [] for name in BUDGETED}
    for i, q in enumerate(sample):
        for name in BUDGETED[i % 3 :] + BUDGETED[: i % 3]:
            pairs.seconds, pairs.sent = 0.0, []
            started = time.perf_counter()
            runs[name](q)
            elapsed[name].append((time.perf_counter() - started) * 1000)
            inside[name] += pairs.seconds * 1000
            sent[name] += pairs.sent
    rows = []
    for name in BUDGETED:
        ms = np.array(elapsed[name])
        outside = (ms.sum() - inside[name]) / len(ms)
        real, padded = pairs.tokens(sent[name])
        rows.append(
            f"| {data.corpus} | {name} | {np.percentile(ms, 50):.1f} | {np.percentile(ms, 95):.1f} | {ms.mean():.1f} | {inside[name] / ms.sum():.0%} | {outside:.1f} "
            f"| {real / len(ms):.0f} | {padded / len(ms):.0f} | {1000 * ms.sum() / padded:.1f} |"
        )
    for baseline in ("re2", "gar"):
        c = paired_bootstrap(elapsed[baseline], elapsed["fastinsight"])
        rows.append(f"| {data.corpus} | fastinsight − {baseline} (paired) | | | {c['difference']:+.1f} [{c['low']:+.1f}, {c['high']:+.1f}] | | | | | |")
    return rows


def pyplot():
    """matplotlib without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def run_evaluation(args: argparse.Namespace) -> None:
    torch.set_float32_matmul_precision("high")  # TF32 on a GPU; no effect on a CPU
    encoder = CrossEncoder.load(args.model)
    device = torch.cuda.get_device_name() if encoder.device.type == "cuda" else "CPU"
    training = json.loads((args.model / "training.json").read_text()).get("training", {})
    lines = header(f"FastInsight, Re2, GAR with the GPU-trained reranker ({device})", "python benchmarks/gpu_fastinsight.py evaluate " + " ".join(sys.argv[2:]))
    lines += [
        f"- reranker: `{args.model.name}`, held-out nDCG@10 {training.get('best_validation', float('nan')):.3f} (its training: benchmarks/results/reranker_training.md)",
        *(
            []
            if args.qpt_only
            else [
                "- capped R@10 and nDCG@10 in %, 95% bootstrap interval over queries; TR@10 over the corpus graph; b_max 100, BATCH 10, alpha 0.2, beta 1",
                "- Vector and BM25 are the lake's own runs (exported); dense vectors travel in half precision",
            ]
        ),
        f"- QPT: cold (no pair cache), one query at a time, on the {QPT_QUERIES}-query seeded sample of the CPU timings, methods taking turns;"
        " the query's dense encoding and first-stage search are precomputed, so they are not in these times",
        "- tokens: what each method sent to the cross-encoder per query, real and padded as its batches ran;"
        " on a CPU time follows the padded count, so ms / 1k padded tokens compares the implementations and tokens / query the passages each method picks",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    sets = {corpus: EvaluatedSet.load(args.folder / corpus, args.limit) for corpus in EVALUATED if (args.folder / corpus).is_dir()}

    def save(more: list[str]) -> None:
        lines.extend(more)
        args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("\n".join(more), flush=True)

    if not args.qpt_only:
        save(table("Retrieval", ["corpus", "method", "R@10", "nDCG@10", "TR@10"]))
        cached, documents, paired = {}, {}, []
        for corpus, data in sets.items():
            cached[corpus] = Pairs(encoder, data.texts, cached=True)
            documents[corpus] = DocumentGraph.from_nodes(data.graph, data.docs)
            rows, differences = main_rows(data, cached[corpus], documents[corpus])
            save(rows)
            paired += differences
        save(table("FastInsight against Re2 and GAR, paired bootstrap", ["corpus", "difference", "metric", "Δ [95% CI]", "p"]))
        save(paired)
        if CURVE_SET in sets:
            save(curve_rows(sets[CURVE_SET], cached[CURVE_SET], documents[CURVE_SET], args.output))
    save(table("Query processing time at b_max 100 (ms, cold)", ["corpus", "method", "p50", "p95", "mean", "cross-encoder share", "rest, mean", "tokens / query", "padded / query", "ms / 1k padded"]))
    for data in sets.values():
        save(qpt_rows(data, encoder))


def main() -> None:
    parser, _, run = export_and_run(__doc__, "the evaluated sets' inputs", "fastinsight_gpu.md", ("evaluate", "evaluate and time the methods on the device torch sees"))
    run.add_argument("--model", type=Path, required=True, help="a cross-encoder folder (reranker_training.py train --save, or the lake's artefact)")
    run.add_argument("--limit", type=int, help="only the first this many queries of each set (a smoke test)")
    run.add_argument("--qpt-only", action="store_true", help="only the query processing times (say, on a CPU)")
    args = parser.parse_args()
    if args.command == "export":
        export(args.folder, args.datasets)
    else:
        run_evaluation(args)


if __name__ == "__main__":
    main()
