"""Table contracts: the columns every writer must provide and how each table is partitioned.

Writers may add columns; these are the ones downstream code and users' SQL rely on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from graphlake.kernels.text.triples import Triple


CITED_BY = ("url", "source", "path")  # the metadata a hit cites its document by, the first present


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: pa.Schema
    partition_by: tuple[str, ...]
    key: tuple[str, ...]


def _spec(name: str, fields: list[tuple[str, pa.DataType]], partition_by: tuple[str, ...], key: tuple[str, ...]) -> TableSpec:
    return TableSpec(name, pa.schema(fields), partition_by, key)


S, I32, F32, F64 = pa.string(), pa.int32(), pa.float32(), pa.float64()

TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in [
        _spec(
            "documents",
            [("corpus", S), ("doc_id", S), ("title", S), ("text", S), ("metadata", S)],
            ("corpus",),
            ("doc_id",),
        ),
        _spec(
            "queries",
            [("corpus", S), ("query_id", S), ("text", S), ("split", S), ("metadata", S)],
            ("corpus",),
            ("query_id",),
        ),
        _spec(
            "qrels",
            [("corpus", S), ("query_id", S), ("doc_id", S), ("relevance", I32), ("split", S)],
            ("corpus",),
            ("query_id", "doc_id"),
        ),
        _spec(
            "foreign_keys",
            # one row per declaration; ``position`` is its index in the schema's list, so a key
            # a schema declares twice (Spider's dog_kennels) stays visible rather than vanishing
            [("corpus", S), ("src_doc_id", S), ("src_column", S), ("dst_doc_id", S), ("dst_column", S), ("position", I32)],
            ("corpus",),
            ("src_doc_id", "position"),
        ),
        _spec(
            "nodes",
            [
                ("corpus", S),
                ("node_id", S),
                ("doc_id", S),
                ("chunk_idx", I32),
                ("text", S),
                ("start", I32),
                ("end", I32),
                ("content_hash", S),
            ],
            ("corpus",),
            ("node_id",),
        ),
        _spec(
            "edges",
            [("corpus", S), ("src", S), ("dst", S), ("kind", S), ("weight", F64), ("source", S)],
            ("corpus", "kind"),
            ("src", "dst", "kind"),
        ),
        _spec(
            "entities",
            # ``extractor``: spacy | regex | llm; ``df``: how many nodes mention the entity
            [("corpus", S), ("extractor", S), ("entity_id", S), ("name", S), ("norm", S), ("type", S), ("df", I32)],
            ("corpus", "extractor"),
            ("entity_id",),
        ),
        _spec(
            "mentions",
            [("corpus", S), ("extractor", S), ("node_id", S), ("entity_id", S), ("count", I32), ("source", S)],
            ("corpus", "extractor"),
            ("node_id", "entity_id"),
        ),
        _spec(
            "triples",
            [("corpus", S), ("extractor", S), ("subject", S), ("relation", S), ("object", S), ("node_id", S), ("source", S)],
            ("corpus", "extractor"),
            ("node_id", "subject", "relation", "object"),
        ),
        _spec(
            "vectors",
            # dense models fill ``dense``; sparse ones fill ``indices``/``values`` (vocabulary ids, weights)
            [
                ("corpus", S),
                ("model", S),
                ("node_id", S),
                ("content_hash", S),
                ("dense", pa.list_(F32)),
                ("indices", pa.list_(I32)),
                ("values", pa.list_(F32)),
            ],
            ("corpus", "model"),
            ("node_id",),
        ),
        # GRASP's semi-structured knowledge bases (kernels/plan/skb_builders.py); ``source`` names the builder
        _spec(
            "skb_nodes",
            [("corpus", S), ("source", S), ("skb_id", S), ("label", S), ("name", S), ("text", S), ("node_id", S), ("metadata", S)],
            ("corpus", "source"),
            ("skb_id",),
        ),
        _spec(
            "skb_edges",
            # ``provenance``: the passage (node id and offset), schema file row or question that gave the edge
            [("corpus", S), ("source", S), ("src", S), ("relation", S), ("dst", S), ("provenance", S)],
            ("corpus", "source"),
            ("src", "relation", "dst", "provenance"),
        ),
        _spec(
            "skb_plans",
            # one plan per query and planner: the JSON, whether it validated (and why not), what it found
            [
                ("corpus", S),
                ("source", S),
                ("planner", S),
                ("query_id", S),
                ("query", S),
                ("plan", S),
                ("valid", pa.bool_()),
                ("error", S),
                ("risk_level", S),
                ("n_cand", I32),
                ("sql", S),
                ("plan_ms", F64),
            ],
            ("corpus", "source", "planner"),
            ("query_id",),
        ),
        _spec(
            "runs",
            [
                ("run_id", S),
                ("corpus", S),
                ("method", S),
                ("params", S),
                ("query_id", S),
                ("rank", I32),
                ("node_id", S),
                ("doc_id", S),
                ("score", F64),
                ("latency_ms", F64),
            ],
            ("corpus", "method"),
            ("query_id", "rank"),
        ),
        _spec(
            "metrics",
            [("run_id", S), ("corpus", S), ("method", S), ("split", S), ("metric", S), ("k", I32), ("value", F64), ("queries", I32)],
            ("corpus", "method"),
            ("split", "metric", "k"),
        ),
        _spec(
            "query_metrics",
            [("run_id", S), ("corpus", S), ("method", S), ("split", S), ("query_id", S), ("metric", S), ("k", I32), ("value", F64)],
            ("corpus", "method"),
            ("query_id", "metric", "k"),
        ),
    ]
}


def row_schema(name: str) -> pa.Schema:
    """A table's columns but those of its partition, the ones a reader or asset fills."""
    spec = table_spec(name)
    return pa.schema([field for field in spec.schema if field.name not in spec.partition_by])


def table_spec(name: str) -> TableSpec:
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known tables: {', '.join(sorted(TABLES))}") from None


def edges_table(src, dst, weight, kind: str, source) -> pa.Table:
    """Rows of the ``edges`` table (its partition columns aside): one per edge, ``source`` one value or one per edge."""
    n = len(weight)
    return pa.table(
        {
            "src": _strings(src),
            "dst": _strings(dst),
            "kind": pa.array([kind] * n, pa.string()),
            "weight": pa.array(weight, pa.float64()),
            "source": pa.array([source] * n if isinstance(source, str) else source, pa.string()),
        }
    )


def _strings(values) -> pa.Array | pa.ChunkedArray:
    return values.cast(pa.string()) if isinstance(values, pa.Array | pa.ChunkedArray) else pa.array(values, pa.string())


def triples_table(node_ids: list[str], found: list[list[Triple]], source: str) -> pa.Table:
    """The ``triples`` table of what an extractor found per node (``found`` in node order)."""
    return triple_rows_table([(node_id, t.subject, t.relation, t.object) for node_id, triples in zip(node_ids, found, strict=True) for t in triples], source)


def triple_rows_table(rows: list[tuple[str, str, str, str]], source: str) -> pa.Table:
    """(node_id, subject, relation, object) rows as the ``triples`` table."""
    columns = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    names = ("node_id", "subject", "relation", "object")
    return pa.table({**{name: pa.array(list(column), pa.string()) for name, column in zip(names, columns, strict=True)}, "source": pa.array([source] * len(rows), pa.string())})


def triples_summary(found: list[list[Triple]]) -> dict[str, int]:
    return {"nodes": len(found), "nodes_with_triples": sum(1 for t in found if t), "triples": sum(len(t) for t in found)}
