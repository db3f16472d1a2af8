"""Stage 1, ingest: a corpus's raw files read into the documents, queries, qrels and foreign-key tables.

The group is this package's name, given where it is loaded (``pipelines/definitions.py``)."""
