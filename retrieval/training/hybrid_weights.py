"""Allan-Poe's weight study (§5.7) as a learned index: the path weights that maximise nDCG@10 on the
training queries, for the ``hybrid_graph`` methods with ``weights: tuned_two`` / ``tuned_three``.

The training queries are those GraphER's rankers learn from (``training_source``: the corpus's
``train_corpus``, else its own ``train`` split), never the evaluated ones. Scores are exact fusion
over the training corpus's vectors under its own calibration, so the weights are in calibrated units
and carry over to another corpus. Two paths: ``α·dense + (1−α)·SPLADE`` over α ∈ {0, 0.1, …, 1}.
Three paths: ``α·[two-path optimum] + (1−α)·BM25`` over the same grid (the paper's
``α·[sim_d + w_opt·sim_s] + (1−α)·sim_f``). Ties go to the α nearest the paper's rule of thumb, which
sets the better single path's share from the nDCG gap between the two (below 5 %: 0.4–0.6; 5–10 %:
0.7–0.8; above: 0.9–1). A corpus with no training queries gets 1/1/1 as an ``Untrained`` marker.

The KG reward's weight (``kg_weight: tuned``) is chosen on the same queries over ``KG_GRID`` at equal
path weights (1/1/1, the ``*_kg`` methods' mix), with the training corpus's own hybrid graph's KG and
the operators' query-entity matching; ``None`` when that corpus's index has no KG.
"""

from __future__ import annotations

import numpy as np

from graphlake.kernels.eval.metrics import ndcg_at_k
from graphlake.kernels.hybrid.batched import top_rows
from graphlake.kernels.hybrid.vectors import HybridVectors, Queries
from graphlake.retrieval.index.derived import TITLE_ALIASES, hybrid_vectors
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.models.hybrid_weights import TunedWeights
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.models.untrained import Untrained
from graphlake.retrieval.queries import gold_by_query, training_source
from graphlake.warehouse.storage import LakeStorage, StorageError

GRID = tuple(round(0.1 * step, 1) for step in range(11))
KG_GRID = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)  # the spec's 0.05–2, and 0: the KG may not help
DEPTH = 100  # nodes ranked per query before documents are deduplicated
CHUNK_BYTES = 256 * 2**20  # the (3, queries, nodes) float32 path scores held at once


def rule_of_thumb(better: float, worse: float) -> tuple[float, float]:
    """The paper's range for the better path's share, from the relative nDCG gap of two paths."""
    gap = (better - worse) / better if better > 0 else 0.0
    return (0.4, 0.6) if gap < 0.05 else (0.7, 0.8) if gap <= 0.10 else (0.9, 1.0)


def tune(lake: LakeStorage, corpus: str) -> TunedWeights | Untrained:
    source, split = training_source(lake.home, corpus)
    gold = gold_by_query(lake.read("qrels", {"corpus": source}))
    rows = [q for q in lake.read("queries", {"corpus": source}).to_pylist() if (split is None or q["split"] == split) and q["query_id"] in gold]
    if not rows:
        where = f"corpus {source!r}" + (f" split {split!r}" if split else "")
        return Untrained(f"{where} has no queries with gold to tune the path weights on; 1/1/1 stands in")
    indexes = open_index_set(lake, source)
    vectors = hybrid_vectors(indexes)
    bm25 = indexes.bm25
    scales = vectors.calibration(Queries(vectors.dense, vectors.sparse, bm25.token_counts(indexes.snapshot.texts())))
    texts = [q["text"] for q in rows]
    queries = Queries(indexes.encoders.dense(texts), indexes.encoders.splade(texts), bm25.token_counts(texts))
    scorer = _Scorer(vectors, queries, scales, indexes.snapshot.doc_ids(), [gold[q["query_id"]] for q in rows])
    single = {path: scorer.ndcg(np.eye(3)[p]) for p, path in enumerate(("dense", "sparse", "lexical"))}
    two_grid = {alpha: scorer.ndcg(np.array([alpha, 1 - alpha, 0.0])) for alpha in GRID}
    dense_better = single["dense"] >= single["sparse"]
    low, high = rule_of_thumb(*sorted((single["dense"], single["sparse"]), reverse=True))
    two_rule = (low, high) if dense_better else (round(1 - high, 1), round(1 - low, 1))
    alpha_two = _best(two_grid, two_rule)
    inner = np.array([alpha_two, 1 - alpha_two, 0.0])
    three_grid = {alpha: scorer.ndcg(alpha * inner + np.array([0.0, 0.0, 1 - alpha])) for alpha in GRID}
    three_rule = rule_of_thumb(*sorted((two_grid[alpha_two], single["lexical"]), reverse=True))
    if two_grid[alpha_two] < single["lexical"]:
        three_rule = (round(1 - three_rule[1], 1), round(1 - three_rule[0], 1))
    alpha_three = _best(three_grid, three_rule)
    report = {
        "source": {"corpus": source, "split": split, "queries": len(rows)},
        "single_ndcg@10": single,
        "two": {"alpha": alpha_two, "rule": two_rule, "ndcg@10": two_grid},
        "three": {"alpha": alpha_three, "rule": three_rule, "ndcg@10": three_grid},
    }
    three = alpha_three * inner + np.array([0.0, 0.0, 1 - alpha_three])
    kg_weight, report["kg"] = _tune_kg(indexes, texts, scorer)
    return TunedWeights(tuple(float(w) for w in inner), tuple(round(float(w), 4) for w in three), report, kg_weight)


