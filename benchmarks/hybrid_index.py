"""Allan-Poe's hybrid graph index on the lake's real sets: quality, recall–QPS, build time and bytes.

For each set: the `eval` table of the Allan-Poe methods next to the single paths and `rrf` (nDCG@10
with a paired bootstrap CI against `rrf`); then, on the evaluated queries with their three vectors
encoded once (encoding is excluded and reported apart), recall@10 against exact fusion and queries
per second, one query at a time and one thread everywhere, methods interleaved query by query, the
median of three passes: `ap_*` over the candidate pool L, faiss HNSW over efSearch (dense only,
against exact dense), `multipath` over its depth, and `fused_exact`. Build time of the hybrid graph
against faiss HNSW (dense only) and bytes against HNSW, the BM25 index and the SPLADE matrix.

The ``kg`` part (``--parts kg``, the paper's Tables 3–4 analogue) evaluates the knowledge-graph
methods against their KG-free twins with paired CIs, on the spaCy KG and, where the source has gold
evidences (2Wiki), on the oracle evidence KG; then, with the query entities found once (excluded and
reported apart), recall@10 against the exact scorer with the same reward, the QPS cost of the KG, and
recall with ``kg_weight`` 0 against plain exact fusion (no reward may leak).

The ``inserts`` part (G7's quality) builds on 80 / 90 / 95 % of the nodes, inserts the rest, and
compares ``ap_three``'s nDCG@10 with a full build's (paired CI).

Run from the repo root: ``.venv/bin/python benchmarks/hybrid_index.py [--sets scifact,2wiki-dev]
[--parts quality,speed,kg,inserts]`` (GRAPHLAKE_HOME is the lake; sets missing from it are ingested and built first).
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from common import EVALUATED, INGEST, TRAINING, arguments, graphlake, header, table
from graphlake.kernels.eval.metrics import ndcg_at_k, paired_bootstrap
from graphlake.kernels.hybrid.graph_index import BuildConfig, Searcher, build
from graphlake.kernels.hybrid.kg import reward
from graphlake.kernels.hybrid.update import insert, splice
from graphlake.kernels.hybrid.vectors import HybridParams, KGQuery, Queries
from graphlake.retrieval.index.derived import hybrid_vectors
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.methods import parse_methods
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.queries import gold_by_query
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage

QUALITY = ["bm25", "dense", "splade", "rrf", "ap_dense", "ap_sparse", "ap_full", "ap_two", "ap_three", "ap_two_tuned", "ap_three_tuned", "ap_three_kw", "fused_three", "multipath_three"]
POOLS = (16, 32, 64, 128, 256, 512)
EF_SEARCH = (16, 32, 64, 128, 256, 512)
DEPTHS = (10, 20, 50, 100)
WEIGHTINGS = {"1/1/1": (1, 1, 1), "1/0/0": (1, 0, 0), "0/1/0": (0, 1, 0), "0/0/1": (0, 0, 1), "0.7/0.3/0": (0.7, 0.3, 0), "0.2/0.8/0": (0.2, 0.8, 0)}
PASSES = 3
KG_PAIRS = {"ap_three_kg": "ap_three", "ap_three_kg_entry": "ap_three", "ap_dense_kg": "ap_dense", "ap_sparse_kg": "ap_sparse", "ap_full_kg": "ap_full"}


def prepare(corpus: str, datasets: Path) -> None:
    if corpus not in CorpusRegistry(lake_home()).all():
        fmt, relative = INGEST[corpus]
        graphlake("ingest", fmt, str(datasets / relative), "--corpus", corpus)


def quality(corpus: str, split: str) -> list[str]:
    """nDCG@10 and recall@10 of every method, and the paired difference to rrf with its 95 % CI."""
    report = json.loads(graphlake("eval", "--corpus", corpus, "--split", split, "--methods", ",".join(QUALITY), "--json"))
    lines = table(f"{corpus} / {split}: quality, {len(report)} methods", ["method", "nDCG@10", "R@10", "Δ nDCG@10 vs rrf [95 % CI]", "p50 ms"])
    for row in report:
        if row["method"] == "rrf":
            delta = "—"
        else:
            compared = json.loads(graphlake("compare", "--corpus", corpus, "--split", split, "--baseline", "rrf", "--method", row["method"], "--metric", "ndcg@10", "--json"))
            delta = f"{compared['difference']:+.4f} [{compared['low']:+.4f}, {compared['high']:+.4f}]"
        metrics = row["metrics"]
        lines.append(f"| {row['method']} | {metrics['ndcg@10']:.4f} | {metrics['recall@10']:.4f} | {delta} | {row['latency_ms']['p50']:.1f} |")
    return lines


def encoded(indexes: LakeIndexSet, texts: list[str]) -> tuple[Queries, float]:
    """The queries on the three paths, and the encoding's milliseconds per query."""
    from graphlake.kernels.text import encoders

    started = time.perf_counter()
    queries = Queries(encoders.encode_dense(texts), sp.csr_matrix(encoders.encode_splade(texts)), indexes.bm25.token_counts(texts))
    return queries, (time.perf_counter() - started) * 1000 / len(texts)


