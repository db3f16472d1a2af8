"""The ``graphlake`` command line, one module a command group: ``lake`` (the demo, ingest, upkeep),
``build`` (materialize, the schedule, the UI), ``search`` (query, serve, methods, models), ``evaluate``
(eval, compare, trec) and ``data`` (sql, export); ``app`` holds what they share.

It starts at once: Dagster, the models and the retrieval kernels are imported by the commands that
use them, so ``--help``, ``sql``, ``corpora`` and ``trec`` load none of them, and ``query`` only what
its method reads.
"""

from graphlake.cli import lake, build, search, evaluate, data  # noqa: F401  isort:skip  (each registers its commands; --help lists them in this order)
from graphlake.cli.app import app

__all__ = ["app"]
