"""Stage 3, enrichment: nodes -> mentions and entities, once per extractor (spaCy NER, SPRIG regex, an
LLM); spaCy's one pass also gives the knowledge graph's ``triples_spacy``.

Each extractor is one multi-asset writing its own ``(corpus, extractor)`` partition of the
``entities`` and ``mentions`` tables, so the two can be built, compared and used side by side.
An entity's id is ``<extractor>:<norm>``, its norm taken after SPRIG-EL title-alias linking
(when ``link_titles``), and its ``df`` is the number of nodes that mention it.
"""

import time
from collections import Counter
from collections.abc import Callable
from functools import partial

import numpy as np
import pyarrow as pa
from dagster import AssetExecutionContext, AssetIn, AssetOut, Config, MetadataValue, Output, multi_asset

from graphlake.common.progress import StepProgress
from graphlake.common.shards import map_shards
from graphlake.kernels.text.entities import Collected, Mention, collect_mentions, regex_entities, title_aliases
from graphlake.kernels.text.triples import Triple, spacy_mentions_and_triples, spacy_source
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.node_cache import NodeCache
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.tables import triples_summary, triples_table

TOP_HUBS = 10


class RegexEntityConfig(Config):
    link_titles: bool = True  # SPRIG-EL: map mentions onto unambiguous document-title aliases


class SpacyEntityConfig(RegexEntityConfig):
    n_process: int = 1  # spaCy worker processes
    batch_size: int = 256  # texts per nlp.pipe batch


def entity_outs(extractor: str) -> dict[str, AssetOut]:
    partition = {"extractor": extractor}
    return {
        f"entities_{extractor}": AssetOut(
            metadata={"table": "entities", "partition": partition},
            description=f"Entities found by {extractor}, with the number of nodes mentioning each (df).",
        ),
        f"mentions_{extractor}": AssetOut(
            metadata={"table": "mentions", "partition": partition},
            description=f"How often each node mentions each {extractor} entity.",
        ),
    }


NODE_INPUTS = {"nodes": AssetIn("nodes"), "documents": AssetIn("documents")}


_SPACY_OUTS = {
    **entity_outs("spacy"),
    "triples_spacy": AssetOut(
        metadata={"table": "triples", "partition": {"extractor": "spacy"}},
        description="Subject-verb-object triples from spaCy dependency parses: a knowledge graph with no LLM.",
    ),
}


@multi_asset(name="spacy_entities", outs=_SPACY_OUTS, ins=NODE_INPUTS, partitions_def=corpus_partitions)
def spacy_entity_assets(context: AssetExecutionContext, config: SpacyEntityConfig, lake: LakeResource, nodes: pa.Table, documents: pa.Table):
    """spaCy ``en_core_web_sm`` over every node, once: its NER's entities (quantities skipped, see the
    kernel) and the triples of its dependency parse (``kernels/text/triples.py``), in shards of nodes
    (``common/shards.py``: tasks of their own on a Dask cluster)."""
    started = time.perf_counter()
    texts = nodes.column("text").to_pylist()
    source = spacy_source()
    cache = NodeCache(lake.home, "spacy", source)  # a node whose text spaCy read before is not parsed again
    sharded = {}

    def parse(fresh: list[str]) -> list:
        progress = StepProgress(f"spaCy on {context.partition_key}", len(fresh), context.log.info, unit="nodes")
        pipe = partial(spacy_mentions_and_triples, n_process=config.n_process, batch_size=config.batch_size)
        parsed, shards = map_shards(pipe, fresh, progress.advance, name=f"spacy-{context.partition_key}")
        sharded.update(shards.as_metadata())
        return parsed

    found, parsed = cache.apply(texts, parse, _parse_record, lambda stored: ([tuple(m) for m in stored["mentions"]], [Triple(**t) for t in stored["triples"]]))
    context.log.info(f"spaCy: parsed {parsed} nodes, reused {len(texts) - parsed}")
    processed = lambda: {"encoded": parsed, "reused": len(texts) - parsed, **sharded}  # noqa: E731  (the build summary's per-node counts)
    yield from extract_entities(context, "spacy", config.link_titles, nodes, documents, lambda _: [mentions for mentions, _ in found], processed, started)
    triples = [extracted for _, extracted in found]
    metadata = triples_summary(triples) | {"seconds": round(time.perf_counter() - started, 3)} | sharded
    yield Output(triples_table(nodes.column("node_id").to_pylist(), triples, source), "triples_spacy", metadata=metadata)


