"""Options mean what they say, and every reading command speaks JSON in its documented shape."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.retrieval.evaluation import metrics_from_run
from graphlake.warehouse.storage import LakeStorage


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_eval_takes_any_positive_cutoff_and_refuses_others(reads_demo):
    result = invoke("eval", "--corpus", "demo", "--methods", "bm25", "--k", "2,3,4,10", "--json")
    assert result.exit_code == 0, result.output
    assert "demo: up to date: the stored runs of bm25 are current" in result.stderr  # the demo evaluated it: nothing to run, said so
    [row] = json.loads(result.stdout)
    recall = [row["metrics"][f"recall@{k}"] for k in (2, 3, 4, 10)]
    assert recall == sorted(recall) and {"ndcg@3", "hit@4", "pr@3", "tr@10"} <= set(row["metrics"])
    recomputed = metrics_from_run(LakeStorage(reads_demo.home), "demo", "bm25", "test", ["recall@10", "recall@2"])
    assert recomputed == pytest.approx({"recall@10": row["metrics"]["recall@10"], "recall@2": row["metrics"]["recall@2"]})  # as stored
    for bad in ("0,3", "3,x", ""):
        refused = invoke("eval", "--corpus", "demo", "--methods", "bm25", "--k", bad)
        assert refused.exit_code == 1 and "--k takes comma-separated positive whole numbers" in refused.stderr


def test_chunk_overlap_alone_applies_to_the_formats_chunk_size(lake, tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": f"Text number {i}."}) + "\n" for i in range(3)), encoding="utf-8")
    assert invoke("ingest", "jsonl", str(source), "--corpus", "mine", "--chunk-overlap", "8").exit_code == 0
    [spec] = [c for c in json.loads(invoke("corpora", "--json").stdout) if c["name"] == "mine"]
    assert spec["chunking"] == {"size": 256, "overlap": 8}  # jsonl's own size, the overlap asked for
    (tmp_path / "beir").mkdir()
    refused = invoke("ingest", "beir", str(tmp_path / "beir"), "--corpus", "passages", "--chunk-overlap", "8")
    assert refused.exit_code == 1 and "--chunk-overlap needs --chunk-size" in refused.stderr
    assert "passages" not in {c["name"] for c in json.loads(invoke("corpora", "--json").stdout)}


def test_flags_read_as_flags_in_help():
    for command in ("eval", "sql", "query", "corpora", "trec", "compare"):
        text = invoke(command, "--help").stdout
        assert "--json " in text and "<bool>" not in text and "BOOLEAN" not in text, command


HIT = {"rank", "node_id", "doc_id", "title", "text", "score", "relevance", "fresh", "corpus", "source", "start", "end", "terms", "snippet", "metadata"}
HIT |= {"chunk", "prev_node_id", "next_node_id", "spans", "context", "context_start", "context_end"}  # its place in the document, the context asked


def test_every_reading_command_prints_its_json_shape(reads_demo):
    query = json.loads(invoke("query", "--corpus", "demo", "--method", "bm25", "--k", "3", "--json", "BenthoCam sled").stdout)
    assert query["corpus"] == "demo" and query["method"] == "bm25" and query["latency_ms"] >= 0 and query["snapshot"] >= 1 and query["calibration"].startswith("isotonic")
    assert [hit["rank"] for hit in query["hits"]] == [1, 2, 3] and set(query["hits"][0]) == HIT
    corpora = json.loads(invoke("corpora", "--json").stdout)
    assert corpora[0]["name"] == "demo" and corpora[0]["chunking"] == {"size": 64, "overlap": 12}
    assert corpora[0]["linking"] == {"proximity": "contextual", "corpus_graph": ["citation"], "skb_sources": ["entities"]}
    trec = json.loads(invoke("trec", "--corpus", "demo", "--method", "bm25", "--json").stdout)
    assert set(trec[0]) == {"query_id", "doc_id", "rank", "score", "tag"} and trec[0]["rank"] == 1 and trec[0]["tag"] == "graphlake-bm25"
    assert len(trec) == len(invoke("trec", "--corpus", "demo", "--method", "bm25").stdout.splitlines())
    compare = json.loads(invoke("compare", "--corpus", "demo", "--baseline", "bm25", "--method", "rrf", "--json").stdout)
    assert {"difference", "low", "high", "p_value", "queries"} <= set(compare) and compare["split"] == "test"
    [evaluated] = json.loads(invoke("eval", "--corpus", "demo", "--methods", "rrf", "--json").stdout)
    assert evaluated["split"] == "test" and set(evaluated["latency_ms"]) == {"p50", "p95", "mean"}
    rows = json.loads(invoke("sql", "select count(*) as n from nodes where corpus = 'demo'", "--json").stdout)
    assert rows[0]["n"] > 0
