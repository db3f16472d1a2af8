"""Stage 4, retrieval and evaluation: one run asset and one evaluation asset per declared method.

Methods come from ``pipelines/methods.yaml`` (plus ``$GRAPHLAKE_HOME/methods.yaml``); adding a
method there adds its assets, no code needed.
"""

import json
import time
import uuid
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp
import yaml
from dagster import AssetExecutionContext, AssetKey, AssetOut, AssetsDefinition, Config, Output, asset, multi_asset

from graphlake.assets.partitions import corpus_partitions
from graphlake.assets.vectors import NODE_IDS_FILE, dense_matrix, retrieval_texts
from graphlake.kernels import encoders
from graphlake.kernels.bm25 import BM25Index
from graphlake.kernels.cross_encoder import CrossEncoder
from graphlake.kernels.entities import conceptual_weights, normalise, regex_entities, spacy_entities, title_aliases
from graphlake.kernels.entity_graph import EntityGraph
from graphlake.kernels.graph_operators import TunedRankers
from graphlake.kernels.metrics import GRAPH_METRICS, METRICS_AT_K, evaluate
from graphlake.kernels.operators import needs, parse_methods
from graphlake.kernels.rerank_operators import CORPUS_GRAPH, graph_indexes
from graphlake.kernels.topological_recall import TR_CUTOFFS, DocumentGraph, topological_values
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.pair_cache import PairCache
from graphlake.warehouse.storage import Lake, StorageError

DEFAULT_METHODS = Path(__file__).resolve().parents[1] / "pipelines" / "methods.yaml"
CUTOFFS = (1, 2, 5, 10, 20, 100)
METRIC_NAMES = [f"{m}@{k}" for m in METRICS_AT_K for k in CUTOFFS] + ["mrr"]

# which asset provides each index an operator may read
INDEX_ASSETS: dict[str, tuple[str, ...]] = {
    "bm25": ("bm25_index",),
    "dense": ("dense_vectors",),
    "dense_hnsw": ("dense_hnsw_index",),
    "splade": ("splade_vectors",),
    "cooccurrence": ("cooccurrence_edges",),
    "structural": ("structural_edges",),
    "contextual": ("contextual_edges",),
    "mentions_spacy": ("entities_spacy", "mentions_spacy"),  # one multi-asset: built together
    "mentions_regex": ("entities_regex", "mentions_regex"),
    "graph_rankers": ("graph_rankers",),
    "reranker": ("bm25_index", "dense_vectors", "reranker"),  # it mines negatives with both
    "citation": ("citation_edges",),
    "semantic": ("semantic_edges",),
    "conceptual": ("conceptual_edges",),
    # graph: auto, for the asset graph's lineage (any kind a corpus may use); a run needs only its corpus's (corpus_needs)
    CORPUS_GRAPH: ("citation_edges", "semantic_edges", "conceptual_edges", "structural_edges", "contextual_edges", "entities_spacy", "mentions_spacy"),
}
EXTRACT = {"spacy": spacy_entities, "regex": regex_entities}
EDGE_KINDS = ("cooccurrence", "structural", "contextual", "citation", "semantic", "conceptual")


def load_methods(home: Path) -> tuple[dict[str, Any], dict[str, dict]]:
    """Parsed methods and their raw declarations, the project's defaults overridden by the lake's file."""
    declared = yaml.safe_load(DEFAULT_METHODS.read_text(encoding="utf-8")) or {}
    override = Path(home) / "methods.yaml"
    if override.is_file():
        declared.update(yaml.safe_load(override.read_text(encoding="utf-8")) or {})
    return parse_methods(declared), declared


