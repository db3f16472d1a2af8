"""Stage 2, link graphs: citation, structural and semantic edges between nodes.

Edges join nodes (``<doc_id>#<chunk_idx>``), so a link between documents has to pick its nodes:

- ``citation``: from the node whose span holds the citation (the earliest chunk that contains it
  whole; chunks overlap) to the cited document's first node (``#0``), which carries its title and
  opening. A node citing a document several times, in any style, gives one edge of weight 1.
- ``structural``: first node to first node, because a foreign key or a hyperlink relates whole
  documents. Foreign keys point from the referencing table to the referenced one; a table pair
  is one edge whose weight is the number of keys declared between them (storage keys edges by
  (src, dst, kind), and Spider's dog_kennels declares one key twice), so the weights add up to
  the ``foreign_keys`` rows. Self-referencing keys are kept as loops. For ``files`` corpora,
  markdown and HTML links between files add edges the same way (weight = number of links).
- ``semantic``: node to node, the k nearest neighbours by cosine of the dense vectors (exact on small
  corpora, from a faiss HNSW graph on large ones).
"""

import time
from collections import Counter, defaultdict
from typing import Literal

import numpy as np
import pyarrow as pa
from dagster import AssetExecutionContext, Config, MetadataValue, asset

from graphlake.assets.failure_budget import FailureBudget
from graphlake.common.llm import LLMClient, LLMOutputError, lake_client
from graphlake.kernels.text.citations import CitationIndex, find_citations, find_links, llm_citations
from graphlake.retrieval.index.tables import dense_matrix
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.tables import edges_table

SCORE_BLOCK = 1 << 26  # similarity scores held at once by the exact kNN (256 MB of float32)


EXACT_UP_TO = 10_000  # nodes: the semantic kNN is exact up to here (about 5 CPU-s), from HNSW above


RECALL_SAMPLE = 256  # seeded rows the HNSW kNN's recall is measured on


def _edge_metadata(kind: str) -> dict:
    return {"table": "edges", "partition": {"kind": kind}}


class NodeSpans:
    """Each document's chunks in order, for finding a document's first node or the node at an offset."""

    def __init__(self, nodes: pa.Table) -> None:
        self.spans: dict[str, list[tuple[int, int, int, str]]] = defaultdict(list)
        for row in nodes.select(["node_id", "doc_id", "chunk_idx", "start", "end"]).to_pylist():
            self.spans[row["doc_id"]].append((row["chunk_idx"], row["start"], row["end"], row["node_id"]))
        for spans in self.spans.values():
            spans.sort()

    def first(self, doc_id: str) -> str | None:
        spans = self.spans.get(doc_id)
        return spans[0][3] if spans else None

    def containing(self, doc_id: str, start: int, end: int) -> str | None:
        """The earliest chunk holding ``[start, end)`` whole, else the one where it starts."""
        spans = self.spans.get(doc_id, [])
        whole = [node for _, s, e, node in spans if s <= start and end <= e]
        starts = [node for _, s, e, node in spans if s <= start < e]
        return (whole or starts or [None])[0]


def edge_table(weights: dict[tuple[str, str], float], kind: str, sources: dict[tuple[str, str], str]) -> pa.Table:
    pairs = sorted(weights)
    return edges_table([a for a, _ in pairs], [b for _, b in pairs], [float(weights[p]) for p in pairs], kind, [sources[p] for p in pairs])


def graph_metadata(edges: pa.Table, node_ids: list[str], started: float) -> dict:
    """Size and shape of an edge set; the out-degree percentile is over all nodes of the corpus."""
    src, dst = edges.column("src").to_pylist(), edges.column("dst").to_pylist()
    out_degree = Counter(src)
    degrees = np.array([out_degree.get(node, 0) for node in node_ids] or [0])
    return {
        "edges": edges.num_rows,
        "distinct_endpoints": len(set(src) | set(dst)),
        "p95_out_degree": float(np.percentile(degrees, 95)),
        "build_seconds": round(time.perf_counter() - started, 3),
    }


def citation_weights(nodes: pa.Table, documents: pa.Table) -> tuple[dict[tuple[str, str], float], Counter]:
    """Node -> cited first node pairs (weight 1) and the number of citations found per style."""
    doc_ids = documents.column("doc_id").to_pylist()
    index = CitationIndex.build(doc_ids, documents.column("title").to_pylist(), documents.column("metadata").to_pylist())
    spans = NodeSpans(nodes)
    weights: dict[tuple[str, str], float] = {}
    styles: Counter = Counter()
    for doc_id, text in zip(doc_ids, documents.column("text").to_pylist(), strict=True):
        for citation in find_citations(text or "", index, doc_id):
            src, dst = spans.containing(doc_id, citation.start, citation.end), spans.first(citation.doc_id)
            if src and dst:
                weights[(src, dst)] = 1.0
                styles[citation.style] += 1
    return weights, styles


