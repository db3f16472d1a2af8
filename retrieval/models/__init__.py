"""Stored learned models: how each is loaded and what it holds at query time. Each learned index kind is
declared in ``retrieval/learned_kinds.py``, its fitting is in ``retrieval/training/``."""