class LakeIndexes:
    """One corpus's indexes, loaded on first use and checked to share the nodes table's order."""

    def __init__(self, lake: Lake, corpus: str, node_ids: list[str], reuse_pairs: bool = False) -> None:
        self.lake, self.corpus, self.node_ids = lake, corpus, node_ids
        self.reuse_pairs = reuse_pairs

    def _check_order(self, name: str, node_ids: list[str]) -> None:
        if node_ids != self.node_ids:
            raise StorageError(f"{name} of corpus {self.corpus!r} was built from other nodes; materialize it again")

    def _artifact(self, name: str) -> Path:
        folder = self.lake.artifact(name, {"corpus": self.corpus})
        self._check_order(name, json.loads((folder / NODE_IDS_FILE).read_text(encoding="utf-8")))
        return folder

    def _vectors(self, model: str) -> pa.Table:
        table = self.lake.read("vectors", {"corpus": self.corpus, "model": model})
        self._check_order(f"{model} vectors", table.column("node_id").to_pylist())
        return table

    @cached_property
    def _bm25(self) -> BM25Index:
        return BM25Index.load(self._artifact("bm25"))

    @cached_property
    def _dense(self) -> np.ndarray:
        return dense_matrix(self._vectors(encoders.DENSE_MODEL))

    @cached_property
    def _hnsw(self):
        return faiss.read_index(str(self._artifact("dense_hnsw") / "hnsw.faiss"))

    @cached_property
    def _splade(self) -> sp.csr_matrix:
        table = self._vectors(encoders.SPLADE_MODEL)
        indices, values = table.column("indices").combine_chunks(), table.column("values").combine_chunks()
        indptr = np.asarray(indices.offsets, dtype=np.int64)
        matrix = sp.csr_matrix(
            (values.flatten().to_numpy(), indices.flatten().to_numpy(), indptr), shape=(len(table), encoders.splade_vocab_size())
        )
        return matrix.tocsc()

    def bm25(self) -> BM25Index:
        return self._bm25

    def dense(self) -> np.ndarray:
        return self._dense

    def dense_hnsw(self):
        return self._hnsw

    def splade(self) -> sp.csr_matrix:
        return self._splade

    def encode_dense(self, text: str) -> np.ndarray:
        return encoders.encode_dense([text])[0]

    def encode_splade(self, text: str) -> sp.csr_matrix:
        return encoders.encode_splade([text])

    def node_rows(self, node_ids: list[str], table: str) -> np.ndarray:
        """Rows of ``node_ids`` in the nodes table; an id it lacks means ``table`` is stale."""
        position = self._positions
        missing = next((n for n in node_ids if n not in position), None)
        if missing is not None:
            raise StorageError(f"{table} of corpus {self.corpus!r} names node {missing!r}, which is not in nodes; materialize it again")
        return np.fromiter((position[n] for n in node_ids), dtype=np.int64, count=len(node_ids))

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {node_id: row for row, node_id in enumerate(self.node_ids)}

    @cached_property
    def _cooccurrence(self) -> pa.Table:
        return self.lake.read("edges", {"corpus": self.corpus, "kind": "cooccurrence"})

    @cached_property
    def _entity_graphs(self) -> dict[tuple[float, int], EntityGraph]:
        return {}

    def entity_graph(self, hub_prune_percent: float = 0.0, degree_cap: int = 0) -> EntityGraph:
        key = (hub_prune_percent, degree_cap)
        if key not in self._entity_graphs:
            edges = self._cooccurrence
            entity_ids = edges.column("src").combine_chunks().dictionary_encode()
            norms = [entity_id.split(":", 1)[1] for entity_id in entity_ids.dictionary.to_pylist()]
            self._entity_graphs[key] = EntityGraph.build(
                len(self.node_ids),
                norms,
                entity_ids.indices.to_numpy(),
                self.node_rows(edges.column("dst").to_pylist(), "cooccurrence edges"),
                edges.column("weight").to_numpy(),
                hub_prune_percent,
                degree_cap,
            )
        return self._entity_graphs[key]

    def query_entities(self, text: str, extractor: str) -> list[str]:
        """The query's entity norms, found by the extractor the graph was built with and alias-linked like it."""
        built_with = self._cooccurrence.column("source")[0].as_py() if self._cooccurrence.num_rows else extractor
        if built_with != extractor:
            raise StorageError(f"cooccurrence edges of corpus {self.corpus!r} come from {built_with!r} mentions, not {extractor!r}")
        norms = [normalise(name) for name, _ in EXTRACT[extractor]([text])[0]]
        return [self._aliases.get(norm, norm) for norm in norms if norm]

    @cached_property
    def _aliases(self) -> dict[str, str]:
        return title_aliases(self.lake.read("documents", {"corpus": self.corpus}).column("title").to_pylist())

    def proximity(self) -> str:
        return CorpusRegistry(self.lake.home).get(self.corpus).proximity

    @cached_property
    def _proximity_graphs(self) -> dict[str, sp.csr_matrix]:
        return {}

    def candidate_graph(self, rows: np.ndarray, proximity: str, extractor: str) -> sp.csr_matrix:
        """Adjacency among the candidate rows: GraphER A.3's weights for ``conceptual``, 1 per linked pair otherwise."""
        if proximity == "conceptual":
            mentions = self._mention_matrix(extractor)[rows].tocoo()
            src, dst, weight = conceptual_weights(mentions.row, mentions.col, len(rows), mentions.shape[1])
            return sp.csr_matrix((weight, (src, dst)), shape=(len(rows), len(rows)))
        return self._linked(proximity)[rows][:, rows].tocsr()

    def _linked(self, kind: str) -> sp.csr_matrix:
        """The corpus's ``kind`` edges as an undirected 0/1 adjacency over node rows, no loops."""
        if kind not in self._proximity_graphs:
            edges = self.lake.read("edges", {"corpus": self.corpus, "kind": kind})
            src = self.node_rows(edges.column("src").to_pylist(), f"{kind} edges")
            dst = self.node_rows(edges.column("dst").to_pylist(), f"{kind} edges")
            n = len(self.node_ids)
            linked = sp.csr_matrix((np.ones(2 * len(src)), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
            linked.data[:] = 1.0  # weight 1 between linked objects, however many links
            linked.setdiag(0)
            linked.eliminate_zeros()
            self._proximity_graphs[kind] = linked
        return self._proximity_graphs[kind]

    def corpus_graph(self, kinds: tuple[str, ...]) -> tuple[sp.csr_matrix, np.ndarray]:
        """The union of the ``kinds`` edge sets, undirected 0/1, and its node degrees (FastInsight's, GAR's graph)."""
        key = ",".join(sorted(kinds))
        if key not in self._corpus_graphs:
            union = sum((self._linked(kind) for kind in kinds), sp.csr_matrix((len(self.node_ids),) * 2)).tocsr()
            union.data[:] = 1.0  # an edge present in several kinds is still one edge
            self._corpus_graphs[key] = (union, np.diff(union.indptr))
        return self._corpus_graphs[key]

    @cached_property
    def _corpus_graphs(self) -> dict[str, tuple[sp.csr_matrix, np.ndarray]]:
        return {}

    def corpus_graph_kinds(self) -> tuple[str, ...]:
        return CorpusRegistry(self.lake.home).get(self.corpus).corpus_graph

    @cached_property
    def _nodes(self) -> pa.Table:
        nodes = self.lake.read("nodes", {"corpus": self.corpus})
        self._check_order("nodes", nodes.column("node_id").to_pylist())
        return nodes

    @cached_property
    def _texts(self) -> list[str]:
        return retrieval_texts(self._nodes, self.lake.read("documents", {"corpus": self.corpus}))

    def texts(self) -> list[str]:
        """``title + text`` of every node row, what the encoders and the cross-encoder read."""
        return self._texts

    @cached_property
    def _doc_ids(self) -> np.ndarray:
        return np.asarray(self._nodes.column("doc_id").to_pylist(), dtype=object)

    def doc_ids(self) -> np.ndarray:
        return self._doc_ids

    @cached_property
    def _reranker(self) -> CrossEncoder:
        return CrossEncoder.load(self.lake.artifact("reranker", {}))

    def reranker(self) -> CrossEncoder:
        return self._reranker

    def pair_features(self, query: str, rows: np.ndarray) -> np.ndarray:
        """The cross-encoder's [CLS] vectors of (query, node row) pairs; read back from the lake's
        pair cache when this index set reuses pairs (``graphlake eval --reuse-pairs``)."""
        encoder, texts = self._reranker, self._texts

        def compute(missing: np.ndarray) -> np.ndarray:
            return encoder.features(query, [texts[r] for r in missing])

        return self.pair_cache.features(query, rows, compute) if self.pair_cache else compute(rows)

    @cached_property
    def pair_cache(self) -> PairCache | None:
        if not self.reuse_pairs:
            return None
        stamp = f"{self.lake.artifact_written_at('reranker', {}):.6f}-{self.lake.written_at('nodes', {'corpus': self.corpus}):.6f}"
        return PairCache(self.lake.home, self.corpus, stamp)

    @cached_property
    def _mention_matrices(self) -> dict[str, sp.csr_matrix]:
        return {}

    def _mention_matrix(self, extractor: str) -> sp.csr_matrix:
        """Node rows x entities, 1 where the node mentions the entity."""
        if extractor not in self._mention_matrices:
            mentions = self.lake.read("mentions", {"corpus": self.corpus, "extractor": extractor})
            entity = mentions.column("entity_id").combine_chunks().dictionary_encode()
            node = self.node_rows(mentions.column("node_id").to_pylist(), f"{extractor} mentions")
            matrix = sp.csr_matrix(
                (np.ones(len(node)), (node, entity.indices.to_numpy())), shape=(len(self.node_ids), len(entity.dictionary))
            )
            matrix.data[:] = 1.0
            self._mention_matrices[extractor] = matrix
        return self._mention_matrices[extractor]

    @cached_property
    def _tuned_rankers(self) -> TunedRankers:
        return TunedRankers.load(self.lake.artifact("graph_rankers", {"corpus": self.corpus}))

    def tuned_rankers(self) -> TunedRankers:
        return self._tuned_rankers


SPLIT_PARAM = "query_split"  # in a run's params when it ran one split's queries only


class RunConfig(Config):
    split: str | None = None  # run only this split's queries (``graphlake eval --split``); None: every query
    reuse_pairs: bool = False  # cross-encoder vectors from the lake's pair cache (warehouse/pair_cache.py); timings then are no QPT


def run_method(
    name: str, method: Any, methods: Mapping[str, Any], params: dict, lake: Lake, corpus: str, config: RunConfig | None = None
) -> tuple[pa.Table, dict]:
    """Run the corpus's queries (one split's, if the config says) through the method, one at a time, timing each."""
    config = config or RunConfig()
    nodes = lake.read("nodes", {"corpus": corpus}).select(["node_id", "doc_id"])
    queries = lake.read("queries", {"corpus": corpus}).select(["query_id", "text", "split"])
    if config.split is not None:
        queries = queries.filter(pc.equal(queries.column("split"), config.split))
        if not queries.num_rows:
            raise StorageError(f"corpus {corpus!r} has no queries in split {config.split!r}")
        params = {**params, SPLIT_PARAM: config.split}
    node_ids, doc_ids = nodes.column("node_id").to_pylist(), nodes.column("doc_id").to_pylist()
    indexes = LakeIndexes(lake, corpus, node_ids, config.reuse_pairs)
    method.run("warm up", indexes, methods)  # load indexes and models outside the timed loop
    run_id = uuid.uuid4().hex
    columns: dict[str, list] = {k: [] for k in ("query_id", "rank", "node_id", "doc_id", "score", "latency_ms")}
    latencies = []
    for query_id, text in zip(queries.column("query_id").to_pylist(), queries.column("text").to_pylist(), strict=True):
        started = time.perf_counter()
        candidates = method.run(text, indexes, methods)
        latency = (time.perf_counter() - started) * 1000
        latencies.append(latency)
        for rank, (row, score) in enumerate(zip(candidates.rows.tolist(), candidates.scores.tolist(), strict=True), start=1):
            columns["query_id"].append(query_id)
            columns["rank"].append(rank)
            columns["node_id"].append(node_ids[row])
            columns["doc_id"].append(doc_ids[row])
            columns["score"].append(float(score))
            columns["latency_ms"].append(latency)
    n = len(columns["rank"])
    table = pa.table(
        {"run_id": [run_id] * n, "method": [name] * n, "params": [json.dumps(params, sort_keys=True)] * n, **columns}
    )
    summary = {
        "queries": len(latencies),
        "latency_p50_ms": round(float(np.percentile(latencies, 50)), 3) if latencies else 0.0,
        "latency_p95_ms": round(float(np.percentile(latencies, 95)), 3) if latencies else 0.0,
        "latency_p99_ms": round(float(np.percentile(latencies, 99)), 3) if latencies else 0.0,
    }
    if indexes.pair_cache:
        summary |= {"reused_pairs": indexes.pair_cache.hits, "encoded_pairs": indexes.pair_cache.misses}
    return table, summary


def search(home: Path, corpus: str, name: str, text: str, top: int) -> tuple[list[dict], float]:
    """One ad-hoc query: hits with node id, score, title and text, and the search time in ms."""
    methods, _ = load_methods(home)
    lake = Lake(home)
    nodes = lake.read("nodes", {"corpus": corpus})
    titles = dict(
        zip(*(lake.read("documents", {"corpus": corpus}).column(c).to_pylist() for c in ("doc_id", "title")), strict=True)
    )
    indexes = LakeIndexes(lake, corpus, nodes.column("node_id").to_pylist())
    methods[name].run("warm up", indexes, methods)
    started = time.perf_counter()
    candidates = methods[name].run(text, indexes, methods).top(top)
    latency = (time.perf_counter() - started) * 1000
    rows = nodes.take(pa.array(candidates.rows)).to_pylist()
    hits = [
        {"node_id": r["node_id"], "score": float(s), "title": titles[r["doc_id"]], "text": r["text"]}
        for r, s in zip(rows, candidates.scores.tolist(), strict=True)
    ]
    return hits, latency


def doc_rankings(runs: pa.Table) -> dict[str, list[str]]:
    """Per query, documents in order of their best node (a document's score is its best node's)."""
    rankings: dict[str, list[str]] = {}
    ordered = runs.select(["query_id", "rank", "doc_id"]).sort_by([("query_id", "ascending"), ("rank", "ascending")])
    for query_id, doc_id in zip(ordered.column("query_id").to_pylist(), ordered.column("doc_id").to_pylist(), strict=True):
        ranking = rankings.setdefault(query_id, [])
        if doc_id not in ranking:
            ranking.append(doc_id)
    return rankings


def evaluate_run(runs: pa.Table, queries: pa.Table, qrels: pa.Table, documents: DocumentGraph | None = None) -> tuple[pa.Table, pa.Table]:
    """Metrics per split (means) and per query, over the queries of each split that have gold;
    Topological Recall too when the corpus graph is given."""
    rankings = doc_rankings(runs)
    run_id = runs.column("run_id")[0].as_py() if runs.num_rows else ""
    method = runs.column("method")[0].as_py() if runs.num_rows else ""
    splits = dict(zip(queries.column("query_id").to_pylist(), queries.column("split").to_pylist(), strict=True))
    gold: dict[str, dict[str, dict[str, int]]] = {}
    for row in qrels.select(["query_id", "doc_id", "relevance"]).to_pylist():
        split = splits.get(row["query_id"]) or "all"
        gold.setdefault(split, {}).setdefault(row["query_id"], {})[row["doc_id"]] = row["relevance"]
    names = METRIC_NAMES + ([f"{m}@{k}" for m in GRAPH_METRICS for k in TR_CUTOFFS] if documents else [])
    summary, per_query = [], []
    for split, split_gold in sorted(gold.items()):
        values = evaluate(rankings, split_gold, METRIC_NAMES)
        if documents:
            for query_id, extra in topological_values(rankings, split_gold, documents).items():
                values[query_id] |= extra
        for name in names:
            metric, _, k = name.partition("@")
            column = [v[name] for v in values.values()]
            summary.append({"split": split, "metric": metric, "k": int(k) if k else None, "value": float(np.mean(column)) if column else 0.0, "queries": len(column)})
            per_query += [
                {"split": split, "query_id": q, "metric": metric, "k": int(k) if k else None, "value": v[name]} for q, v in values.items()
            ]
    common = {"run_id": run_id, "method": method}
    metrics = pa.Table.from_pylist([{**common, **row} for row in summary])
    query_metrics = pa.Table.from_pylist([{**common, **row} for row in per_query])
    return metrics, query_metrics


def method_assets(home: Path) -> list[AssetsDefinition]:
    methods, declared = load_methods(home)
    return [definition for name in methods for definition in _assets_for(name, methods, declared)]


def _assets_for(name: str, methods: Mapping[str, Any], declared: Mapping[str, dict]) -> list[AssetsDefinition]:
    method = methods[name]
    params = _resolved(name, declared)
    index_deps = [AssetKey(asset) for index in sorted(needs(method, methods)) for asset in INDEX_ASSETS[index]]

    @asset(
        name=f"run_{name}",
        partitions_def=corpus_partitions,
        group_name="retrieval",
        deps=[AssetKey("nodes"), AssetKey("queries"), *index_deps],
        metadata={"table": "runs", "partition": {"method": name}},
        description=f"Top-k of every query by method {name!r}: {json.dumps(params)}",
    )
    def run_asset(context: AssetExecutionContext, config: RunConfig, lake: LakeResource) -> pa.Table:
        table, summary = run_method(name, method, methods, params, lake.lake, context.partition_key, config)
        context.add_output_metadata(summary)
        return table

    @multi_asset(
        name=f"evaluate_{name}",
        outs={
            f"metrics_{name}": AssetOut(metadata={"table": "metrics", "partition": {"method": name}}),
            f"query_metrics_{name}": AssetOut(metadata={"table": "query_metrics", "partition": {"method": name}}),
        },
        partitions_def=corpus_partitions,
        group_name="evaluation",
        deps=[AssetKey(f"run_{name}"), AssetKey("queries"), AssetKey("qrels")],
    )
    def evaluate_asset(context: AssetExecutionContext, lake: LakeResource):
        partition = {"corpus": context.partition_key}
        runs = lake.lake.read("runs", {**partition, "method": name})
        documents = document_graph(lake.lake, context.partition_key)
        queries, qrels = lake.lake.read("queries", partition), lake.lake.read("qrels", partition)
        split = json.loads(runs.column("params")[0].as_py()).get(SPLIT_PARAM) if runs.num_rows else None
        if split is not None:  # a run of one split says nothing about the others
            queries = queries.filter(pc.equal(queries.column("split"), split))
            qrels = qrels.filter(pc.is_in(qrels.column("query_id"), queries.column("query_id")))
        metrics, query_metrics = evaluate_run(runs, queries, qrels, documents)
        headline = {
            f"{row['split']}/{row['metric']}{'@' + str(row['k']) if row['k'] else ''}": round(row["value"], 4)
            for row in metrics.to_pylist()
            if row["k"] in (None, 10)
        }
        yield Output(metrics, f"metrics_{name}", metadata=headline)
        yield Output(query_metrics, f"query_metrics_{name}")

    return [run_asset, evaluate_asset]


def document_graph(lake: Lake, corpus: str) -> DocumentGraph | None:
    """The corpus graph over documents, for Topological Recall; None until all its edge kinds are built."""
    if not corpus_graph_built(lake, corpus):
        return None
    nodes = lake.read("nodes", {"corpus": corpus})
    kinds = CorpusRegistry(lake.home).get(corpus).corpus_graph
    adjacency, _ = LakeIndexes(lake, corpus, nodes.column("node_id").to_pylist()).corpus_graph(kinds)
    return DocumentGraph.from_nodes(adjacency, nodes.column("doc_id").to_pylist())


def corpus_graph_built(lake: Lake, corpus: str) -> bool:
    """Whether every edge kind of the corpus graph (Topological Recall's graph) is in the lake."""
    kinds = CorpusRegistry(lake.home).get(corpus).corpus_graph
    return all(lake.has("edges", {"corpus": corpus, "kind": kind}) for kind in kinds)


def corpus_needs(method: Any, methods: Mapping[str, Any], home: Path, corpus: str) -> set[str]:
    """The indexes a method reads on this corpus: ``graph: auto`` resolved to the corpus's edge kinds."""
    found = needs(method, methods)
    if CORPUS_GRAPH in found:
        found = (found - {CORPUS_GRAPH}) | graph_indexes(CorpusRegistry(home).get(corpus).corpus_graph)
    return found


def assets_to_refresh(lake: Lake, corpus: str, names: list[str], home: Path, split: str | None = None) -> list[str]:
    """Asset names a fresh evaluation of ``names`` on ``split`` (None: every query) needs: missing
    indexes, outdated runs, stale metrics.

    A run is outdated when its method's declaration changed, when it ran another split's queries,
    or when anything it read (nodes, queries, an index, a trained model) was written after it, so
    retraining ``graph_rankers`` or rebuilding an index re-runs the methods that use it. Metrics are
    stale when they belong to another run, or when they lack Topological Recall though the corpus
    graph is now complete (a BM25 run evaluated before FastInsight built the graph gets its TR then).
    """
    methods, declared = load_methods(home)
    unknown = [name for name in names if name not in methods]
    if unknown:
        raise KeyError(f"unknown method(s) {', '.join(unknown)}; declared: {', '.join(methods)}")
    partition = {"corpus": corpus}
    graph_complete = corpus_graph_built(lake, corpus)
    base = ["documents", "queries", "qrels", "foreign_keys", "nodes"]
    selected = base if not all(lake.has(table, partition) for table in base) else []
    for name in names:
        run_partition = {**partition, "method": name}
        run_written = lake.written_at("runs", run_partition)
        inputs = [lake.written_at(table, partition) for table in ("nodes", "queries")]
        for index in sorted(corpus_needs(methods[name], methods, home, corpus)):
            assets = INDEX_ASSETS[index]
            written = None if selected[:1] == base[:1] or assets[-1] in selected else asset_written_at(lake, corpus, assets[-1])
            if written is None and assets[-1] not in selected:
                selected += assets
            inputs.append(written)
        outdated = run_written is None or any(when is None or when > run_written for when in inputs)
        if outdated or not _covers(_first(lake, "runs", run_partition, "params"), _resolved(name, declared), split):
            selected += [f"run_{name}", f"metrics_{name}", f"query_metrics_{name}"]
        elif _first(lake, "metrics", run_partition, "run_id") != _first(lake, "runs", run_partition, "run_id") or (
            graph_complete and not _has_topological_recall(lake, run_partition)
        ):
            selected += [f"metrics_{name}", f"query_metrics_{name}"]
    return selected


def asset_written_at(lake: Lake, corpus: str, asset: str) -> float | None:
    """When an asset last wrote its output for a corpus (epoch seconds), None when it never did."""
    partition = {"corpus": corpus}
    if asset in ("dense_vectors", "splade_vectors"):
        model = encoders.DENSE_MODEL if asset == "dense_vectors" else encoders.SPLADE_MODEL
        return lake.written_at("vectors", {**partition, "model": model})
    if asset in ("bm25_index", "dense_hnsw_index", "graph_rankers"):
        return lake.artifact_written_at(asset.removesuffix("_index"), partition)
    if asset == "reranker":
        return lake.artifact_written_at("reranker", {})
    if asset.endswith("_edges") and asset.removesuffix("_edges") in EDGE_KINDS:
        return lake.written_at("edges", {**partition, "kind": asset.removesuffix("_edges")})
    if asset.startswith("mentions_"):
        return lake.written_at("mentions", {**partition, "extractor": asset.removeprefix("mentions_")})
    return lake.written_at(asset, partition)


def _covers(stored: str | None, declaration: dict, split: str | None) -> bool:
    """Whether a run with these stored params is the declared method over the queries asked for."""
    if stored is None:
        return False
    params = json.loads(stored)
    ran = params.pop(SPLIT_PARAM, None)
    return params == declaration and ran in (None, split)


def _has_topological_recall(lake: Lake, partition: dict[str, str]) -> bool:
    return lake.has("metrics", partition) and GRAPH_METRICS[0] in lake.read("metrics", partition).column("metric").to_pylist()


def _first(lake: Lake, table: str, partition: dict[str, str], column: str) -> str | None:
    """A value every row of a run shares (its id, its params), or None when there is no such run."""
    if not lake.has(table, partition):
        return None
    values = lake.read(table, partition).column(column)
    return values[0].as_py() if len(values) else None


def _resolved(name: str, declared: Mapping[str, Any]) -> dict:
    """The declaration with named inputs expanded, so a run records everything that produced it."""
    spec = dict(declared[name])
    if "inputs" in spec:
        spec["inputs"] = [_resolved(item, declared) if isinstance(item, str) else item for item in spec["inputs"]]
    return spec