def _tune_kg(indexes: LakeIndexSet, texts: list[str], scorer: _Scorer) -> tuple[float | None, dict]:
    """The KG reward weight of the best nDCG@10 at 1/1/1 (ties: nearest the 0.5 default), and the grid."""
    from graphlake.kernels.hybrid.kg import HOPS, reward

    try:
        kg = indexes.hybrid_graph.graph.kg
    except StorageError as error:
        return None, {"note": f"no hybrid graph to read a KG from: {error}"}
    if kg is None:
        return None, {"note": "the training corpus's hybrid graph was built with kg: none"}
    seeds = kg.query_entities(texts, indexes.derived(TITLE_ALIASES))
    bonus = np.stack([kg.node_hops(kg.hops(found, HOPS)) if len(found) else np.full(kg.holders.shape[1], -1, np.int32) for found in seeds])
    grid = {weight: scorer.ndcg(np.ones(3), reward(bonus, weight).astype(np.float32)) for weight in KG_GRID}
    best = max(grid, key=lambda weight: (round(grid[weight], 10), -abs(weight - 0.5)))
    return best, {"extractor": kg.extractor, "queries_with_entities": int(sum(len(found) > 0 for found in seeds)), "ndcg@10": grid}


def _best(grid: dict[float, float], rule: tuple[float, float]) -> float:
    """The α of the highest nDCG; ties go to the α nearest the rule's range."""
    centre = sum(rule) / 2
    return max(grid, key=lambda alpha: (round(grid[alpha], 10), -abs(alpha - centre), -alpha))


class _Scorer:
    """nDCG@10 of any weighting by exact fusion, the path scores computed once per chunk of queries."""

    def __init__(self, vectors: HybridVectors, queries: Queries, scales: np.ndarray, doc_ids: np.ndarray, gold: list[dict[str, int]]) -> None:
        self.doc_ids, self.gold, self.scales = doc_ids, gold, scales
        chunk = max(1, CHUNK_BYTES // (12 * max(1, len(vectors))))
        self.chunks = [(start, vectors.path_scores(queries.take(np.arange(start, min(len(queries), start + chunk))))) for start in range(0, len(queries), chunk)]

    def ndcg(self, weights: np.ndarray, bonus: np.ndarray | None = None) -> float:
        """Mean nDCG@10 of ``weights`` (before calibration), plus a per-(query, node) ``bonus`` if given."""
        scaled = (np.asarray(weights) * self.scales).astype(np.float32)
        values = []
        for start, scores in self.chunks:
            fused = np.tensordot(scaled, scores, axes=1)
            if bonus is not None:
                fused += bonus[start : start + len(fused)]
            _, top = top_rows(np, fused, DEPTH)
            for i, ordered in enumerate(top):
                values.append(ndcg_at_k(list(dict.fromkeys(self.doc_ids[ordered].tolist())), self.gold[start + i], 10))
        return round(float(np.mean(values)), 6)
