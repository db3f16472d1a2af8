"""GRASP Stage 1 (spec G1, G2, G6): the plan language and its validation on a toy SKB, the array matcher
and the compiled DuckDB query against the plain-Python reference executor (toy SKB and Spider's schema
graph), batched and capped, anchor linking, and the SKB builders reading no question."""

import json
import random

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from graphlake.kernels.plan.fusion import fuse, graph_weight
from graphlake.kernels.plan.match import Adjacency, execute
from graphlake.kernels.plan.plans import Plan, Schema, check, parse_plan
from graphlake.kernels.plan.skb_builders import SKB, sql_schema, wiki_rules
from graphlake.kernels.plan.sql import Graph, Linked, compile_sql, link, reference

# a toy SKB: films, people, dates; director / spouse / date of birth
TOY_NODES = [
    ("f1", "film"),
    ("f2", "film"),
    ("f3", "film"),
    ("f4", "film"),
    ("p1", "person"),
    ("p2", "person"),
    ("p3", "person"),
    ("p4", "person"),
    ("p5", "person"),
    ("d1", "date"),
    ("d2", "date"),
    ("d3", "date"),
]
TOY_EDGES = [
    ("f1", "director", "p1"),
    ("f2", "director", "p1"),
    ("f3", "director", "p2"),
    ("f4", "director", "p3"),
    ("f4", "director", "p4"),
    ("p1", "spouse", "p2"),
    ("p3", "spouse", "p5"),
    ("p4", "spouse", "p5"),
    ("p1", "date of birth", "d1"),
    ("p2", "date of birth", "d2"),
    ("p3", "date of birth", "d1"),
    ("p5", "date of birth", "d3"),
]
TOY_SCHEMA = Schema.of([(dict(TOY_NODES)[s], r, dict(TOY_NODES)[d]) for s, r, d in TOY_EDGES], {label for _, label in TOY_NODES})


def _hop(src, rel, dst, label):
    return {"from": src, "rel": rel, "to_var": dst, "to_label": label}


def _anchor(var, text, label, mode="name"):
    return {"var": var, "text": text, "label": label, "match_mode": mode}


