"""Stage 4, graphs: the corpus's edge kinds (contextual, cooccurrence, conceptual, citation, structural,
semantic, logical) and GRASP's knowledge bases.

The group is this package's name, given where it is loaded (``pipelines/definitions.py``)."""
