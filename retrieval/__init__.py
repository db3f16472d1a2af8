"""Retrieval: operators and methods, the index registry, the per-query run loop, evaluation and freshness.

Storage-aware but orchestration-free: Dagster assets (``assets/``) and the command line call it.
"""