VALID = [
    {"anchors": [_anchor("A", "x", "film")], "target": {"var": "A"}},
    {"anchors": [_anchor("A", "x", "film")], "hops": [_hop("A", "director", "T", "person")], "target": {"var": "T", "labels": ["person"]}},
    {"anchors": [_anchor("A", "x", "film", "doc")], "hops": [_hop("A", "director", "P", "person"), _hop("P", "spouse", "T", "person")]},
    {"anchors": [_anchor("A", "x", "person")], "hops": [_hop("A", "date of birth", "T", "date")], "risk_level": "weak"},
    {"anchors": [_anchor("A", "x", "film"), _anchor("B", "y", "film")], "target": {"var": "A", "vars": ["A", "B"]}},
    {"anchors": [_anchor("A", "x", "film"), _anchor("B", "y", "person")], "hops": [_hop("A", "director", "B", "person")], "target": {"var": "A"}},
    {"anchors": [_anchor("T", "a thriller", "film", "doc")], "target": {"var": "T", "labels": ["film"], "relevance_text": "thriller"}},
    {"anchors": [_anchor("A", "x", "person")], "hops": [_hop("A", "spouse", "S", "person"), _hop("S", "director", "T", "film")], "risk_level": "aggressive"},
    {"anchors": [_anchor("A", "x", "person")], "hops": [_hop("A", "director", "T", "film")], "target": {"var": "T", "labels": ["film", "person"]}},
    {"anchors": [_anchor("A", "x", "film")], "hops": [_hop("A", "director", "P", "person"), _hop("P", "date of birth", "D", "date")], "target": {"var": "P", "vars": ["P", "D"]}},
    {"anchors": [_anchor("A", "x", "person")], "hops": [_hop("A", "spouse", "T", "person")], "risk_level": "no_trade"},
    {"anchors": [_anchor("A", "x", "film")], "hops": [_hop("A", "director", "P", "person"), _hop("P", "director", "T", "film")]},
    {"anchors": [_anchor("A", "x", "date")], "hops": [_hop("A", "date of birth", "T", "person")]},
    {
        "anchors": [_anchor("A", "x", "film"), _anchor("B", "y", "film")],
        "hops": [_hop("A", "director", "P", "person"), _hop("B", "director", "Q", "person")],
        "target": {"var": "A", "vars": ["A", "B"]},
    },
    {"anchors": [_anchor("A", "x", "person"), _anchor("B", "y", "person")], "hops": [_hop("A", "spouse", "B", "person")], "target": {"var": "B"}},
]
INVALID = [  # (plan, what the error names)
    ({"anchors": [], "target": {"var": "T"}}, "no anchor"),
    ({"anchors": [_anchor("A", "x", "movie")], "target": {"var": "A"}}, "'movie' is not an SKB node type"),
    ({"anchors": [_anchor("A", "x", "film")], "hops": [_hop("A", "directed", "T", "person")]}, "'directed' is not an SKB relation"),
    ({"anchors": [_anchor("A", "x", "film")], "hops": [_hop("A", "director", "T", "human")]}, "'human' is not an SKB node type"),
    ({"anchors": [_anchor("A", "x", "film")], "hops": [_hop("B", "director", "T", "person")]}, "from 'B' is not an anchor"),
    ({"anchors": [_anchor("A", "x", "film")], "target": {"var": "T"}}, "target 'T' is not reached"),
    ({"anchors": [_anchor("A", "x", "film"), _anchor("A", "y", "film")], "target": {"var": "A"}}, "anchor variables repeat"),
    ({"anchors": [_anchor("A", "x", "film")], "target": {"var": "A", "labels": ["person"]}}, "exclude each other"),
    ({"anchors": [_anchor("A", "x", "film")], "hops": [_hop("A", "spouse", "T", "person")]}, "no 'spouse' edge joins"),
    ({"anchors": [_anchor("A", "x", "film")], "target": {"var": "A", "labels": ["studio"]}}, "'studio' is not an SKB node type"),
    ({"anchors": [_anchor("A", "x", "film")], "hops": [_hop("A", "director", "T", "film")]}, "no 'director' edge joins"),
    ({"anchors": [_anchor("A", "x", "film")], "target": {"var": "A", "vars": ["A", "Z"]}}, "target 'Z' is not reached"),
    ({"anchors": [_anchor("A", "x", "person")], "hops": [_hop("A", "date of birth", "T", "film")]}, "no 'date of birth' edge joins"),
    ({"anchors": [_anchor("A", "x", "film")], "hops": [_hop("T", "director", "A", "film"), _hop("A", "director", "T", "person")]}, "from 'T' is not an anchor"),
]
UNPARSABLE = [  # not plans at all: parse errors, recorded the same way
    '{"anchors": [{"var": "A", "text": "x", "label": "film", "match_mode": "title"}]}',
    '{"anchors": [], "risk_level": "reckless"}',
    '{"anchors": [{"var": "A", "label": "film"}]}',
    '{"hops": [{"from": "A", "rel": "director"}]}',
    "not json at all",
    '{"anchors": [], "extra_field": 1}',
]


def test_thirty_hand_written_plans_validate_or_say_why():
    assert len(VALID) + len(INVALID) + len(UNPARSABLE) >= 30
    for plan in VALID:
        parsed, error = parse_plan(plan)
        assert error is None and check(parsed, TOY_SCHEMA) == [], plan
    for plan, reason in INVALID:
        parsed, error = parse_plan(plan)
        assert error is None
        problems = check(parsed, TOY_SCHEMA)
        assert any(reason in problem for problem in problems), (plan, problems)
    for text in UNPARSABLE:
        parsed, error = parse_plan(text)
        assert parsed is None and error.startswith("not a plan"), text


def test_the_plan_model_has_every_field_and_enum_of_the_paper():
    schema = Plan.model_json_schema(by_alias=True)
    assert set(schema["properties"]) == {"anchors", "hops", "target", "risk_level"}
    definitions = schema["$defs"]
    assert {"var", "text", "label", "match_mode"} <= set(definitions["Anchor"]["properties"])
    assert {"from", "rel", "to_var", "to_label"} <= set(definitions["Hop"]["properties"])
    assert {"var", "labels", "relevance_text"} <= set(definitions["Target"]["properties"])
    assert set(schema["properties"]["risk_level"]["enum"]) == {"no_trade", "weak", "normal", "aggressive"}
    assert set(definitions["Anchor"]["properties"]["match_mode"]["enum"]) == {"name", "doc"}


