"""The project's operators; importing this package registers them (``retrieval.methods.register``)."""

from graphlake.retrieval.operators import core, graph, grasp, hybrid, rerank  # noqa: F401