def llm_citation_weights(client: LLMClient, nodes: pa.Table, documents: pa.Table, budget: FailureBudget) -> dict[tuple[str, str], float]:
    """Node -> cited first node pairs found by the LLM detector, one prompt per node; a node whose
    answer is unreadable counts against ``budget``."""
    index = CitationIndex.build(*(documents.column(c).to_pylist() for c in ("doc_id", "title", "metadata")))
    spans = NodeSpans(nodes)
    weights: dict[tuple[str, str], float] = {}
    rows = zip(*(nodes.column(c).to_pylist() for c in ("node_id", "doc_id", "text")), strict=True)
    for node_id, doc_id, text in rows:
        try:
            cited_documents = llm_citations(client, text, index, doc_id)
        except LLMOutputError as error:
            budget.failed(node_id, error)
            continue
        for cited in cited_documents:
            if (first := spans.first(cited)) is not None:
                weights[(node_id, first)] = 1.0
    budget.check()
    return weights


class CitationConfig(Config):
    detector: Literal["regex", "llm"] = "regex"  # llm: needs GRAPHLAKE_LLM_BASE_URL; answers cached in the lake


@asset(partitions_def=corpus_partitions, metadata=_edge_metadata("citation"))
def citation_edges(context: AssetExecutionContext, config: CitationConfig, lake: LakeResource, nodes: pa.Table, documents: pa.Table) -> pa.Table:
    """Citations as node -> cited document edges, found by regex (author-year, numbered, quoted or long
    exact titles) or, as an option, by an LLM reading each node."""
    started = time.perf_counter()
    if config.detector == "llm":
        client = lake_client(lake.home)
        budget = FailureBudget(f"LLM answers for citation_edges (corpus {context.partition_key!r})", nodes.num_rows)
        weights = llm_citation_weights(client, nodes, documents, budget)
        table = edge_table(weights, "citation", dict.fromkeys(weights, f"llm:{client.config.model}"))
        extra = client.stats.as_metadata() | budget.check()
    else:
        weights, styles = citation_weights(nodes, documents)
        table = edge_table(weights, "citation", dict.fromkeys(weights, "regex"))
        extra = {"citations_by_style": MetadataValue.json(dict(styles))}
    context.add_output_metadata({**graph_metadata(table, nodes.column("node_id").to_pylist(), started), "detector": config.detector, **extra})
    return table


def foreign_key_weights(foreign_keys: pa.Table, spans: NodeSpans) -> Counter:
    """Declared keys per (referencing table's first node, referenced table's first node)."""
    pairs = zip(foreign_keys.column("src_doc_id").to_pylist(), foreign_keys.column("dst_doc_id").to_pylist(), strict=True)
    weights = Counter((spans.first(src), spans.first(dst)) for src, dst in pairs)
    return Counter({pair: n for pair, n in weights.items() if None not in pair})


def link_weights(documents: pa.Table, spans: NodeSpans) -> Counter:
    """Hyperlinks per (linking file's first node, linked file's first node); doc ids are relative paths."""
    doc_ids = documents.column("doc_id").to_pylist()
    paths = {doc_id: doc_id for doc_id in doc_ids}
    weights: Counter = Counter()
    for doc_id, text in zip(doc_ids, documents.column("text").to_pylist(), strict=True):
        for link in find_links(text or "", doc_id, paths):
            weights[(spans.first(doc_id), spans.first(link.doc_id))] += 1
    return Counter({pair: n for pair, n in weights.items() if None not in pair})


@asset(partitions_def=corpus_partitions, metadata=_edge_metadata("structural"))
def structural_edges(context: AssetExecutionContext, lake: LakeResource, foreign_keys: pa.Table, nodes: pa.Table, documents: pa.Table) -> pa.Table:
    """Foreign keys (referencing -> referenced table) and, for ``files`` corpora, links between files."""
    started = time.perf_counter()
    spans = NodeSpans(nodes)
    keys = foreign_key_weights(foreign_keys, spans)
    links = link_weights(documents, spans) if lake.registry.get(context.partition_key).format == "files" else Counter()
    sources = dict.fromkeys(keys, "foreign_key") | dict.fromkeys(links, "link")
    table = edge_table(keys | links, "structural", sources)
    context.add_output_metadata(
        {
            **graph_metadata(table, nodes.column("node_id").to_pylist(), started),
            "foreign_key_declarations": foreign_keys.num_rows,
            "foreign_key_declarations_covered": sum(keys.values()),
            "foreign_key_edges": len(keys),
            "foreign_key_self_references": sum(1 for src, dst in keys if src == dst),
            "links": sum(links.values()),
            "link_edges": len(links),
        }
    )
    return table