def test_an_invalid_plan_leaves_the_partner_ranking_exactly():
    partner = np.array([4, 2, 9, 7])
    w_hat = graph_weight(False, 0, "no_trade", [2.0] * 5, [1.0] * 4)
    rows = fuse(np.zeros(0, np.int64), partner, w_hat, 1.0, 5).rows
    assert w_hat == 0 and rows.tolist() == partner.tolist()


def _toy_connection(nodes, edges, corpus="toy", source="rules") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE skb_nodes (corpus VARCHAR, source VARCHAR, skb_id VARCHAR, label VARCHAR)")
    con.execute("CREATE TABLE skb_edges (corpus VARCHAR, source VARCHAR, src VARCHAR, relation VARCHAR, dst VARCHAR)")
    con.executemany("INSERT INTO skb_nodes VALUES (?, ?, ?, ?)", [(corpus, source, i, label) for i, label in nodes])
    con.executemany("INSERT INTO skb_edges VALUES (?, ?, ?, ?, ?)", [(corpus, source, s, r, d) for s, r, d in edges])
    con.execute("INSERT INTO skb_edges VALUES ('other', 'rules', 'f1', 'director', 'p5')")  # another corpus: never read
    return con


def _random_plan(rng: random.Random, nodes, schema: Schema) -> tuple[Plan, dict[str, Linked]]:
    """A random valid plan: 1-2 anchors, up to 3 hops along the schema's patterns, random bindings and cosines."""
    by_label: dict[str, list[str]] = {}
    for skb_id, label in nodes:
        by_label.setdefault(label, []).append(skb_id)
    patterns = sorted(schema.patterns)
    anchors, hops, bindings, labels = [], [], {}, {}
    for number in range(rng.randint(1, 2)):
        label = rng.choice(sorted(by_label))
        var = f"A{number}"
        anchors.append({"var": var, "text": "t", "label": label, "match_mode": rng.choice(["name", "doc"])})
        ids = rng.sample(by_label[label], min(len(by_label[label]), rng.randint(1, 4)))
        bindings[var] = Linked(ids, [round(rng.uniform(0.1, 1.0), 6) for _ in ids])
        labels[var] = label
    for number in range(rng.randint(0, 3)):
        start = rng.choice(sorted(labels))
        options = [p for p in patterns if p[0] == labels[start]]
        if not options:
            break
        _, relation, label = rng.choice(options)
        to_var = f"V{number}"
        hops.append({"from": start, "rel": relation, "to_var": to_var, "to_label": label})
        labels[to_var] = label
    targets = rng.sample(sorted(labels), rng.randint(1, min(2, len(labels))))
    plan = Plan.model_validate({"anchors": anchors, "hops": hops, "target": {"var": targets[0], "vars": targets}})
    return plan, bindings


def _run_sql(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, float]:
    return dict(con.execute(sql).fetchall())


def _adjacency(nodes, edges) -> tuple[Adjacency, list[str]]:
    """The matcher's adjacency of a toy SKB (its nodes sorted by id, as the builders write them), and the ids by position."""
    ordered = sorted(nodes)
    table = pa.table({"skb_id": [i for i, _ in ordered], "label": [label for _, label in ordered]})
    return Adjacency.of(table, pa.table({k: [e[i] for e in edges] for i, k in enumerate(("src", "relation", "dst"))})), [i for i, _ in ordered]


def _matched(adjacency: Adjacency, ids: list[str], planned, emit: str, max_rows: int = 100_000) -> list[dict[str, float]]:
    """The matcher's answers for a batch of (plan, bindings), by id."""
    position = {skb_id: n for n, skb_id in enumerate(ids)}
    bound = [(plan, {var: (np.array([position[i] for i in b.ids], np.int64), np.array(b.scores)) for var, b in bindings.items()}) for plan, bindings in planned]
    return [{ids[p]: s for p, s in zip(*found, strict=True)} for found in execute(adjacency, bound, emit, max_rows, 30.0)]


