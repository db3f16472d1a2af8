"""Retrieval: methods as operator trees, the index kinds and one corpus's loaded indexes, learned models
and their fitting, the run loop, evaluation and reports.

Storage-aware but orchestration-free: Dagster assets (``assets/``) and the command line call it. Its
layers, each importing only those below: ``runs``/``reports`` > ``training`` > ``evaluation`` >
``methods`` > ``learned_kinds`` > ``operators`` > ``models`` > ``index`` > ``core``/``queries``
(``docs/architecture.md``).
"""
