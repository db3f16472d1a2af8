"""A learned index kind's asset, made from its declaration (``retrieval/learned_kinds.py``): named as the
kind, depending on the tables it learns from and on what its ``Fitting`` reads on the training corpus
(for the lake's declared methods), and running the fitting the kind's module gives, whose summary
becomes the materialization's metadata."""

from collections.abc import Callable
from typing import Any

from dagster import AssetExecutionContext, AssetKey, AssetsDefinition, Config, asset

from graphlake.retrieval.learned_kinds import INDEX_KINDS
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.storage import LakeStorage

Fit = Callable[[AssetExecutionContext, Any, LakeStorage], dict]


def learned_asset(kind: str, settings: type[Config] | None, fit: Fit, tables: tuple[str, ...], also: tuple[str, ...] = (), per_corpus: bool = True) -> AssetsDefinition:
    """The asset of the learned kind ``kind``: ``fit(context, config, storage)`` with its run config of
    class ``settings`` (None: it takes none); ``tables`` and ``also`` (other assets) beside what the fitting
    reads; one partition per corpus unless the kind is lake-wide."""
    fitting = INDEX_KINDS[kind].fitting
    reads = INDEX_KINDS.index_assets(fitting.reads(load_methods()))
    if settings is None:

        def compute(context: AssetExecutionContext, lake: LakeResource) -> None:
            context.add_output_metadata(fit(context, None, lake.storage))

    else:

        def compute(context: AssetExecutionContext, config: Config, lake: LakeResource) -> None:
            context.add_output_metadata(fit(context, config, lake.storage))

        compute.__annotations__["config"] = settings  # what Dagster reads the run config's schema from
    compute.__doc__ = fit.__doc__
    return asset(name=kind, partitions_def=corpus_partitions if per_corpus else None, deps=[AssetKey(name) for name in (*tables, *also, *reads)])(compute)