def _assert_executors_equal_reference(con, nodes, edges, schema, plans: int, seed: int, corpus: str, source: str) -> int:
    """The SQL and the matcher (the whole batch in one call, and each plan alone) give the reference's
    scores to the bit; capped at two matches per group, the matcher keeps what the SQL keeps."""
    rng = random.Random(seed)
    graph = Graph([i for i, _ in nodes], [label for _, label in nodes], edges)
    adjacency, ids = _adjacency(nodes, edges)
    planned = [_random_plan(rng, nodes, schema) for _ in range(plans)]
    non_empty = 0
    for emit in ("target", "path"):
        batch = _matched(adjacency, ids, planned, emit)
        capped = _matched(adjacency, ids, planned, emit, max_rows=2)
        for (plan, bindings), got, few in zip(planned, batch, capped, strict=True):
            assert check(plan, schema) == [], plan
            expected = reference(plan, bindings, graph, emit)
            assert _run_sql(con, compile_sql(plan, bindings, corpus, source, emit)) == expected, (plan, emit)
            assert got == expected == _matched(adjacency, ids, [(plan, bindings)], emit)[0], (plan, emit)
            assert few == _run_sql(con, compile_sql(plan, bindings, corpus, source, emit, max_rows=2)), (plan, emit)
            non_empty += bool(got)
    return non_empty


def test_matcher_and_compiled_sql_equal_the_reference_executor_on_200_random_plans():
    con = _toy_connection(TOY_NODES, TOY_EDGES)
    assert _assert_executors_equal_reference(con, TOY_NODES, TOY_EDGES, TOY_SCHEMA, 200, seed=0, corpus="toy", source="rules") > 200


def test_a_hand_checked_plan_scores_the_sum_of_anchor_cosines_best_path():
    con = _toy_connection(TOY_NODES, TOY_EDGES)
    plan = Plan.model_validate(
        {"anchors": [_anchor("A", "x", "film"), _anchor("B", "y", "date")], "hops": [_hop("A", "director", "P", "person"), _hop("P", "date of birth", "B", "date")], "target": {"var": "P"}}
    )
    bindings = {"A": Linked(["f1", "f4"], [0.9, 0.8]), "B": Linked(["d1"], [0.5])}
    got = _run_sql(con, compile_sql(plan, bindings, "toy", "rules", "target"))
    # f1 -director- p1 -born- d1: 0.9 + 0.5; f4 -director- p3 -born- d1: 0.8 + 0.5; f4 -director- p4 has no date
    assert got == pytest.approx({"p1": 1.4, "p3": 1.3}, abs=1e-12)
    path = _run_sql(con, compile_sql(plan, bindings, "toy", "rules", "path"))
    assert path == pytest.approx({"f1": 1.4, "p1": 1.4, "d1": 1.4, "f4": 1.3, "p3": 1.3}, abs=1e-12)
    adjacency, ids = _adjacency(TOY_NODES, TOY_EDGES)
    assert _matched(adjacency, ids, [(plan, bindings)], "target") == [got] and _matched(adjacency, ids, [(plan, bindings)], "path") == [path]


def test_linking_keeps_the_top_k_within_tau_of_the_best():
    cosines = np.array([0.9, 0.86, 0.5, 0.85], dtype=np.float32)
    assert link(cosines, k=5, tau=0.95).tolist() == [0, 1]  # 0.85 < 0.95 * 0.9
    assert link(cosines, k=1, tau=0.0).tolist() == [0]
    assert link(cosines, k=10, tau=0.5).tolist() == [0, 1, 3, 2]
    assert link(-cosines, k=5, tau=0.9).tolist() == []  # nothing is similar
    tied = np.array([0.1, 0.7, 0.3, 0.7, 0.7, 0.2], dtype=np.float32)
    assert link(tied, k=2, tau=0.0).tolist() == [1, 3]  # ties: the earlier, also across the partition's cut


