"""Dagster glue: assets hand Arrow tables to this IO manager, which stores them in the lake.

An asset's table is its name unless its definition metadata says ``table``; tables partitioned by
more than the corpus (edges by ``kind``) get the other values from ``partition`` in that metadata.
So every edge-kind asset writes its own partition of the one ``edges`` table.

Both the IO manager and the resource hand out a lake bound to the Dagster run they serve: a run
stages its versions and reads its own, and they become visible when the run commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from dagster import Config, ConfigurableIOManager, ConfigurableResource, InitResourceContext, InputContext, MetadataValue, OutputContext
from pydantic import PrivateAttr

from graphlake.common.priority import yield_to_searches
from graphlake.warehouse.corpora import CorpusRegistry, table_written_at
from graphlake.warehouse.encoder_specs import ROLE_MARK
from graphlake.warehouse.row_changes import row_changes
from graphlake.warehouse.storage import LakeStorage, conform
from graphlake.warehouse.tables import table_spec

PREVIEW_ROWS = 5
PREVIEW_CHARS = 80


class _RunBoundLake(Config):
    """The lake root, and the lake as the Dagster run being served sees it."""

    home: str
    _run_id: str | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._run_id = context.run.run_id if context.run else None
        yield_to_searches()  # a build, not a search: it takes the CPU the searches leave

    @property
    def storage(self) -> LakeStorage:
        return LakeStorage(Path(self.home), self._run_id)


class LakeResource(_RunBoundLake, ConfigurableResource):
    """The lake root, for assets that need the corpus registry or direct table access."""

    @property
    def registry(self) -> CorpusRegistry:
        return CorpusRegistry(Path(self.home))


class LakeIOManager(_RunBoundLake, ConfigurableIOManager):
    def handle_output(self, context: OutputContext, obj: pa.Table) -> None:
        table, partition = asset_address(Path(self.home), context.definition_metadata, context.partition_key)
        committed = LakeStorage(Path(self.home))  # the version readers see now, not this run's
        previous = committed.read(table, partition) if committed.has(table, partition) else None
        spec = table_spec(table)
        obj = conform(spec, partition, obj)  # as stored: with its partition columns
        path = self.storage.write(table, partition, obj)
        changes = row_changes(previous, obj, spec.key)
        context.add_output_metadata(
            {
                "table": table,
                "rows": obj.num_rows,
                **{f"rows_{change}": count for change, count in changes.items()},
                "path": MetadataValue.path(str(path)),
                "bytes": path.stat().st_size,
                "preview": MetadataValue.md(markdown_preview(obj)),
            }
        )

    def load_input(self, context: InputContext) -> pa.Table:
        upstream = context.upstream_output
        assert upstream is not None, "graphlake tables are always produced by assets"
        table, partition = asset_address(Path(self.home), upstream.definition_metadata, context.asset_partition_key)
        return self.storage.read(table, partition)


def output_written_at(lake: LakeStorage, metadata: Mapping, corpus: str) -> float | None:
    """When the asset's table output for the corpus was written, None if it has none or, for the
    vectors of a model role, if another revision of the model made them."""
    return table_written_at(lake, corpus, metadata["table"], {"corpus": corpus, **(metadata.get("partition") or {})})


def asset_address(home: Path, metadata: Mapping, corpus: str) -> tuple[str, dict[str, str]]:
    """The table and partition an asset writes for a corpus; a model role there (``{model: "@dense"}``)
    is the model the corpus uses for it."""
    table = metadata.get("table")
    if table is None:
        raise ValueError("graphlake assets declare their table in definition metadata ('table')")
    partition = {"corpus": corpus, **(metadata.get("partition") or {})}
    if any(value.startswith(ROLE_MARK) for value in partition.values()):
        partition = CorpusRegistry(home).resolved(corpus, partition)
    return table, partition


def markdown_preview(table: pa.Table) -> str:
    """The first rows as a markdown table, long cells shortened, for the Dagster UI."""
    rows = table.slice(0, PREVIEW_ROWS).to_pylist()
    names = table.column_names

    def cell(value: object) -> str:
        text = "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")
        return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"

    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += ["| " + " | ".join(cell(row[name]) for name in names) + " |" for row in rows]
    return "\n".join(lines)
