"""Graph integrity checks: edges must join known nodes or entities, and entity df must match mentions.

Non-blocking: a graph with a few dangling ids is still usable, and retrieval should not stall on it;
the checks make the damage visible per kind in the UI.
"""

import warnings
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from dagster import AssetCheckExecutionContext, AssetCheckResult, AssetChecksDefinition, AssetKey, AssetsDefinition, PreviewWarning, asset_check

from graphlake.common.scratch_sql import scratch_cursor
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.storage import LakeStorage
from graphlake.warehouse.tables import table_spec

EXAMPLES = 3


def edge_problems(edges: pa.Table, nodes: pa.Table, entities: pa.Table) -> AssetCheckResult:
    """Fail on endpoints that are neither a node nor an entity, and on repeated (src, dst, kind)."""
    with scratch_cursor() as con:
        con.register("e", edges.select(["src", "dst", "kind"]))
        con.register("known", pa.table({"id": pa.concat_arrays([_ids(nodes, "node_id"), _ids(entities, "entity_id")])}))
        rows = con.execute(
            """
            WITH flagged AS (
                SELECT e.kind, e.src, e.dst,
                       e.src NOT IN (SELECT id FROM known) AS bad_src,
                       e.dst NOT IN (SELECT id FROM known) AS bad_dst
                FROM e
            ), dups AS (SELECT kind, count(*) - 1 AS extra FROM e GROUP BY src, dst, kind HAVING count(*) > 1)
            SELECT f.kind, count(*) AS edges, count(*) FILTER (WHERE bad_src OR bad_dst) AS dangling,
                   coalesce((SELECT sum(extra) FROM dups d WHERE d.kind = f.kind), 0)::BIGINT AS duplicates,
                   list_sort(list(DISTINCT CASE WHEN bad_src THEN src ELSE dst END) FILTER (WHERE bad_src OR bad_dst)) AS examples
            FROM flagged f GROUP BY f.kind ORDER BY f.kind
            """
        ).fetchall()
    by_kind = {kind: {"edges": n, "dangling": bad, "duplicates": dup} for kind, n, bad, dup, _ in rows}
    return AssetCheckResult(
        passed=all(c["dangling"] == 0 and c["duplicates"] == 0 for c in by_kind.values()),
        metadata={
            "dangling_edges": sum(c["dangling"] for c in by_kind.values()),
            "duplicate_edges": sum(c["duplicates"] for c in by_kind.values()),
            "by_kind": by_kind,
            "dangling_examples": {kind: examples[:EXAMPLES] for kind, *_, examples in rows if examples},
        },
    )


def df_problems(mentions: pa.Table, entities: pa.Table) -> AssetCheckResult:
    """Fail where an entity's df differs from its number of distinct mentioning nodes, or a mention names no entity."""
    with scratch_cursor() as con:
        con.register("m", mentions.select(["extractor", "node_id", "entity_id"]))
        con.register("en", entities.select(["extractor", "entity_id", "df"]))
        wrong_df, unknown = con.execute(
            """
            WITH counted AS (SELECT extractor, entity_id, count(DISTINCT node_id) AS nodes FROM m GROUP BY ALL)
            SELECT
                (SELECT list(en.entity_id || ': df ' || en.df || ' vs ' || coalesce(c.nodes, 0) ORDER BY en.entity_id)
                 FROM en LEFT JOIN counted c USING (extractor, entity_id)
                 WHERE en.df IS DISTINCT FROM coalesce(c.nodes, 0)),
                (SELECT list(DISTINCT c.entity_id ORDER BY c.entity_id) FROM counted c ANTI JOIN en USING (extractor, entity_id))
            """
        ).fetchone()
    wrong_df, unknown = wrong_df or [], unknown or []
    return AssetCheckResult(
        passed=not wrong_df and not unknown,
        metadata={
            "entities": entities.num_rows,
            "wrong_df": len(wrong_df),
            "unknown_entities": len(unknown),
            "examples": str(wrong_df[:EXAMPLES] + unknown[:EXAMPLES]),
        },
    )


def _ids(table: pa.Table, column: str) -> pa.Array:
    return table.column(column).combine_chunks().cast(pa.string())


def _entities(lake: LakeStorage, corpus: str) -> pa.Table:
    """Entities of every extractor of a corpus (one partition each), empty if none was extracted."""
    schema = table_spec("entities").schema
    parts = [lake.read("entities", partition) for partition in lake.partitions("entities", {"corpus": corpus})]
    return pa.concat_tables([p.select(schema.names) for p in parts]) if parts else schema.empty_table()


def _partitioned_check(**kwargs) -> Callable[[Callable], AssetChecksDefinition]:
    """A non-blocking check per corpus; partitioned checks are a Dagster preview feature, its warning is noise."""

    def decorate(fn: Callable) -> AssetChecksDefinition:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PreviewWarning)
            return asset_check(partitions_def=corpus_partitions, blocking=False, **kwargs)(fn)

    return decorate


def edge_checks(edge_assets: Sequence[AssetsDefinition]) -> list[AssetChecksDefinition]:
    """One ``<asset>_connect`` check per edge asset, on the partition of ``edges`` it writes."""

    def build(asset_def: AssetsDefinition) -> AssetChecksDefinition:
        @_partitioned_check(
            asset=asset_def,
            name=f"{asset_def.key.path[-1]}_connect",
            description="Every edge joins known nodes or entities of its corpus, and no (src, dst, kind) repeats.",
        )
        def check(context: AssetCheckExecutionContext, edges: pa.Table, lake: LakeResource) -> AssetCheckResult:
            corpus = context.partition_key
            nodes = lake.storage.read("nodes", {"corpus": corpus})
            return edge_problems(edges, nodes, _entities(lake.storage, corpus))

        return check

    return [build(asset_def) for asset_def in edge_assets]


def mentions_match_df(mentions_asset_key: AssetKey | str) -> AssetChecksDefinition:
    """Entities' df must equal the distinct nodes mentioning them, for the extractors in the mentions asset."""

    @_partitioned_check(
        asset=mentions_asset_key,
        name="mentions_match_df",
        description="Each entity's df equals the number of distinct nodes that mention it.",
    )
    def check(context: AssetCheckExecutionContext, mentions: pa.Table, lake: LakeResource) -> AssetCheckResult:
        entities = _entities(lake.storage, context.partition_key)
        extractors = mentions.column("extractor").unique()
        return df_problems(mentions, entities.filter(pc.is_in(entities.column("extractor"), value_set=extractors)))

    return check