def test_spider_schema_graph_counts_and_sql_equals_reference(datasets_dir):
    from graphlake.warehouse.readers.base import ReadRequest
    from graphlake.warehouse.readers.sql_schemas import read_spider

    ingested = read_spider(ReadRequest(datasets_dir / "spider"))
    nodes = pa.table({"doc_id": ingested.documents.column("doc_id"), "node_id": pa.array([f"{d}#0" for d in ingested.documents.column("doc_id").to_pylist()])})
    skb = sql_schema(ingested.documents, nodes, ingested.foreign_keys)
    columns = sum(len(json.loads(meta)["columns"]) for meta in ingested.documents.column("metadata").to_pylist())
    relations = [relation for _, relation, _, _ in set(skb.edges)]
    assert relations.count("HAS_COLUMN") == columns
    assert relations.count("FOREIGN_KEY") == ingested.foreign_keys.num_rows  # one per declaration, duplicates kept
    assert relations.count("HAS_TABLE") == ingested.documents.num_rows
    labelled = [(n["skb_id"], n["label"]) for n in skb.nodes.values()]
    edges = [(s, r, d) for s, r, d, _ in skb.edges]
    schema = Schema.of([(skb.nodes[s]["label"], r, skb.nodes[d]["label"]) for s, r, d in edges], {label for _, label in labelled})
    assert _assert_executors_equal_reference(_toy_connection(labelled, edges, "spider", "sql_schema"), labelled, edges, schema, 50, 1, "spider", "sql_schema") > 0


def _wiki_tables():
    passages = [
        ("d1", "Free Guy", "Free Guy is a 2021 American action comedy film directed by Shawn Levy."),
        ("d2", "Shawn Levy", "Shawn Levy (born July 23, 1968) is a Canadian film director and producer."),
        ("d3", "Henrik Selberg", "Henrik Selberg (1906 – 1993) was a Norwegian musician. He was the son of Ole Selberg."),
        ("d4", "Ole Selberg", "Ole Selberg (born 1877 in Flora) was a Norwegian priest. He married Anna Olsen."),
    ]
    documents = pa.table({"doc_id": [p[0] for p in passages], "title": [p[1] for p in passages], "text": [p[2] for p in passages]})
    nodes = pa.table({"node_id": [f"{p[0]}#0" for p in passages], "doc_id": [p[0] for p in passages], "text": [p[2] for p in passages]})
    return documents, nodes


def test_wiki_rules_types_passages_and_links_relations_from_text_alone():
    documents, nodes = _wiki_tables()
    skb = wiki_rules(documents, nodes)
    labels = {skb_id: node["label"] for skb_id, node in skb.nodes.items()}
    assert labels["d1#0"] == "film" and labels["d2#0"] == "person" and labels["d3#0"] == "person"
    edges = {(s, r, d) for s, r, d, _ in skb.edges}
    assert ("d1#0", "director", "d2#0") in edges  # an object that is a passage's title is that passage
    assert ("d3#0", "father", "d4#0") in edges
    assert ("d2#0", "date of birth", "date:1968-07-23") in edges
    assert ("d2#0", "country of citizenship", "country:canada") in edges
    assert ("d4#0", "place of birth", "place:flora") in edges
    assert ("d4#0", "spouse", "person:anna olsen") in edges
    assert ("d1#0", "publication date", "date:2021") in edges


def test_the_skb_builders_read_no_question(tmp_path):
    """Built through the lake with no queries table at all: nothing but passages and schemas is read."""
    from graphlake.retrieval.index.skb import build
    from graphlake.warehouse.storage import LakeStorage

    lake = LakeStorage(tmp_path)
    documents, nodes = _wiki_tables()
    lake.write("documents", {"corpus": "w"}, documents.append_column("metadata", pa.array([None] * 4, pa.string())))
    lake.write(
        "nodes",
        {"corpus": "w"},
        nodes.append_column("chunk_idx", pa.array([0] * 4, pa.int32()))
        .append_column("start", pa.array([0] * 4, pa.int32()))
        .append_column("end", pa.array([1] * 4, pa.int32()))
        .append_column("content_hash", pa.array(["h"] * 4)),
    )
    assert not lake.has("queries", {"corpus": "w"})
    built = build(lake, "w", "wiki_rules", None)
    assert built.tables()[1].num_rows == len(set(wiki_rules(*_wiki_tables()).edges))
    with pytest.raises(Exception, match="queries"):
        build(lake, "w", "wiki_evidence", None)  # the oracle is the one source that reads questions


