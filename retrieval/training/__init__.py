"""The fitting of the learned indexes: GraphER's rankers, Allan-Poe's path weights, GRASP's fusion and
reranker, graphlake's learned fusion, the lake's cross-encoder, the tuned dense encoder. Builds import
it (the assets); a query never does: the kinds are declared in ``retrieval/learned_kinds.py``."""
