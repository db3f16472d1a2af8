"""The project's operators; importing this package registers them (``retrieval.methods.register``)."""

from graphlake.retrieval.operators import grasp, hybrid, learned, propagation, rerank, vector  # noqa: F401
