"""Metadata filters as an application uses them: every default method returns only the documents a
filter allows, checked against an SQL oracle over the stored documents for random filters, never
fewer than ``k`` while more exist; bad filters are refused in one line by the API, the server and
the command line."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import duckdb
import httpx
import pytest
import yaml
from typer.testing import CliRunner

from graphlake import retrieval
from graphlake.api import GraphLake, RequestError
from graphlake.cli import app
from graphlake.retrieval.core import unfiltered
from graphlake.retrieval.filters import FilterError, parse_filter
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.storage import LakeStorage
from served import KEY

K = 10
# every default method, and the two approximate indexes with their filtered walks forced (the demo is
# small enough that a filter always leaves fewer nodes than the exact-scan threshold)
METHODS = [(name, {}) for name in ("bm25", "dense", "dense_hnsw", "splade", "rrf", "graph_rrf", "grapher_gcs", "ap_three", "grasp_fused", "graphlake_ltr")]
METHODS += [("dense_hnsw", {"filter_exact_below": 0}), ("ap_three", {"filter_exact_below": 0})]
EXACT = {"bm25", "dense", "splade"}  # filtered, exactly their unfiltered ranking restricted to the allowed nodes
WALKS = {"graph_rrf"}  # rank only the passages their walk reaches: no count to expect
SCALAR, LISTED = "year", "authors"
DEFAULTS = yaml.safe_load((Path(retrieval.__file__).parent / "methods.yaml").read_text())["use"]  # the methods a lake runs unless told


def random_filter(rng: random.Random, authors: list[str], doc_ids: list[str], depth: int = 0) -> dict:
    """A random filter over the demo's metadata: numbers, lists, the built-in doc_id, and/or/not."""
    shape = rng.random()
    if depth < 2 and shape < 0.35:
        return {rng.choice(["and", "or"]): [random_filter(rng, authors, doc_ids, depth + 1) for _ in range(rng.randint(2, 3))]}
    if depth < 2 and shape < 0.45:
        return {"not": random_filter(rng, authors, doc_ids, depth + 1)}
    kind = rng.choice(["range", "year", "author", "authors", "not_author", "doc_id", "cites", "prefix", "contains"])
    if kind == "range":
        low = rng.randint(2013, 2023)
        return {"field": SCALAR, "gte": low, "lt": low + rng.randint(1, 4)}
    if kind == "year":
        return {"field": SCALAR, rng.choice(["eq", "ne"]): rng.randint(2014, 2023)}
    if kind == "author":
        return {"field": LISTED, "eq": rng.choice(authors)}
    if kind == "authors":
        return {"field": LISTED, "in": rng.sample(authors, 3)}
    if kind == "not_author":
        return {"field": LISTED, "ne": rng.choice(authors)}
    if kind == "cites":  # a list some documents leave empty: exists is false for them
        return {"field": "cites", "exists": rng.random() < 0.5}
    if kind == "prefix":
        return {"field": "doc_id", "prefix": rng.choice(["d0", "d1", "d2", "d3"])}
    if kind == "contains":
        return {"field": "title", "contains": rng.choice(["Survey", "Sled", "the", "of"])}
    return {"field": "doc_id", "in": rng.sample(doc_ids, 4)}


def oracle_sql(expression: dict) -> str:
    """The filter as SQL over ``documents``: the oracle, written apart from the implementation."""
    for group in ("and", "or"):
        if group in expression:
            return "(" + f" {group.upper()} ".join(oracle_sql(part) for part in expression[group]) + ")"
    if "not" in expression:
        return f"(NOT {oracle_sql(expression['not'])})"
    field, tests = expression["field"], [(op, value) for op, value in expression.items() if op != "field"]
    quoted = lambda value: f"'{value}'" if isinstance(value, str) else str(value)  # noqa: E731
    parts = []
    for op, value in tests:
        if field == LISTED:
            listed = "CAST(json_extract(metadata, '$.authors') AS VARCHAR[])"
            wanted = "[" + ", ".join(quoted(v) for v in (value if op == "in" else [value])) + "]"
            parts.append(f"NOT list_has_any({listed}, {wanted})" if op == "ne" else f"list_has_any({listed}, {wanted})")
            continue
        if op == "exists":
            parts.append(f"{'' if value else 'NOT '}coalesce(json_array_length(json_extract(metadata, '$.cites')) > 0, false)")
            continue
        if op in ("prefix", "contains"):
            parts.append(f"{'starts_with' if op == 'prefix' else 'contains'}({field}, {quoted(value)})")
            continue
        column = "doc_id" if field == "doc_id" else "TRY_CAST(json_extract_string(metadata, '$.year') AS DOUBLE)"
        sql_op = {"eq": "=", "ne": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}.get(op)
        parts.append(f"{column} IN ({', '.join(quoted(v) for v in value)})" if op == "in" else f"{column} {sql_op} {quoted(value)}")
    return "(" + " AND ".join(f"coalesce({part}, false)" for part in parts) + ")"