def top10(scores: np.ndarray) -> np.ndarray:
    """The ten best rows, best first (ties by row), as the operators rank."""
    part = np.argpartition(-scores, 9)[:10]
    return part[np.lexsort((part, -scores[part]))]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return len(set(found.tolist()) & set(truth.tolist())) / max(1, len(truth))


def insert_splits(n: int):
    """G7's seeded splits: per share of 80 / 90 / 95 %, the rows built on and the rows inserted after."""
    order = np.random.default_rng(0).permutation(n)
    for share in (0.8, 0.9, 0.95):
        yield share, np.sort(order[: int(share * n)]), np.sort(order[int(share * n) :])


def timed(runs: dict[str, callable], count: int) -> dict[str, tuple[float, list]]:
    """Per configuration: the median over passes of its queries per second, and its results. The
    configurations are interleaved per query in a seeded random order: a run that follows another over
    the same query finds its vectors in cache, and a fixed order would favour the later ones."""
    seconds = {name: [] for name in runs}
    results = {name: [None] * count for name in runs}
    names, rng = list(runs), np.random.default_rng(0)
    for _ in range(PASSES):
        spent = dict.fromkeys(runs, 0.0)
        for i in range(count):
            for name in (names[j] for j in rng.permutation(len(names))):
                run = runs[name]
                started = time.perf_counter()
                results[name][i] = run(i)
                spent[name] += time.perf_counter() - started
        for name in runs:
            seconds[name].append(spent[name])
    return {name: (count / float(np.median(seconds[name])), results[name]) for name in runs}


def speed(corpus: str, split: str) -> list[str]:
    lake = LakeStorage(lake_home())
    indexes = open_index_set(lake, corpus)
    texts = [q["text"] for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split]
    queries, encode_ms = encoded(indexes, texts)
    one = [queries.take([i]) for i in range(len(texts))]  # sliced once: a query arrives as one row
    searcher: Searcher = indexes.hybrid_graph
    vectors = hybrid_vectors(indexes)
    lines = ["", f"Encoding the {len(texts)} queries (dense + SPLADE + BM25 tokens): {encode_ms:.1f} ms per query, excluded below."]
    lines += table(f"{corpus}: recall@10 against exact fusion, queries per second (1 thread)", ["weights", "system", "parameter", "recall@10", "QPS"])
    for label, weights in WEIGHTINGS.items():
        scaled = np.asarray(weights, dtype=np.float64) * searcher.graph.scales
        truth = [top10(vectors.fused(one[i], scaled)[0]) for i in range(len(texts))]
        runs = {f"ap L={pool}": (lambda i, pool=pool, scaled=scaled: searcher.search(one[i], 10, HybridParams(weights=scaled, pool=pool))[1][0]) for pool in POOLS}
        runs["fused_exact"] = lambda i, scaled=scaled: top10(vectors.fused(one[i], scaled)[0])
        if weights == (1, 1, 1):
            runs |= {f"multipath depth={d}": (lambda i, d=d, scaled=scaled: multipath(indexes, vectors, one[i], scaled, d)) for d in DEPTHS}
        for name, (qps, found) in timed(runs, len(texts)).items():
            system, _, parameter = name.partition(" ")
            lines.append(f"| {label} | {system} | {parameter} | {np.mean([recall(f, t) for f, t in zip(found, truth, strict=True)]):.4f} | {qps:,.0f} |")
    hnsw = indexes.dense_hnsw
    truth = [top10(vectors.dense @ queries.dense[i]) for i in range(len(texts))]

    def faiss_search(i: int, ef: int) -> np.ndarray:
        hnsw.hnsw.efSearch = ef
        return hnsw.search(queries.dense[i : i + 1], 10)[1][0]

    runs = {f"faiss-hnsw efSearch={ef}": (lambda i, ef=ef: faiss_search(i, ef)) for ef in EF_SEARCH}
    scaled = np.array([1.0, 0, 0]) * searcher.graph.scales
    runs |= {f"ap_dense L={pool}": (lambda i, pool=pool: searcher.search(one[i], 10, HybridParams(weights=scaled, pool=pool))[1][0]) for pool in POOLS}
    lines += table(f"{corpus}: dense only, recall@10 against exact dense (1 thread)", ["system", "parameter", "recall@10", "QPS"])
    for name, (qps, found) in timed(runs, len(texts)).items():
        system, _, parameter = name.partition(" ")
        lines.append(f"| {system} | {parameter} | {np.mean([recall(f, t) for f, t in zip(found, truth, strict=True)]):.4f} | {qps:,.0f} |")
    return lines + build_and_bytes(corpus, indexes, vectors)