def _parse_record(parsed: tuple[list, list[Triple]]) -> dict:
    mentions, triples = parsed
    return {"mentions": [list(mention) for mention in mentions], "triples": [triple.model_dump() for triple in triples]}


@multi_asset(name="regex_entities", outs=entity_outs("regex"), ins=NODE_INPUTS, partitions_def=corpus_partitions)
def regex_entity_assets(context: AssetExecutionContext, config: RegexEntityConfig, nodes: pa.Table, documents: pa.Table):
    """SPRIG's capitalised-span heuristic over every node: no model, orders of magnitude faster."""
    yield from extract_entities(context, "regex", config.link_titles, nodes, documents, regex_entities)


Extractor = Callable[[list[str]], list[list[Mention]]]


def extract_entities(
    context: AssetExecutionContext,
    extractor: str,
    link_titles: bool,
    nodes: pa.Table,
    documents: pa.Table,
    extract: Extractor,
    extra_metadata: Callable[[], dict] = dict,
    started: float | None = None,
):
    """Extract, alias-link and aggregate; both outputs carry the same counts and timings (from
    ``started`` when the extraction began earlier)."""
    corpus = context.partition_key
    started = time.perf_counter() if started is None else started
    aliases = title_aliases(documents.column("title").to_pylist()) if link_titles else {}
    node_ids = nodes.column("node_id").to_pylist()
    try:
        collected = collect_mentions(node_ids, extract(nodes.column("text").to_pylist()), aliases)
    except Exception as error:
        raise RuntimeError(f"entity extraction failed for corpus {corpus!r}, extractor {extractor!r}: {error}") from error
    mentions = _mentions_table(extractor, collected)
    entities = _entities_table(extractor, collected)
    seconds = time.perf_counter() - started
    counts = {
        "nodes": nodes.num_rows,
        "nodes_without_entities": nodes.num_rows - len({node for node, _ in collected.counts}),
        "mention_occurrences": int(sum(collected.counts.values())),
        "alias_map_size": len(aliases),
        "alias_linked_occurrences": collected.linked,
        "seconds": round(seconds, 3),
        "seconds_per_document": round(seconds / max(documents.num_rows, 1), 6),
        **extra_metadata(),
    }
    yield Output(entities, f"entities_{extractor}", metadata={**counts, **_hub_stats(entities)})
    # the nodes run through the model are the step's, counted once in the build summary: on the entities
    yield Output(mentions, f"mentions_{extractor}", metadata={key: value for key, value in counts.items() if key not in ("encoded", "reused")})


def _mentions_table(extractor: str, collected: Collected) -> pa.Table:
    pairs = sorted(collected.counts.items())
    return pa.table(
        {
            "node_id": pa.array([node for (node, _), _ in pairs], pa.string()),
            "entity_id": pa.array([f"{extractor}:{norm}" for (_, norm), _ in pairs], pa.string()),
            "count": pa.array([count for _, count in pairs], pa.int32()),
            "source": pa.array([extractor] * len(pairs), pa.string()),
        }
    )


def _entities_table(extractor: str, collected: Collected) -> pa.Table:
    df = Counter(norm for _, norm in collected.counts)
    norms = sorted(df)
    names, types = zip(*(collected.name_and_type(norm) for norm in norms)) if norms else ((), ())
    return pa.table(
        {
            "entity_id": pa.array([f"{extractor}:{norm}" for norm in norms], pa.string()),
            "name": pa.array(names, pa.string()),
            "norm": pa.array(norms, pa.string()),
            "type": pa.array(types, pa.string()),
            "df": pa.array([df[norm] for norm in norms], pa.int32()),
        }
    )


def _hub_stats(entities: pa.Table) -> dict:
    """How heavy the df tail is: hubs are what SPRIG down-weights and prunes."""
    df = entities.column("df").to_numpy()
    if not len(df):
        return {"entities": 0}
    top = np.argsort(-df, kind="stable")[:TOP_HUBS]
    ids = entities.column("entity_id").to_pylist()
    return {
        "entities": len(df),
        "df_max": int(df.max()),
        "df_p95": round(float(np.percentile(df, 95)), 2),
        "df_p50": float(np.percentile(df, 50)),
        "top_hubs": MetadataValue.json({ids[i]: int(df[i]) for i in top}),
    }