def test_an_skb_keeps_the_first_description_and_one_edge_per_provenance():
    skb = SKB()
    skb.value("country", "Canada")
    skb.value("country", "canada")
    skb.edge("a", "r", "b", "x")
    skb.edge("a", "r", "b", "x")
    skb.edge("a", "r", "b", "y")
    nodes, edges = skb.tables()
    assert nodes.column("name").to_pylist() == ["Canada"] and edges.num_rows == 2


def test_the_rules_planners_keep_a_passage_long_question_within_a_plans_bounds():
    from graphlake.kernels.plan.plans import MAX_ANCHORS, MAX_TEXT
    from graphlake.kernels.plan.rules import entities_plan, sql_plan, wiki_plan

    names = [f"Station {chr(65 + i)}ardmoor" for i in range(14)]
    question = "Which survey visited " + ", ".join(names) + " and " + "what else it logged " * 40 + "?"
    schema = Schema.of([("person", "MENTIONS", "passage"), ("org", "MENTIONS", "passage"), ("passage", "MENTIONS", "person")], {"person", "org", "passage"})
    plans = [
        entities_plan(question, [(name, "ORG") for name in names], schema),
        wiki_plan(question, schema, lambda span: "person"),
        sql_plan(question),
    ]
    for plan in plans:
        assert Plan.model_validate(plan.model_dump(by_alias=True)) == plan  # within every bound
        assert len(plan.anchors) <= MAX_ANCHORS and all(len(a.text) <= MAX_TEXT for a in plan.anchors)
        assert len(plan.target.relevance_text) <= MAX_TEXT and plan.target.relevance_text.split()[-1] in question.split()  # cut at a word
    assert len(plans[0].anchors) == MAX_ANCHORS and [a.text for a in plans[0].anchors] == names[:MAX_ANCHORS]


def test_a_plan_past_its_bound_fails_alone_and_the_batch_keeps_the_rest(monkeypatch):
    import graphlake.kernels.plan.match as match

    adjacency, ids = _adjacency(TOY_NODES, TOY_EDGES)
    small = (Plan.model_validate({"anchors": [_anchor("A", "x", "film")], "hops": [_hop("A", "director", "T", "person")], "target": {"var": "T"}}), {"A": Linked(["f1"], [0.9])})
    wide = (
        Plan.model_validate({"anchors": [_anchor("A", "x", "film")], "hops": [_hop("A", "director", "T", "person")], "target": {"var": "T"}}),
        {"A": Linked(["f1", "f2", "f3", "f4"], [0.9, 0.8, 0.7, 0.6])},
    )
    monkeypatch.setattr(match, "MAX_PARTIAL_MATCHES", 2)  # f1..f4 reach five directors: past the bound; f1 reaches one
    position = {skb_id: n for n, skb_id in enumerate(ids)}
    bound = [(plan, {v: (np.array([position[i] for i in b.ids]), np.array(b.scores)) for v, b in bindings.items()}) for plan, bindings in (small, wide, small)]
    first, failed, last = match.execute(adjacency, bound, "target", 100_000, 30.0)
    assert "past 2 partial paths" in failed
    assert {ids[p]: s for p, s in zip(*first, strict=True)} == {ids[p]: s for p, s in zip(*last, strict=True)} == {"p1": 0.9}
    (late,) = match.execute(adjacency, bound[:1], "target", 100_000, -1.0)  # a deadline already passed
    assert late == "the plan's matching ran past its time"


def test_an_skb_artefact_without_adjacency_is_an_older_layout_that_a_build_replaces(tmp_path):
    """A lake built before the SKB stored its adjacency: ``query --build`` and the reindex planner see its
    ``skb`` as never written, so they build it again, rather than a query failing on it."""
    from graphlake.retrieval.learned_kinds import INDEX_KINDS
    from graphlake.warehouse.storage import LakeStorage

    lake, stored = LakeStorage(tmp_path), INDEX_KINDS.kind("skb").stored
    lake.write_artifact("skb", {"corpus": "c"}, lambda folder: (folder / "sources.json").write_text("{}"))
    assert lake.artifact_written_at("skb", {"corpus": "c"}) is not None and stored.written_at(lake, "c") is None
    adjacency, _ = _adjacency(TOY_NODES, TOY_EDGES)
    lake.write_artifact("skb", {"corpus": "c"}, lambda folder: adjacency.save(folder / "adjacency-entities.npz"))
    assert stored.written_at(lake, "c") is not None
