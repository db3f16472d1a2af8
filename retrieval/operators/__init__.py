"""The project's operators; importing this package registers them (``retrieval.methods.register``)."""

from graphlake.retrieval.operators import graph, grasp, hybrid, learned, rerank, vector  # noqa: F401
