"""A corpus graph out of the lake, for the tools people draw and analyse graphs with: GraphML (networkx
writes it; Gephi, Cytoscape, igraph and networkx read it), or a nodes file and an edges file as CSV or
Parquet (pyarrow writes them). Nodes carry their document's title (an entity its name) and a type
(``passage``, or the entity's), edges their kind and weight.

Every node of the corpus is written, those without an edge of the kind too, and any other end of an
edge (an entity: doc_id empty, chunk_idx -1), so edge counts match the ``edges`` table. Files are written beside their target and moved
into place whole, so a failed export leaves nothing half-written.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from graphlake.common.suggest import did_you_mean
from graphlake.warehouse.catalog import Catalog

FORMATS = ("graphml", "csv", "parquet")


class ExportError(ValueError):
    """An export that cannot be made: an unknown corpus, kind or format; the message says which."""


def graph_tables(home: Path, corpus: str, kind: str | None) -> tuple[pa.Table, pa.Table]:
    """The corpus's nodes (with titles) and its edges of ``kind`` (None: every kind)."""
    with Catalog(home).reader() as con:
        kinds = [row[0] for row in con.execute("SELECT DISTINCT kind FROM edges WHERE corpus = $c ORDER BY 1", {"c": corpus}).fetchall()]
        nodes = con.sql(
            """WITH passages AS (
                   SELECT n.node_id, n.doc_id, coalesce(d.title, '') AS title, n.chunk_idx, 'passage' AS type FROM nodes n
                   LEFT JOIN documents d ON d.corpus = n.corpus AND d.doc_id = n.doc_id WHERE n.corpus = $c
               ), ends AS (  -- an edge may end at something other than a passage (an entity)
                   SELECT src AS node_id FROM edges WHERE corpus = $c AND ($k IS NULL OR kind = $k)
                   UNION SELECT dst FROM edges WHERE corpus = $c AND ($k IS NULL OR kind = $k)
               ), named AS (  -- an entity end shows its name and type, not its id
                   SELECT entity_id, any_value(name) AS name, any_value(type) AS type FROM entities WHERE corpus = $c GROUP BY entity_id
               )
               SELECT * FROM passages
               UNION ALL SELECT e.node_id, '', coalesce(x.name, ''), -1, coalesce(x.type, '') FROM ends e
               LEFT JOIN named x ON x.entity_id = e.node_id WHERE e.node_id NOT IN (SELECT node_id FROM passages)
               ORDER BY node_id""",
            params={"c": corpus, "k": kind},
        ).to_arrow_table()
        if not nodes.num_rows:
            corpora = [row[0] for row in con.execute("SELECT DISTINCT corpus FROM nodes").fetchall()]
            raise ExportError(f"corpus {corpus!r} has no nodes in the lake{did_you_mean(corpus, corpora)}")
        if kind is not None and kind not in kinds:
            raise ExportError(f"corpus {corpus!r} has no {kind!r} edges; it has {', '.join(kinds) or 'none'}{did_you_mean(kind, kinds)}")
        edges = con.sql(
            "SELECT src, dst, kind, weight, coalesce(source, '') AS source FROM edges WHERE corpus = $c AND ($k IS NULL OR kind = $k) ORDER BY kind, src, dst",
            params={"c": corpus, "k": kind},
        ).to_arrow_table()
    return nodes, edges


def export_graph(home: Path, corpus: str, kind: str | None, form: str, target: Path) -> Path:
    """Write the graph to ``target``: a ``.graphml`` file, or a folder of nodes and edges files; the path written."""
    if form not in FORMATS:
        raise ExportError(f"unknown format {form!r}; one of {', '.join(FORMATS)}{did_you_mean(form, FORMATS)}")
    nodes, edges = graph_tables(home, corpus, kind)
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        if form == "graphml":
            _graphml(nodes, edges, multi=kind is None, path=staging)
        else:
            staging.mkdir()
            for name, table in (("nodes", nodes), ("edges", edges)):
                if form == "csv":
                    pacsv.write_csv(table, staging / f"{name}.csv")
                else:
                    pq.write_table(table, staging / f"{name}.parquet")
        if target.is_dir() and form != "graphml":
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.is_dir():
            shutil.rmtree(staging)
        else:
            staging.unlink(missing_ok=True)
    return target


def _graphml(nodes: pa.Table, edges: pa.Table, multi: bool, path: Path) -> None:
    import networkx as nx

    graph = nx.MultiDiGraph() if multi else nx.DiGraph()  # every kind: two nodes may be joined by several
    graph.add_nodes_from((row.pop("node_id"), row) for row in nodes.to_pylist())
    graph.add_edges_from((row.pop("src"), row.pop("dst"), row) for row in edges.to_pylist())
    nx.write_graphml(graph, path)
