"""Stage 3, enrichment: what offline extractors find in the nodes (entities and mentions, spaCy's triples) and the oracle evidence triples.

The group is this package's name, given where it is loaded (``pipelines/definitions.py``)."""
