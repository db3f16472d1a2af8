"""Graph table macros stored in the catalog file, so every DuckDB client of the lake can call them.

Traversals follow edge direction, as the retrieval operators do; symmetric relations (``contextual``)
are stored in both directions, so they are walked both ways. ``kind := NULL`` means every edge kind.

Inside a DuckDB macro an unqualified name that equals a parameter is the parameter, even where a
column of that name is in scope (``kind = kind`` is always true), so every column is qualified.
"""

from __future__ import annotations

import duckdb

MACROS: dict[str, str] = {
    # out-neighbours, strongest first
    "neighbours": """(corpus, node, kind := NULL) AS TABLE
        SELECT e.dst AS node_id, e.kind AS kind, e.weight AS weight
        FROM edges e
        WHERE e.corpus = corpus AND e.src = node AND (kind IS NULL OR e.kind = kind)
        ORDER BY e.weight DESC, e.kind, e.dst""",
    # how many nodes have each out- and in-degree; nodes without an edge of the kind are not counted
    "degrees": """(corpus, kind := NULL) AS TABLE
        WITH picked AS (
            SELECT x.src, x.dst, x.kind FROM edges x
            WHERE x.corpus = corpus AND (kind IS NULL OR x.kind = kind)
        ), per_node AS (
            SELECT p.kind, 'out' AS direction, p.src AS node_id, count(*) AS degree FROM picked p GROUP BY ALL
            UNION ALL
            SELECT p.kind, 'in' AS direction, p.dst AS node_id, count(*) AS degree FROM picked p GROUP BY ALL
        )
        SELECT d.kind, d.direction, d.degree, count(*) AS nodes
        FROM per_node d GROUP BY ALL
        ORDER BY d.kind, d.direction DESC, d.degree""",
    # breadth-first: USING KEY keeps one row per node and a node already reached is never revisited,
    # so each node gets its shortest hop distance (the start node is hop 0)
    "khop": """(corpus, node, k, kind := NULL) AS TABLE
        WITH RECURSIVE reach(node_id, hops) USING KEY (node_id) AS (
            SELECT node, 0
            UNION
            SELECT e.dst, min(r.hops) + 1
            FROM reach r JOIN edges e ON e.src = r.node_id
            WHERE e.corpus = corpus AND (kind IS NULL OR e.kind = kind) AND r.hops < k
              AND NOT EXISTS (SELECT 1 FROM recurring.reach seen WHERE seen.node_id = e.dst)
            GROUP BY e.dst
        )
        SELECT r.node_id, r.hops FROM reach r ORDER BY r.hops, r.node_id""",
    # breadth-first with the path carried along; visited nodes are never re-entered (no cycles) and
    # of equally short paths to a node the lexicographically smallest wins, so the answer is stable.
    # No row means no path within max_hops.
    "shortest_path": """(corpus, src, dst, max_hops, kind := NULL) AS TABLE
        WITH RECURSIVE bfs(node_id, path) USING KEY (node_id) AS (
            SELECT src, [src]
            UNION
            SELECT e.dst, min(list_append(b.path, e.dst))
            FROM bfs b JOIN edges e ON e.src = b.node_id
            WHERE e.corpus = corpus AND (kind IS NULL OR e.kind = kind) AND len(b.path) <= max_hops
              AND NOT EXISTS (SELECT 1 FROM recurring.bfs seen WHERE seen.node_id = e.dst)
            GROUP BY e.dst
        )
        SELECT b.path, len(b.path) - 1 AS length FROM bfs b WHERE b.node_id = dst""",
    # an entity named by id, surface name or normalised form, under any extractor
    "entity_nodes": """(corpus, entity) AS TABLE
        SELECT m.node_id, en.entity_id, en.name, m.extractor, m.count
        FROM entities en
        JOIN mentions m ON m.corpus = en.corpus AND m.extractor = en.extractor AND m.entity_id = en.entity_id
        WHERE en.corpus = corpus AND entity IN (en.entity_id, en.name, en.norm)
        ORDER BY m.count DESC, m.node_id, m.extractor""",
    # degree = distinct neighbours over edges either way; ties go to the smaller node id
    "top_hubs": """(corpus, kind := NULL, n := 10) AS TABLE
        WITH picked AS (
            SELECT x.src, x.dst FROM edges x WHERE x.corpus = corpus AND (kind IS NULL OR x.kind = kind)
        ), ends AS (
            SELECT p.src AS node_id, p.dst AS other, 'out' AS direction FROM picked p
            UNION ALL
            SELECT p.dst AS node_id, p.src AS other, 'in' AS direction FROM picked p
        )
        SELECT s.node_id,
               count(DISTINCT s.other) AS degree,
               count(*) FILTER (WHERE s.direction = 'out') AS out_degree,
               count(*) FILTER (WHERE s.direction = 'in') AS in_degree
        FROM ends s GROUP BY s.node_id
        ORDER BY degree DESC, s.node_id
        LIMIT n""",
    # an SKB node's neighbours over its typed relations, both storage directions (GRASP treats
    # relations as undirected); source := NULL means every SKB of the corpus
    "skb_neighbours": """(corpus, skb_id, relation := NULL, source := NULL) AS TABLE
        WITH around AS (
            SELECT e.source, e.relation, e.dst AS neighbour, 'out' AS direction FROM skb_edges e
            WHERE e.corpus = corpus AND e.src = skb_id
            UNION
            SELECT e.source, e.relation, e.src AS neighbour, 'in' AS direction FROM skb_edges e
            WHERE e.corpus = corpus AND e.dst = skb_id
        )
        SELECT a.source, a.relation, a.direction, a.neighbour, n.label, n.name, n.node_id
        FROM around a
        JOIN skb_nodes n ON n.corpus = corpus AND n.source = a.source AND n.skb_id = a.neighbour
        WHERE (relation IS NULL OR a.relation = relation) AND (source IS NULL OR a.source = source)
        ORDER BY a.source, a.relation, n.name, a.neighbour""",
}

# Views over the tables, created after them: GRASP's planner reads an SKB's schema from skb_schema
VIEWS: dict[str, str] = {
    "skb_schema": """SELECT e.corpus, e.source, s.label AS src_label, e.relation, d.label AS dst_label, count(*) AS edges
        FROM skb_edges e
        JOIN skb_nodes s ON s.corpus = e.corpus AND s.source = e.source AND s.skb_id = e.src
        JOIN skb_nodes d ON d.corpus = e.corpus AND d.source = e.source AND d.skb_id = e.dst
        GROUP BY ALL ORDER BY e.corpus, e.source, edges DESC, src_label, e.relation, dst_label""",
}


def install_macros(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create the derived views and the macros in the connection's database; they bind to the views when called."""
    for name, body in VIEWS.items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")
    for name, body in MACROS.items():
        con.execute(f"CREATE OR REPLACE MACRO {name}{body}")
