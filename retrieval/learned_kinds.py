"""The learned index kinds, declared apart from their fitting: what loads each (``retrieval/models``), the
corpora it learns from and the kinds its fitting reads there. A query imports this module; only a
build imports the fitting itself (``retrieval/training``), whose assets read these declarations.

Each ``*_reads`` says which index kinds a kind's fitting reads on its training corpus, for the
freshness planner and the assets' lineage; the ``learned_*`` / ``tuned_*`` finders name the declared
operators a kind trains a part for. ``INDEX_KINDS`` is every kind, stored and learned, in one table
made here explicitly, and ``open_index_set`` opens a snapshot's index set over it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphlake.retrieval.core import Methods, Op, needs, walk
from graphlake.retrieval.index.config import IndexConfig
from graphlake.retrieval.index.kinds import Fitting, IndexKind, IndexKinds, Stored, held_parts, learned_kind
from graphlake.retrieval.index.snapshot import Snapshot
from graphlake.retrieval.index.stored import STORED_KINDS
from graphlake.retrieval.models import grasp_fusion, learned_fusion
from graphlake.retrieval.models.grapher import DEFAULT_BASE, NETWORKS, TunedRankers
from graphlake.retrieval.models.grasp_reranker import TunedReranker, stage_key
from graphlake.retrieval.models.hybrid_weights import TunedWeights
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.models.reranker import load_reranker
from graphlake.retrieval.models.untrained import Untrained
from graphlake.retrieval.operators.propagation import GraphRerank
from graphlake.retrieval.queries import graph_ranker_sources, reranker_sources, training_corpora
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.storage import LakeStorage, StorageError

RERANKER_MINERS = ("bm25", "dense")  # the methods that mine the cross-encoder's hard negatives by default


def _inputs_read(ops: dict[str, Op]) -> frozenset[str]:
    """What the inputs of these operators read: what fitting them reads on the training corpus."""
    return frozenset(name for op in ops.values() for child in op.children() for name in needs(child))


def grapher_reads(methods: Methods, base: str = DEFAULT_BASE) -> frozenset[str]:
    """What GraphER's tuning reads on a training corpus: the base method's and the candidate graphs' kinds."""
    return frozenset(needs(GraphRerank(op="graph_rerank", inputs=[methods[base]], ranker="gcs", alpha=0.5)))


def grapher_parts(lake: LakeStorage, corpus: str) -> set[str]:
    """The networks the corpus's stored GraphER rankers hold."""
    try:
        folder = lake.artifact("graph_rankers", {"corpus": corpus})
    except StorageError:
        return set()
    return {name for name in NETWORKS if (folder / name).is_dir()}


def tuned_fusions(methods: Methods) -> dict[str, Op]:
    """Every ``plan_rrf`` with a tuned mode in the declared methods (inputs included), by its part's key."""
    found: dict[str, Op] = {}
    for method in methods.values():
        for op in walk(method):
            if op.op == "plan_rrf" and getattr(op, "mode", None) in grasp_fusion.TUNED_MODES:
                found.setdefault(grasp_fusion.key(op), op)
    return found


def grasp_fusion_reads(methods: Methods) -> frozenset[str]:
    """What GRASP's fusion tuning reads on the training corpus: what the tuned fusions' inputs read."""
    return _inputs_read(tuned_fusions(methods))


def grasp_rerankers(methods: Methods) -> dict[str, Op]:
    """The Stage-2 operators that a declared ``grasp_rerank`` reranks, by fingerprint."""
    found: dict[str, Op] = {}
    for method in methods.values():
        for op in walk(method):
            if op.op == "grasp_rerank":
                found.setdefault(stage_key(op.inputs[0]), op.inputs[0])
    return found


def grasp_reranker_reads(methods: Methods) -> frozenset[str]:
    """What mining reads on the training corpus: the Stage-2 inputs' kinds (the fusion's choice is the evaluated corpus's)."""
    return frozenset(name for name in _inputs_read(grasp_rerankers(methods)) if not name.startswith("grasp_fusion"))


