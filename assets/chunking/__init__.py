"""Stage 2, chunking: documents -> nodes, the retrieval units.

The group is this package's name, given where it is loaded (``pipelines/definitions.py``)."""
