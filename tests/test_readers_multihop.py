"""Multi-hop readers: content-hash passages shared across questions, gold per shape, located errors, real counts."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from graphlake.warehouse.readers.base import Ingested, IngestError, ReadRequest, passage_id
from graphlake.warehouse.readers.multihop import read_2wiki, read_hipporag, read_hotpotqa, read_ircot, read_musique


def write_json(path: Path, data: object) -> Path:
    text = json.dumps(data)
    path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
    return path


def write_jsonl(path: Path, records: list) -> Path:
    text = "".join(json.dumps(record) + "\n" for record in records)
    path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
    return path


def gold(result: Ingested) -> set[tuple[str, str]]:
    return {(row["query_id"], row["doc_id"]) for row in result.qrels.to_pylist()}


def counts(result: Ingested) -> tuple[int, int, int]:
    return result.documents.num_rows, result.queries.num_rows, result.qrels.num_rows


def query_metadata(result: Ingested, query_id: str) -> dict:
    (row,) = [row for row in result.queries.to_pylist() if row["query_id"] == query_id]
    return json.loads(row["metadata"])


# ---------------------------------------------------------------- fixtures in each format

HOTPOT = [
    {
        "_id": "h1",
        "question": "What is A?",
        "answer": "x",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [["A", 0], ["A", 1], ["Shared", 0]],
        "context": [["A", ["A is x.", " It is y."]], ["B", ["B is z."]], ["Shared", ["S is shared."]]],
    },
    {
        "_id": "h2",
        "question": "What is C?",
        "answer": "c",
        "type": "comparison",
        "level": "easy",
        "supporting_facts": [["C", 0]],
        "context": [["Shared", ["S is shared."]], ["C", ["C is c."]]],
        "reranked_ret_res": [["B", 0.9]],
    },
]


@pytest.mark.parametrize("name", ["hotpot.json", "hotpot.json.gz"])
def test_hotpotqa_list_and_gzipped_lines(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    write_json(path, HOTPOT) if name.endswith(".json") else write_jsonl(path, HOTPOT)  # MIGRES stores lines
    result = read_hotpotqa(ReadRequest(path))
    assert counts(result) == (4, 2, 3)  # "Shared" stored once for both questions
    assert gold(result) == {
        ("h1", passage_id("A", "A is x. It is y.")),
        ("h1", passage_id("Shared", "S is shared.")),
        ("h2", passage_id("C", "C is c.")),
    }
    assert query_metadata(result, "h1") == {"answer": "x", "type": "bridge", "level": "hard"}
    assert set(result.queries.column("split").to_pylist()) == {"dev"}
    assert read_hotpotqa(ReadRequest(path, split="train")).qrels.column("split").to_pylist() == ["train"] * 3


def test_2wiki_joins_with_spaces_and_skips_questions_without_context(tmp_path: Path) -> None:
    records = [
        {
            "_id": "w1",
            "type": "compositional",
            "question": "Who directed D?",
            "answer": "E",
            "context": [  # the same paragraph twice, as in some 2Wiki contexts
                ["D", ["D is a film.", "It was directed by E."]],
                ["E", ["E is a director."]],
                ["D", ["D is a film.", "It was directed by E."]],
            ],
            "supporting_facts": [["D", 1], ["E", 0]],
            "evidences": [["D", "director", "E"]],
            "entity_ids": "Q1_Q2",
            "qa_pairs": [["Who?", "E"]],
            "explanation": "model output",
        },
        {"_id": "w2", "type": "comparison", "question": "No context?", "answer": "no", "supporting_facts": [["D", 0]], "evidences": []},
        {"_id": "w3", "type": "comparison", "question": "Empty context?", "answer": "no", "context": [], "supporting_facts": []},
    ]
    result = read_2wiki(ReadRequest(write_json(tmp_path / "wikihop_train.json", records)))
    assert counts(result) == (2, 1, 2)
    assert gold(result) == {("w1", passage_id("D", "D is a film. It was directed by E.")), ("w1", passage_id("E", "E is a director."))}
    assert result.notes == ["wikihop_train.json: 2 questions without context skipped"]
    assert query_metadata(result, "w1") == {"answer": "E", "type": "compositional", "evidences": [["D", "director", "E"]]}
    assert result.queries.column("split").to_pylist() == ["train"]


def test_ircot_gzipped_with_a_shared_paragraph(tmp_path: Path) -> None:
    def paragraph(title: str, text: str, supporting: bool) -> dict:
        return {"id": "0", "title": title, "paragraph_text": text, "is_supporting": supporting}

    records = [
        {
            "question_id": "i1",
            "question_text": "Q1?",
            "answers_objects": [{"spans": ["a"]}],
            "contexts": [paragraph("P", "p text", True), paragraph("S", "s text", False)],
        },
        {
            "question_id": "i2",
            "question_text": "Q2?",
            "answers_objects": [{"spans": ["b"]}],
            "contexts": [paragraph("S", "s text", True), paragraph("R", "r text", False)],
        },
    ]
    result = read_ircot(ReadRequest(write_jsonl(tmp_path / "dev_subsampled.jsonl.gz", records)))
    assert counts(result) == (3, 2, 2)
    assert gold(result) == {("i1", passage_id("P", "p text")), ("i2", passage_id("S", "s text"))}
    assert query_metadata(result, "i2") == {"answers_objects": [{"spans": ["b"]}]}


def musique_record(query_id: str, paragraphs: list[tuple[str, str, bool]]) -> dict:
    return {
        "id": query_id,
        "question": f"question {query_id}?",
        "answer": "a",
        "answer_aliases": ["A"],
        "answerable": True,
        "question_decomposition": [{"id": 1, "question": "sub?", "answer": "a", "paragraph_support_idx": 0}],
        "paragraphs": [{"idx": i, "title": t, "paragraph_text": x, "is_supporting": s} for i, (t, x, s) in enumerate(paragraphs)],
    }


MUSIQUE = [
    musique_record("m1", [("Paris", "Paris is the capital of France.", True), ("Paris", "Paris is a city in Texas.", False)]),
    musique_record("m2", [("Paris", "Paris is a city in Texas.", True), ("Lyon", "Lyon is in France.", False)]),
]


def test_musique_repeated_title_gold_by_text(tmp_path: Path) -> None:
    result = read_musique(ReadRequest(write_jsonl(tmp_path / "musique_ans_v1.0_dev.jsonl", MUSIQUE)))
    assert counts(result) == (3, 2, 2)
    assert gold(result) == {
        ("m1", passage_id("Paris", "Paris is the capital of France.")),
        ("m2", passage_id("Paris", "Paris is a city in Texas.")),
    }
    assert query_metadata(result, "m1")["answer_aliases"] == ["A"]


def test_hipporag_folder_with_dict_corpus(tmp_path: Path) -> None:
    corpus = {"A": ["A is x.", " It is y."], "B": ["B is z."], "C": ["C is c."]}
    write_json(tmp_path / "toy_train_corpus.json.gz", corpus)
    queries = [{"_id": "q1", "question": "A and C?", "answer": "x", "supporting_facts": [["A", 0], ["C", 0]], "context": []}]
    write_json(tmp_path / "toy_train.json", queries)
    result = read_hipporag(ReadRequest(tmp_path))
    assert counts(result) == (3, 1, 2)
    assert gold(result) == {("q1", passage_id("A", "A is x. It is y.")), ("q1", passage_id("C", "C is c."))}
    assert result.queries.column("split").to_pylist() == ["train"]


def test_hipporag_list_corpus_with_musique_queries_and_ambiguous_titles(tmp_path: Path) -> None:
    corpus = [
        {"idx": 0, "title": "Paris", "text": "Paris is the capital of France."},
        {"idx": 1, "title": "Paris", "text": "Paris is a city in Texas."},
        {"idx": 2, "title": "Lyon", "text": "Lyon is in France."},
        {"idx": 3, "title": "Lyon", "text": "Lyon is in France."},
    ]
    path = write_json(tmp_path / "musique_corpus.json", corpus)
    musique = read_hipporag(ReadRequest(path, write_json(tmp_path / "musique.json", MUSIQUE)))
    assert counts(musique) == (3, 2, 2)
    assert gold(musique) == {
        ("m1", passage_id("Paris", "Paris is the capital of France.")),
        ("m2", passage_id("Paris", "Paris is a city in Texas.")),
    }
    assert musique.notes == ["musique_corpus.json: 1 duplicate passages stored once"]

    titles = [{"_id": "t1", "question": "Which Paris?", "supporting_facts": [["Paris", 0], ["Lyon", 0]]}]
    by_title = read_hipporag(ReadRequest(path, write_json(tmp_path / "paris.json", titles)))
    assert gold(by_title) == {
        ("t1", passage_id("Paris", "Paris is the capital of France.")),
        ("t1", passage_id("Paris", "Paris is a city in Texas.")),
        ("t1", passage_id("Lyon", "Lyon is in France.")),
    }
    assert by_title.notes[-1] == "paris.json: 1 supporting titles name several passages of musique_corpus.json; all taken as gold"

    corpus_only = read_hipporag(ReadRequest(path))
    assert counts(corpus_only) == (3, 0, 0)


# ---------------------------------------------------------------- bad input names file, line or id


def test_malformed_ircot_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "dev.jsonl"
    path.write_text('{"question_id": "i1", "question_text": "Q?", "contexts": []}\n{"question_id": "i2", \n')
    with pytest.raises(IngestError, match=re.escape(f"{path}:2: malformed JSON")):
        read_ircot(ReadRequest(path))


def test_supporting_title_missing_from_context_names_question(tmp_path: Path) -> None:
    records = [dict(HOTPOT[0]), dict(HOTPOT[1], supporting_facts=[["Nowhere", 0]])]
    path = write_json(tmp_path / "hotpot.json", records)
    with pytest.raises(IngestError, match=re.escape(f"{path} (id 'h2'): supporting title 'Nowhere' is not in the question's context")):
        read_hotpotqa(ReadRequest(path))


def test_non_utf8_jsonl_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "musique.jsonl"
    path.write_bytes(json.dumps(MUSIQUE[0]).encode() + b"\n" + json.dumps(MUSIQUE[1]).encode().replace(b"Lyon", b"Ly\xffon") + b"\n")
    with pytest.raises(IngestError, match=re.escape(f"{path}:2: not valid UTF-8 (byte 0xff")):
        read_musique(ReadRequest(path))


def test_empty_paragraph_names_the_record(tmp_path: Path) -> None:
    record = {"question_id": "i1", "question_text": "Q?", "contexts": [{"title": "P", "paragraph_text": "  ", "is_supporting": True}]}
    path = write_jsonl(tmp_path / "dev.jsonl", [record])
    with pytest.raises(IngestError, match=re.escape(f"{path}:1 (id 'i1'): paragraph 'P' has no text")):
        read_ircot(ReadRequest(path))
    hotpot = write_json(tmp_path / "hotpot.json", [dict(HOTPOT[0], context=[["A", [""]]])])
    with pytest.raises(IngestError, match=re.escape(f"{hotpot} (id 'h1'): paragraph 'A' has no text")):
        read_hotpotqa(ReadRequest(hotpot))


def test_hipporag_gold_title_absent_from_corpus_names_query(tmp_path: Path) -> None:
    corpus = write_json(tmp_path / "toy_corpus.json", [{"title": "A", "text": "A is x."}])
    queries = write_json(tmp_path / "toy.json", [{"_id": "q9", "question": "B?", "supporting_facts": [["B", 0]]}])
    with pytest.raises(IngestError, match=re.escape(f"{queries} (id 'q9'): supporting title 'B' is not in toy_corpus.json")):
        read_hipporag(ReadRequest(corpus, queries))


# ---------------------------------------------------------------- the staged benchmark files

REAL = [
    # reader, path under datasets_dir, queries, unique documents, gold pairs, notes
    (read_ircot, "hotpotqa/ircot/processed_data/hotpotqa/dev_subsampled.jsonl.gz", 500, 4858, 1000, []),
    (read_hotpotqa, "hotpotqa/migres/data/hotpot.json.gz", 200, 1971, 400, []),
    (read_2wiki, "2wikimultihopqa/migres/data/wikihop_train_preprocess.json.gz", 500, 3112, 1184, []),
    (read_2wiki, "2wikimultihopqa/migres/data/wikihop.json.gz", 164, 1294, 414, ["wikihop.json.gz: 36 questions without context skipped"]),
    (read_hipporag, "hotpotqa/hipporag/data", 100, 994, 200, []),
    (read_hipporag, "2wikimultihopqa/hipporag_corpus_only/reproduce/dataset/2wikimultihopqa_corpus.json.gz", 0, 6119, 0, []),
]


@pytest.mark.datasets
@pytest.mark.parametrize(("reader", "relative", "queries", "documents", "pairs", "notes"), REAL, ids=[case[1].split("/")[-1] for case in REAL])
def test_real_counts(datasets_dir: Path, reader, relative: str, queries: int, documents: int, pairs: int, notes: list[str]) -> None:
    path = datasets_dir / relative
    if not path.exists():
        pytest.skip(f"{relative} not found at {path}")
    result = reader(ReadRequest(path))
    assert (result.queries.num_rows, result.documents.num_rows, result.qrels.num_rows) == (queries, documents, pairs)
    assert result.notes == notes
