"""Stage 7, the learned parts of the methods, one module a paper: what each trains on its training
corpus and stores for the methods that read it (``retrieval/learned_kinds.py`` declares them).

The group is this package's name, given where it is loaded (``pipelines/definitions.py``)."""