class SemanticConfig(Config):
    k: int = 10
    exact_up_to: int = EXACT_UP_TO


def nearest_neighbours(matrix: np.ndarray, k: int, exact_up_to: int = EXACT_UP_TO) -> tuple[np.ndarray, np.ndarray]:
    """Top-k cosine neighbours of every row among the other rows: (row indices, cosines), best first,
    ties by lower row, −1 and 0 past the last found.

    Exact up to ``exact_up_to`` rows, a block of rows at a time so memory stays bounded; above, from a
    faiss HNSW graph, because the exact scores grow as n² (293 CPU-s at 94,874 nodes).
    """
    unit = _unit_rows(matrix)
    n, k = len(unit), max(0, min(k, len(unit) - 1))
    if k == 0:
        return np.zeros((n, 0), np.int64), np.zeros((n, 0), np.float32)
    if n <= exact_up_to:
        return _exact_neighbours(unit, k)
    from graphlake.kernels.hybrid.candidates import dense_candidates  # numba: loaded by a large corpus's build only

    found = dense_candidates(unit, k).astype(np.int64)
    scores = np.zeros(found.shape, np.float32)
    for column in range(k):  # one neighbour column at a time: n × dim floats, not n × k × dim
        hit = found[:, column] >= 0
        scores[hit, column] = np.einsum("ij,ij->i", unit[hit], unit[found[hit, column]])
    order = np.lexsort((np.where(found >= 0, found, n), -np.where(found >= 0, scores, -np.inf)), axis=1)
    return np.take_along_axis(found, order, axis=1), np.take_along_axis(scores, order, axis=1)


def neighbour_recall(matrix: np.ndarray, found: np.ndarray, seed: int = 0) -> float:
    """Recall of the k-NN lists ``found`` against the exact ones, on ``RECALL_SAMPLE`` seeded rows."""
    unit = _unit_rows(matrix)
    rows = np.sort(np.random.default_rng(seed).choice(len(unit), min(RECALL_SAMPLE, len(unit)), replace=False))
    exact, _ = _exact_neighbours(unit, found.shape[1], rows)
    return round(float(np.mean([len(set(e.tolist()) & set(f[f >= 0].tolist())) / len(e) for e, f in zip(exact, found[rows], strict=True)])), 4)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def _exact_neighbours(unit: np.ndarray, k: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of ``rows`` (default: every row) against every other row."""
    rows = np.arange(len(unit)) if rows is None else rows
    indices, scores = np.zeros((len(rows), k), np.int64), np.zeros((len(rows), k), np.float32)
    block = max(1, SCORE_BLOCK // len(unit))
    for start in range(0, len(rows), block):
        chunk = rows[start : start + block]
        sims = unit[chunk] @ unit.T
        sims[np.arange(len(chunk)), chunk] = -np.inf  # never one's own neighbour
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        top_sims = np.take_along_axis(sims, top, axis=1)
        order = np.lexsort((top, -top_sims), axis=1)
        indices[start : start + block] = np.take_along_axis(top, order, axis=1)
        scores[start : start + block] = np.take_along_axis(top_sims, order, axis=1)
    return indices, scores


@asset(partitions_def=corpus_partitions, metadata=_edge_metadata("semantic"))
def semantic_edges(context: AssetExecutionContext, config: SemanticConfig, dense_vectors: pa.Table) -> pa.Table:
    """Each node to its k nearest other nodes by cosine of their dense vectors (the corpus's dense model's):
    exact on small corpora, from an HNSW graph above ``exact_up_to`` nodes (its recall against exact recorded)."""
    started = time.perf_counter()
    node_ids = dense_vectors.column("node_id").to_pylist()
    model = dense_vectors.column("model")[0].as_py() if dense_vectors.num_rows else "none"
    matrix = dense_matrix(dense_vectors, 0)  # no rows, no neighbours: an empty corpus's width does not matter
    neighbours, cosines = nearest_neighbours(matrix, config.k, config.exact_up_to)
    exact = len(node_ids) <= config.exact_up_to
    weights = {(node_ids[row], node_ids[col]): float(cos) for row in range(len(node_ids)) for col, cos in zip(neighbours[row], cosines[row], strict=True) if col >= 0}
    table = edge_table(weights, "semantic", dict.fromkeys(weights, model))
    recall = {} if exact or not len(node_ids) else {"knn_recall": neighbour_recall(matrix, neighbours)}
    context.add_output_metadata({**graph_metadata(table, node_ids, started), "k": config.k, "model": model, "knn": "exact" if exact else "hnsw", **recall})
    return table
