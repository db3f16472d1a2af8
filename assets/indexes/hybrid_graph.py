"""Allan-Poe's hybrid graph index as an asset: one graph over the corpus's dense, SPLADE and BM25
vectors that every ``hybrid_graph`` method searches with its own weights (``kernels/hybrid/graph_index.py``).
A re-materialization updates the previous index in place of a rebuild when few nodes changed
(``kernels/hybrid/update.py``): nodes are matched by node id and content hash. The knowledge-graph
part (``kg``: the entities and relations of a ``triples`` extractor, ``kernels/hybrid/kg.py``) is small
and rebuilt every time."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from dagster import AssetExecutionContext, AssetKey, Config, asset

from graphlake.kernels.hybrid.kg import KnowledgeGraph
from graphlake.kernels.hybrid.vectors import PATHS, Queries
from graphlake.retrieval.index.derived import hybrid_vectors
from graphlake.retrieval.index.kinds import read_models, write_index
from graphlake.retrieval.learned_kinds import INDEX_KINDS, open_index_set
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.warehouse.corpora import LAKE_OWNED
from graphlake.warehouse.digest import content_hash
from graphlake.warehouse.encoder_specs import made_before_identities, same_weights
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.storage import StorageError

if TYPE_CHECKING:
    from graphlake.kernels.hybrid.graph_index import HybridGraph


REBUILD_SHARE = 0.2  # a corpus read from its source: few changed nodes are inserted in place
KEYS_FILE = "node_keys.json"  # node id and content hash per row: what an update matches on


class HybridIndexConfig(Config):
    knn_k: int = 64  # k-NN graph degree before pruning (the authors' code)
    degree: int = 32  # semantic edges per node, fixed
    keyword_degree: int = 8  # recycled keyword edges kept per node (the code's 8 slots)
    layout: Literal["paper", "code"] = "code"  # code's: higher recall on SciFact for every weighting
    entry: Literal["largest_norm", "smallest_norm"] = "largest_norm"
    entry_points: int = 32
    device: Literal["cpu", "numpy", "cuda"] = "cpu"  # cpu: numba; cuda: cupy (the gpu extra); numpy: the cupy code on the CPU
    knn: Literal["auto", "exact", "candidates", "nndescent"] = "auto"  # auto: exact up to EXACT_KNN_UP_TO nodes (on a CUDA device always), candidates above
    nndescent_iterations: int = 25
    nndescent_samples: int = 16  # neighbours sampled per node and kind (new, old), with as many reverse ones
    seed: int = 0
    pruning: Literal["rng_ip", "rng", "ip"] = "rng_ip"  # Algorithm 1; rng / ip: the §5.6 ablations
    # above this share of changed nodes (inserted + removed, over the nodes), a full rebuild; unset: 0.2, and
    # 0 for a corpus the lake owns, whose every fold then ranks as a lake built from its documents from scratch
    rebuild_share: float | None = None
    kg: Literal["none", "spacy", "llm", "evidence"] = "spacy"  # the triples the KG part is built from (evidence: the oracle)


@asset(
    partitions_def=corpus_partitions,
    deps=[AssetKey(name) for name in (*INDEX_KINDS.index_assets({"dense", "splade", "bm25"}), "triples_spacy", "triples_llm", "triples_evidence")],
)
def hybrid_graph_index(context: AssetExecutionContext, config: HybridIndexConfig, lake: LakeResource) -> None:
    """The hybrid graph (semantic and keyword edges, entry points, per-path calibration), as an artefact folder."""
    from graphlake.kernels.hybrid.graph_index import BuildConfig  # numba: loaded when the index is built, not with the Definitions
    from graphlake.kernels.hybrid.update import update

    indexes = open_index_set(lake.storage, context.partition_key)
    vectors = hybrid_vectors(indexes)
    texts = indexes.snapshot.texts()
    nodes = Queries(vectors.dense, vectors.sparse, indexes.bm25.token_counts(texts))
    keys = [f"{node_id}\t{content_hash(text)}" for node_id, text in zip(indexes.snapshot.node_ids, texts, strict=True)]
    previous, previous_keys = _previous(indexes)
    settings = config.model_dump()
    rebuild_share, extractor = settings.pop("rebuild_share"), settings.pop("kg")
    if rebuild_share is None:
        rebuild_share = 0.0 if indexes.snapshot.spec.format == LAKE_OWNED else REBUILD_SHARE
    graph, report = update(previous, previous_keys, keys, vectors, nodes, BuildConfig(**settings), rebuild_share)
    graph.kg = None if extractor == "none" else _knowledge_graph(indexes, extractor)  # small: rebuilt every time

    def fill(folder: Path) -> None:
        graph.save(folder)
        (folder / KEYS_FILE).write_text(json.dumps(keys), encoding="utf-8")

    write_index(lake.storage, "hybrid_graph", context.partition_key, indexes.snapshot.node_ids, fill, {role: indexes.snapshot.models.identity(role) for role in ("dense", "sparse")})
    keyword = (graph.keyword >= 0).sum(axis=1)
    context.add_output_metadata(
        {
            "nodes": len(vectors),
            **report,
            **({f"{step}_seconds": value for step, value in graph.build["seconds"].items()} if report["mode"] in ("build", "rebuild") else {}),
            **{f"{kind}_edge_bytes": size for kind, size in graph.edge_bytes().items()},
            "keyword_degree_mean": round(float(keyword.mean()), 2) if len(keyword) else 0.0,
            "keyword_degree_max": int(keyword.max()) if len(keyword) else 0,
            **{f"scale_{path}": round(float(scale), 6) for path, scale in zip(PATHS, graph.scales, strict=True)},
            **({"knn_recall": graph.build["knn"]["knn_recall"]} if "knn_recall" in graph.build.get("knn", {}) and report["mode"] != "incremental" else {}),
            **(_kg_metadata(graph.kg) if graph.kg is not None else {"kg": "none"}),
        }
    )


def _knowledge_graph(indexes: LakeIndexSet, extractor: str) -> KnowledgeGraph:
    """The KG of the corpus's ``triples`` from ``extractor``, on the index's node rows."""
    try:
        triples = indexes.lake.read("triples", {"corpus": indexes.corpus, "extractor": extractor})
    except StorageError as error:
        raise StorageError(f"hybrid_graph_index has kg: {extractor}, but {error}; materialize triples_{extractor} first, or set kg: none") from error
    rows = indexes.snapshot.node_rows(triples.column("node_id").to_pylist(), f"triples ({extractor})")
    columns = (triples.column(c).to_pylist() for c in ("subject", "relation", "object"))
    return KnowledgeGraph.from_triples(extractor, zip(rows.tolist(), *columns, strict=True), len(indexes.snapshot.node_ids))


def _kg_metadata(kg: KnowledgeGraph) -> dict:
    held = np.diff(kg.node_entities.indptr)
    return {
        "kg": kg.extractor,
        "kg_entities": len(kg.entities),
        "kg_relations": len(kg.source),
        "kg_nodes_with_entities": int((held > 0).sum()),
        "kg_entities_per_node_mean": round(float(held.mean()), 2) if len(held) else 0.0,
    }


def _previous(indexes: LakeIndexSet) -> tuple["HybridGraph | None", list[str] | None]:
    """The corpus's current index and its node keys (``None`` for keys an older artefact lacks); none
    when it holds other models' vectors than the corpus's now."""
    try:
        folder = indexes.lake.artifact("hybrid_graph", {"corpus": indexes.corpus})
    except StorageError:
        return None, None
    made_by = read_models(folder)
    if not all(same_weights(made_by.get(role, made_before_identities(role)), indexes.snapshot.models.identity(role)) for role in ("dense", "sparse")):
        return None, None
    from graphlake.kernels.hybrid.graph_index import HybridGraph

    keys = folder / KEYS_FILE
    return HybridGraph.load(folder), json.loads(keys.read_text(encoding="utf-8")) if keys.is_file() else None