def hybrid_weights_reads(methods: Methods) -> frozenset[str]:
    """What Allan-Poe's weight tuning reads on the training corpus: its vectors and BM25, and its hybrid
    graph (the KG) when a method tunes the KG reward's weight there."""
    tunes_kg = any(getattr(op, "kg", None) and getattr(op, "kg_weight", None) == "tuned" for method in methods.values() for op in walk(method))
    return frozenset({"dense", "splade", "bm25", *(("hybrid_graph",) if tunes_kg else ())})


def learned_fusions(methods: Methods) -> dict[str, Op]:
    """Every ``learned_fusion`` in the switched-on methods (inputs included), by its part's key."""
    return {learned_fusion.key(op): op for method in methods.values() for op in walk(method) if op.op == "learned_fusion"}


def learned_fusion_reads(methods: Methods) -> frozenset[str]:
    """What the learned fusion's training reads on the training corpus: what the fusions' inputs and
    their partner signals read."""
    fusions = learned_fusions(methods)
    return _inputs_read(fusions).union(*(op.partner_reads() for op in fusions.values()))


def reranker_reads(methods: Methods, miners: tuple[str, ...] = RERANKER_MINERS) -> frozenset[str]:
    """What the cross-encoder's mining reads on a training corpus: its miners' kinds (and dense, which picks positives)."""
    return frozenset({"dense"}.union(*(needs(methods[m]) for m in miners)))


def lake_reranker(indexes: LakeIndexSet) -> Any:
    """The lake's cross-encoder; where it was never trained (a method switched on after the last build,
    read by the API before any ``materialize``), its ``Untrained`` marker, so the reranking methods
    answer with their first stage and say why instead of failing."""
    try:
        folder = indexes.lake.artifact("reranker", {})
    except StorageError:
        return Untrained(f"the lake has not trained one yet (`graphlake materialize --corpus {indexes.corpus} --select key:reranker` trains it)")
    return load_reranker(folder)


def _every_corpus_with_train_queries(home: Path, corpus: str) -> list[str]:
    return reranker_sources(home)


LEARNED_KINDS: tuple[IndexKind, ...] = (
    learned_kind("graph_rankers", TunedRankers, Fitting(graph_ranker_sources, grapher_reads, grapher_parts, lambda parts: {"networks": sorted(parts)})),
    learned_kind("grasp_fusion", grasp_fusion.TunedFusion, Fitting(training_corpora, grasp_fusion_reads, held_parts("grasp_fusion", grasp_fusion.TunedFusion))),
    learned_kind("grasp_reranker", TunedReranker, Fitting(training_corpora, grasp_reranker_reads)),
    learned_kind("hybrid_weights", TunedWeights, Fitting(training_corpora, hybrid_weights_reads)),
    learned_kind("learned_fusion", learned_fusion.LearnedRankers, Fitting(training_corpora, learned_fusion_reads, held_parts("learned_fusion", learned_fusion.LearnedRankers))),
    IndexKind("reranker", ("reranker",), Stored(artifact="reranker", lake_wide=True), lake_reranker, Fitting(_every_corpus_with_train_queries, reranker_reads)),
)
INDEX_KINDS = IndexKinds(*STORED_KINDS, *LEARNED_KINDS)  # every kind, the one table the lake's indexes load through


def open_index_set(lake: LakeStorage, corpus: str, reuse_pairs: bool = False, registry: CorpusRegistry | None = None, config: IndexConfig | None = None) -> LakeIndexSet:
    """The index set of ``corpus``'s snapshot as ``lake`` reads it, loading through every declared kind;
    ``config``: the lake's, as the caller resolved it once (else resolved from the settings here)."""
    return LakeIndexSet(Snapshot(lake, corpus, config or IndexConfig.resolve(), registry), INDEX_KINDS, reuse_pairs)
