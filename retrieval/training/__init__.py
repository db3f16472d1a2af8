"""The fitting of the learned indexes: GraphER's rankers, Allan-Poe's path weights, GRASP's fusion and
reranker, graphlake's learned fusion, the lake's cross-encoder. Each module declares its index kind
with its fitting; importing this package declares them all."""

from graphlake.retrieval.training import grapher, grasp_fusion, grasp_reranker, hybrid_weights, learned_fusion, reranker  # noqa: F401