def test_every_default_method_returns_only_what_a_random_filter_allows(demo_lake):
    home = demo_lake.home
    assert {name for name, _ in METHODS} == set(DEFAULTS), "a default method is not checked"
    storage = LakeStorage(home)
    documents = storage.read("documents", {"corpus": "demo"})
    nodes_of = {}
    for doc_id in storage.read("nodes", {"corpus": "demo"}).column("doc_id").to_pylist():
        nodes_of[doc_id] = nodes_of.get(doc_id, 0) + 1
    queries = [q["text"] for q in storage.read("queries", {"corpus": "demo"}).to_pylist() if q["split"] == "test"][:3]
    authors = sorted({a for m in documents.column("metadata").to_pylist() for a in json.loads(m).get("authors", [])})
    doc_ids = documents.column("doc_id").to_pylist()
    lake = GraphLake(home)
    unfiltered = {name: lake.search_batch("demo", name, queries, k=1000, group_by="chunk") for name in EXACT}  # nodes, as the indexes rank them
    rng = random.Random(55)
    sizes = []
    for _ in range(12):
        expression = random_filter(rng, authors, doc_ids)
        allowed = {row[0] for row in duckdb.sql(f"SELECT doc_id FROM documents WHERE {oracle_sql(expression)}").fetchall()}
        allowed_nodes = sum(nodes_of[d] for d in allowed)
        sizes.append(allowed_nodes)
        for name, overrides in METHODS:
            for i, result in enumerate(lake.search_batch("demo", name, queries, K, expression, group_by="chunk", **overrides)):
                found = [hit.doc_id for hit in result.hits]
                assert set(found) <= allowed, (name, overrides, expression, set(found) - allowed)
                if name in EXACT:  # the same scores; the same nodes but where ties at the cut may differ
                    expected = [hit for hit in unfiltered[name][i].hits if hit.doc_id in allowed][:K]
                    assert [round(h.score, 4) for h in result.hits] == [round(h.score, 4) for h in expected], (name, expression)
                    above = lambda hits: {h.node_id for h in hits if round(h.score, 4) > round(expected[-1].score, 4)}  # noqa: E731
                    assert above(result.hits) == above(expected), (name, expression)
                elif name not in WALKS:  # they search every node: as many as k, when that many are allowed
                    assert len(found) == min(K, allowed_nodes), (name, overrides, expression, len(found), allowed_nodes)
    assert min(sizes) == 0 and max(sizes) > 60 and len(set(sizes)) > 6, sizes  # empty, broad, and much between


def test_the_text_form_reads_as_the_json_form():
    text = 'year >= 2015 and year < 2020 and (authors = "Colm Dempsey" or doc_id in ["d01", "d02"]) and not draft = true'
    as_json = {
        "and": [
            {"field": "year", "gte": 2015},
            {"field": "year", "lt": 2020},
            {"or": [{"field": "authors", "eq": "Colm Dempsey"}, {"field": "doc_id", "in": ["d01", "d02"]}]},
            {"not": {"field": "draft", "eq": True}},
        ]
    }
    assert parse_filter(text).key() == parse_filter(as_json).key() == parse_filter(json.dumps(as_json)).key()
    assert parse_filter("authors not in ['A', 'B']").key() == parse_filter({"not": {"field": "authors", "in": ["A", "B"]}}).key()
    tests = {"and": [{"field": "year", "exists": True}, {"field": "title", "prefix": "A b"}, {"not": {"field": "cites", "exists": True}}, {"field": "title", "contains": "x"}]}
    assert parse_filter('year exists and title prefix "A b" and not cites exists and title contains x').key() == parse_filter(tests).key()
    for bad, said in (("year >=", "expected a value"), ("(year = 1", "expected ')'"), ({"field": "year", "gtee": 1}, "unknown key 'gtee'"), ({"and": []}, "non-empty list")):
        with pytest.raises(FilterError, match=re.escape(said)):
            parse_filter(bad)


BAD = [
    ("yaer >= 2016", "no document of corpus 'demo' has the field 'yaer'; did you mean year?"),
    ("year >= ", "expected a value, the filter ended"),
    ({"field": "year", "gte": True}, "a range needs a number or a string"),
    ({"or": [{"field": "year", "eq": [2016]}]}, "filter.or[0].eq: a number, a string or true/false"),
    ("not " * 40 + "year = 2016", "groups nested more than 32 deep"),  # hostile: no recursion without bound
    ('year >= "2016"', "year gte \"2016\": a string, but 'year' holds numbers in corpus 'demo'"),  # would match nothing
    ({"field": "authors", "prefix": 7}, "filter.prefix: Input should be a valid string"),
]


def test_bad_filters_are_refused_in_one_line_by_the_api_the_server_and_the_cli(served, reads_demo):
    lake = GraphLake(reads_demo.home)
    for given, said in BAD:
        with pytest.raises(RequestError) as refused:
            lake.search("demo", "rrf", "sled", filter=given)
        assert said in str(refused.value) and "\n" not in str(refused.value)
        answer = httpx.post(f"{served.url}/search", json={"corpus": "demo", "method": "rrf", "query": "sled", "filter": given}, headers={"X-API-Key": KEY})
        assert answer.status_code == 422 and said in answer.json()["error"], answer.text
    cli = CliRunner().invoke(app, ["query", "--corpus", "demo", "--filter", "yaer >= 2016", "sled"])
    assert cli.exit_code == 1 and "has the field 'yaer'" in cli.stderr and len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    methods = load_methods(reads_demo.home)  # a method that cannot filter refuses (GAR expands over the corpus graph); the defaults all can
    assert unfiltered(methods["gar"]).op == "gar" and not [name for name in DEFAULTS if unfiltered(methods[name]) is not None]
    with pytest.raises(RequestError, match="method 'gar' cannot filter: its gar operator"):
        lake.search("demo", "gar", "sled", filter="year > 2016")
