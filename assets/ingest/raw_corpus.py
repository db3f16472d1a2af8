"""Stage 1, ingest: one read of a corpus's raw files yields its documents, queries, gold and keys."""

from collections import Counter

import pyarrow as pa
from dagster import AssetExecutionContext, AssetOut, MetadataValue, Output, multi_asset

from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.write_log import record_folded

RAW_TABLES = {
    "documents": "Raw documents (passages, abstracts, files, or serialised table schemas).",
    "queries": "Queries with their split.",
    "qrels": "Gold: query -> relevant document, following each dataset's own definition.",
    "foreign_keys": "Foreign keys between table documents (Spider/BIRD/demo schemas).",
}  # each one a field of warehouse/readers' Ingested


@multi_asset(
    outs={name: AssetOut(metadata={"table": name}, description=description) for name, description in RAW_TABLES.items()},
    partitions_def=corpus_partitions,
)
def raw_corpus(context: AssetExecutionContext, lake: LakeResource):
    """Read the corpus named by the partition as its registry entry says; nothing is written on error."""
    spec = lake.registry.get(context.partition_key)
    ingested = spec.read()
    for note in ingested.notes:
        context.log.warning(f"{spec.name}: {note}")
    source = {"format": spec.format, "source": MetadataValue.path(spec.path)}
    notes = {"note": "\n".join(ingested.notes)} if ingested.notes else {}  # what was split or skipped, printed by the command that read it
    yield Output(ingested.documents, "documents", metadata={**source, "notes": MetadataValue.json(ingested.notes), **notes})
    yield Output(ingested.queries, "queries", metadata={**source, "by_split": MetadataValue.json(_by_split(ingested.queries))})
    yield Output(ingested.qrels, "qrels", metadata={**source, "by_split": MetadataValue.json(_by_split(ingested.qrels))})
    yield Output(ingested.foreign_keys, "foreign_keys", metadata=source)
    if ingested.log_through is not None:  # a lake-owned corpus: the writes folded, committed with these tables
        record_folded(lake.storage, spec.name, ingested.log_through)


def _by_split(table: pa.Table) -> dict[str, int]:
    return dict(sorted(Counter(str(split) for split in table.column("split").to_pylist()).items()))
