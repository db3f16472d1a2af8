"""A corpus graph leaves the lake: ``graphlake export graph`` on the shared demo lake, read back by
networkx (GraphML) and pyarrow (CSV, Parquet) with the node and edge counts SQL reports."""

from __future__ import annotations

import networkx as nx
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.warehouse.catalog import Catalog

COUNTS = """WITH ends AS (SELECT src AS id FROM edges WHERE corpus = 'demo' AND kind = $k UNION SELECT dst FROM edges WHERE corpus = 'demo' AND kind = $k)
    SELECT (SELECT count(*) FROM (SELECT node_id AS id FROM nodes WHERE corpus = 'demo' UNION SELECT id FROM ends)),
           (SELECT count(*) FROM edges WHERE corpus = 'demo' AND kind = $k)"""


def export(*args: str):
    return CliRunner().invoke(app, ["export", "graph", "--corpus", "demo", *args], catch_exceptions=False)


def test_a_corpus_graph_exports_to_graphml_csv_and_parquet_with_the_counts_sql_reports(reads_demo, tmp_path):
    with Catalog(reads_demo.home).reader() as con:
        nodes, edges = con.execute(COUNTS, {"k": "citation"}).fetchone()
        src, dst, weight, title = con.execute(
            """SELECT e.src, e.dst, e.weight, d.title FROM edges e JOIN nodes n ON n.corpus = e.corpus AND n.node_id = e.src
               JOIN documents d ON d.corpus = n.corpus AND d.doc_id = n.doc_id WHERE e.corpus = 'demo' AND e.kind = 'citation' ORDER BY 1, 2 LIMIT 1"""
        ).fetchone()
    assert edges > 0 and nodes >= 138

    done = export("--kind", "citation", "--out", str(tmp_path / "citation.graphml"))
    assert done.exit_code == 0, done.output
    graph = nx.read_graphml(tmp_path / "citation.graphml")
    assert (graph.number_of_nodes(), graph.number_of_edges()) == (nodes, edges)
    assert graph.nodes[src]["title"] == title and graph.edges[src, dst]["weight"] == weight and graph.edges[src, dst]["kind"] == "citation"

    for form, read in (("csv", pacsv.read_csv), ("parquet", pq.read_table)):
        folder = tmp_path / form
        assert export("--kind", "citation", "--format", form, "--out", str(folder)).exit_code == 0
        assert (read(folder / f"nodes.{form}").num_rows, read(folder / f"edges.{form}").num_rows) == (nodes, edges)

    every = export("--out", str(tmp_path / "all.graphml"))  # every kind: a multigraph, edges keep their kind
    assert every.exit_code == 0, every.output
    with Catalog(reads_demo.home).reader() as con:
        (total,) = con.execute("SELECT count(*) FROM edges WHERE corpus = 'demo'").fetchone()
    every_graph = nx.read_graphml(tmp_path / "all.graphml")
    assert every_graph.number_of_edges() == total
    with Catalog(reads_demo.home).reader() as con:  # an entity end (co-occurrence) carries its name and type, as Gephi shows it
        entity, name, kind = con.execute(
            """SELECT x.entity_id, x.name, x.type FROM edges e JOIN entities x ON x.corpus = e.corpus AND x.entity_id = e.src
               WHERE e.corpus = 'demo' AND e.kind = 'cooccurrence' ORDER BY 1 LIMIT 1"""
        ).fetchone()
    assert (every_graph.nodes[entity]["title"], every_graph.nodes[entity]["type"]) == (name, kind) and name
    assert every_graph.nodes[src]["type"] == "passage"

    wrong = export("--kind", "citaton", "--out", str(tmp_path / "x.graphml"))
    assert wrong.exit_code == 1 and "did you mean citation?" in wrong.stderr and not (tmp_path / "x.graphml").exists()
