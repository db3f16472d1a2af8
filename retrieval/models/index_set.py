"""The lake's index set: the index layer's (``retrieval/index/index_set.py``) with typed handles on the
kinds declared above it too, the entity graph's edges and the models the lake trains or tunes, so an
operator's ``indexes.graph_rankers`` is a call a reader and a type checker can follow. What
``retrieval/learned_kinds.py``'s ``open_index_set`` opens and what operators are typed against."""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphlake.retrieval.index.index_set import Handle, IndexSet

if TYPE_CHECKING:
    from graphlake.kernels.rerank.cross_encoder import CrossEncoder
    from graphlake.retrieval.index.derived import EntityEdges
    from graphlake.retrieval.models.grapher import TunedRankers
    from graphlake.retrieval.models.grasp_fusion import TunedFusion
    from graphlake.retrieval.models.grasp_reranker import TunedReranker
    from graphlake.retrieval.models.hybrid_weights import TunedWeights
    from graphlake.retrieval.models.learned_fusion import LearnedRankers
    from graphlake.retrieval.models.untrained import Untrained


class LakeIndexSet(IndexSet):
    """An index set with every declared kind's handle."""

    cooccurrence: Handle[EntityEdges] = Handle()
    reranker: Handle[CrossEncoder | Untrained] = Handle()
    graph_rankers: Handle[TunedRankers] = Handle()
    grasp_fusion: Handle[TunedFusion] = Handle()
    grasp_reranker: Handle[TunedReranker] = Handle()
    hybrid_weights: Handle[TunedWeights] = Handle()
    learned_fusion: Handle[LearnedRankers] = Handle()
