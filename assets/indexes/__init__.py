"""Stage 6, indexes: BM25, dense HNSW and Allan-Poe's hybrid graph, each over the nodes in the ``nodes`` table's order.

The group is this package's name, given where it is loaded (``pipelines/definitions.py``)."""
