"""Stored learned models: how each is loaded and what it holds at query time. Their fitting is in
``retrieval/training/``, where each learned index kind is declared."""
