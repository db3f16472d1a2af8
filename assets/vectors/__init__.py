"""Stage 5, vectors: the nodes' dense and learned-sparse vectors, and the SKB texts' dense vectors.

The group is this package's name, given where it is loaded (``pipelines/definitions.py``)."""