def multipath(indexes: LakeIndexSet, vectors, query: Queries, scaled: np.ndarray, depth: int) -> np.ndarray:
    """Separate-then-fuse with the query encoded once: each path's own top ``depth``, summed with the weights."""
    hnsw = indexes.dense_hnsw
    hnsw.hnsw.efSearch = max(128, depth)
    fused: dict[int, float] = {}
    scores, rows = hnsw.search(query.dense, depth)
    paths = [(rows[0], scores[0])]
    for stored, asked in ((vectors.sparse, query.sparse), (vectors.lexical, query.lexical)):
        values = (stored @ asked.T).toarray().ravel()
        top = np.argpartition(-values, min(depth, len(values) - 1))[:depth]
        paths.append((top[values[top] > 0], values[top[values[top] > 0]]))
    for weight, (rows_, values) in zip(scaled, paths, strict=True):
        for row, value in zip(rows_.tolist(), values.tolist(), strict=True):
            if row >= 0:
                fused[row] = fused.get(row, 0.0) + weight * value
    return np.array(sorted(fused, key=lambda r: (-fused[r], r))[:10])


def build_and_bytes(corpus: str, indexes: LakeIndexSet, vectors) -> list[str]:
    nodes = Queries(vectors.dense, vectors.sparse, indexes.bm25.token_counts(indexes.snapshot.texts()))
    started = time.perf_counter()
    graph = build(vectors, nodes, BuildConfig())
    hybrid_seconds = time.perf_counter() - started
    started = time.perf_counter()
    nndescent = build(vectors, nodes, BuildConfig(knn="nndescent"), graph.scales).build
    nndescent_seconds = time.perf_counter() - started
    started = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(vectors.dense.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 200
    hnsw.add(vectors.dense)
    hnsw_seconds = time.perf_counter() - started
    lake = LakeStorage(lake_home())
    folder_bytes = lambda name: sum(p.stat().st_size for p in lake.artifact(name, {"corpus": corpus}).iterdir())  # noqa: E731
    splade = indexes.splade
    n = len(vectors)
    lines = table(f"{corpus}: build (1 thread) and size, {n:,} nodes", ["what", "seconds", "bytes", "bytes per node"])
    steps = ", ".join(f"{step} {value:.1f} s" for step, value in graph.build["seconds"].items())
    lines.append(f"| hybrid graph ({steps}) | {hybrid_seconds:.1f} | {sum(graph.edge_bytes().values()):,} | {sum(graph.edge_bytes().values()) / n:.0f} |")
    lines += [f"| · {kind} edges | | {size:,} | {size / n:.0f} |" for kind, size in graph.edge_bytes().items()]
    report = nndescent["knn"]
    lines.append(f"| hybrid graph, `knn: nndescent` ({report['iterations']} iterations; k-NN recall vs exact on 200 seeded nodes: **{report['knn_recall']:.4f}**) | {nndescent_seconds:.1f} | | |")
    lines.append(f"| faiss HNSW (M 32, efC 200, dense only, vectors included) | {hnsw_seconds:.1f} | {folder_bytes('dense_hnsw'):,} | {folder_bytes('dense_hnsw') / n:.0f} |")
    lines.append(f"| BM25 index (bm25s folder) | | {folder_bytes('bm25'):,} | {folder_bytes('bm25') / n:.0f} |")
    size = splade.data.nbytes + splade.indices.nbytes + splade.indptr.nbytes
    lines.append(f"| SPLADE matrix (CSC) | | {size:,} | {size / n:.0f} |")
    return lines


def inserts(corpus: str, split: str) -> list[str]:
    """G7's quality part: ``ap_three`` (1/1/1, L 128) on the evaluated queries over a full build and
    over builds of 80 / 90 / 95 % of the nodes (seeded) with the rest inserted. nDCG@10 ranks 100 nodes
    deep and deduplicates documents, as the tuning does; the paired difference to the full build with
    its 95 % CI, recall@10 against exact fusion, and the insert's seconds against the full build's."""
    lake = LakeStorage(lake_home())
    indexes = open_index_set(lake, corpus)
    gold = gold_by_query(lake.read("qrels", {"corpus": corpus}))
    asked = [q for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split and q["query_id"] in gold]
    queries, _ = encoded(indexes, [q["text"] for q in asked])
    one = [queries.take([i]) for i in range(len(asked))]
    vectors, doc_ids = hybrid_vectors(indexes), indexes.snapshot.doc_ids()
    nodes = Queries(vectors.dense, vectors.sparse, indexes.bm25.token_counts(indexes.snapshot.texts()))
    started = time.perf_counter()
    full = build(vectors, nodes, BuildConfig())
    full_seconds = time.perf_counter() - started
    scales = full.scales
    truth = [top10(vectors.fused(q, scales)[0]) for q in one]

    def measured(graph) -> tuple[list[float], float]:
        searcher = Searcher(graph, vectors)
        found = [searcher.search(q, 100, HybridParams(weights=scales, pool=128))[1][0] for q in one]
        values = [ndcg_at_k(list(dict.fromkeys(doc_ids[f].tolist())), gold[q["query_id"]], 10) for f, q in zip(found, asked, strict=True)]
        return values, float(np.mean([recall(f[:10], t) for f, t in zip(found, truth, strict=True)]))

    reference, reference_recall = measured(full)
    lines = table(
        f"{corpus} / {split}: ap_three after inserts, against a full build ({len(vectors):,} nodes, full build {full_seconds:.1f} s; 1/1/1, L 128)",
        ["built on", "inserted", "insert seconds (vs full build)", "nDCG@10", "Δ vs full build [95 % CI]", "recall@10 vs exact fusion"],
    )
    lines.append(f"| 100% (full build) | — | — | {np.mean(reference):.4f} | — | {reference_recall:.4f} |")
    for share, first, rest in insert_splits(len(vectors)):
        base = build(vectors.take(first), nodes.take(first), BuildConfig(), scales)
        started = time.perf_counter()
        grown = insert(splice(base, first, len(vectors)), vectors, nodes, rest, BuildConfig())
        seconds = time.perf_counter() - started
        values, found_recall = measured(grown)
        compared = paired_bootstrap(reference, values)
        lines.append(
            f"| {share:.0%} | {len(rest):,} | {seconds:.1f} ({seconds / full_seconds:.3f}) | {np.mean(values):.4f} | "
            f"{compared['difference']:+.4f} [{compared['low']:+.4f}, {compared['high']:+.4f}] | {found_recall:.4f} |"
        )
    return lines


def knowledge_graph(corpus: str, split: str) -> list[str]:
    """The KG methods against their KG-free twins (spaCy KG, then the evidence oracle where the source
    has evidences), and the walk's recall and speed with the KG."""
    lake = LakeStorage(lake_home())
    evidences = lake.read("triples", {"corpus": corpus, "extractor": "evidence"}).num_rows if (lake.home / "tables" / "triples").exists() else 0
    lines: list[str] = []
    for extractor in ("spacy", "evidence") if evidences else ("spacy",):
        index_with_kg(corpus, extractor)
        graph = open_index_set(lake, corpus).hybrid_graph.graph
        report = {row["method"]: row for row in json.loads(graphlake("eval", "--corpus", corpus, "--split", split, "--methods", ",".join([*KG_PAIRS, *set(KG_PAIRS.values())]), "--json"))}
        oracle = " — ORACLE: the questions' own gold evidence triples" if extractor == "evidence" else ""
        title = f"{corpus} / {split}: kg {extractor}{oracle} ({len(graph.kg.entities):,} entities, {len(graph.kg.source):,} relations)"
        lines += table(title, ["method", "nDCG@10", "R@10", "twin", "twin nDCG@10", "Δ nDCG@10 [95 % CI]", "p50 ms"])
        for method, twin in KG_PAIRS.items():
            compared = json.loads(graphlake("compare", "--corpus", corpus, "--split", split, "--baseline", twin, "--method", method, "--metric", "ndcg@10", "--json"))
            mine, theirs = report[method]["metrics"], report[twin]["metrics"]
            delta = f"{compared['difference']:+.4f} [{compared['low']:+.4f}, {compared['high']:+.4f}]"
            lines.append(f"| {method} | {mine['ndcg@10']:.4f} | {mine['recall@10']:.4f} | {twin} | {theirs['ndcg@10']:.4f} | {delta} | {report[method]['latency_ms']['p50']:.1f} |")
        with threadpool_limits(1):
            lines += kg_speed(corpus, split)
    if evidences:
        index_with_kg(corpus, "spacy")  # the lake's default back
    return lines


def index_with_kg(corpus: str, extractor: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as config:
        json.dump({"ops": {"hybrid_graph_index": {"config": {"kg": extractor}}}}, config)
    graphlake("materialize", "--corpus", corpus, "--select", "key:hybrid_graph_index", "--config", config.name)
    Path(config.name).unlink()


def kg_speed(corpus: str, split: str) -> list[str]:
    """Recall@10 against exact scoring and QPS, 1/1/1 at L 128, with and without the KG, entities found once."""
    lake = LakeStorage(lake_home())
    indexes = open_index_set(lake, corpus)
    texts = [q["text"] for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split]
    queries, _ = encoded(indexes, texts)
    one = [queries.take([i]) for i in range(len(texts))]
    searcher: Searcher = indexes.hybrid_graph
    vectors, kg = hybrid_vectors(indexes), searcher.graph.kg
    operator = parse_methods({"kg": {"op": "hybrid_graph", "kg": True}})["kg"]
    started = time.perf_counter()
    found = [operator.kg_query(text, indexes) for text in texts]
    entity_ms = (time.perf_counter() - started) * 1000 / len(texts)
    named = [q for q in found if q is not None]
    weight = named[0].weight if named else float("nan")
    scaled = np.ones(3) * searcher.graph.scales
    fused = [vectors.fused(one[i], scaled)[0] for i in range(len(texts))]
    truth = [top10(f + (reward(kg.node_hops(q.entity_hops), q.weight) if q is not None else 0)) for f, q in zip(fused, found, strict=True)]
    zero = [None if q is None else KGQuery(q.entity_hops, 0.0, q.hops, q.edges) for q in found]
    runs = {
        "ap_three": lambda i: searcher.search(one[i], 10, HybridParams(weights=scaled, pool=128))[1][0],
        "ap_three_kg": lambda i: searcher.search(one[i], 10, HybridParams(weights=scaled, pool=128, kg=[found[i]]))[1][0],
        "ap_three_kg_entry": lambda i: searcher.search(
            one[i], 10, HybridParams(weights=scaled, pool=128, kg=[None if found[i] is None else KGQuery(found[i].entity_hops, weight, found[i].hops, False)])
        )[1][0],
        "kg_weight 0": lambda i: searcher.search(one[i], 10, HybridParams(weights=scaled, pool=128, kg=[zero[i]]))[1][0],
    }
    against = {"ap_three": [top10(f) for f in fused], "kg_weight 0": [top10(f) for f in fused]}
    lines = [
        "",
        f"{len(named)} of {len(texts)} queries name a KG entity (spaCy NER + title aliases: {entity_ms:.1f} ms per query, excluded below); kg_weight {weight}.",
    ]
    lines += table(f"{corpus}: 1/1/1, L 128, recall@10 against exact scoring with the same reward (1 thread)", ["configuration", "recall@10", "QPS"])
    for name, (qps, results) in timed(runs, len(texts)).items():
        reference = against.get(name, truth)
        lines.append(f"| {name} | {np.mean([recall(f, t) for f, t in zip(results, reference, strict=True)]):.4f} | {qps:,.0f} |")
    return lines


def main() -> None:
    def extra(parser) -> None:
        parser.add_argument("--sets", default="scifact")
        parser.add_argument("--parts", default="quality,speed", help="comma-separated: quality, speed, kg, inserts")

    args = arguments(__doc__.splitlines()[0], "hybrid_index.md", extra)
    parts = set(args.parts.split(","))
    command = ".venv/bin/python benchmarks/hybrid_index.py " + shlex.join(sys.argv[1:])
    lines = header("Allan-Poe's hybrid graph index (CPU)", command)
    lines += ["- threads: 1 (OMP, BLAS, numba, faiss); timings interleaved query by query, median of 3 passes", f"- lake: GRAPHLAKE_HOME, datasets: {args.datasets}"]
    for corpus in args.sets.split(","):
        split = EVALUATED.get(corpus) or TRAINING[corpus]  # a training set's own queries: kg_weight was tuned on them
        prepare(corpus, args.datasets)
        if "quality" in parts:
            lines += quality(corpus, split)  # the CLI builds what is missing with every core
        if "speed" in parts:
            with threadpool_limits(1):  # the timings: one thread for BLAS and OpenMP (faiss too, below)
                lines += speed(corpus, split)
        if "kg" in parts:
            lines += knowledge_graph(corpus, split)
        if "inserts" in parts:
            with threadpool_limits(1):
                lines += inserts(corpus, split)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    faiss.omp_set_num_threads(1)
    main()
