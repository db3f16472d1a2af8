"""Basic readers (BEIR, generic JSONL, a folder of files, the bundled demo): exact tables and located errors."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from graphlake.warehouse.corpora import DEMO_PATH
from graphlake.warehouse.readers import FORMATS
from graphlake.warehouse.readers.base import Ingested, IngestError, ReadRequest
from graphlake.warehouse.readers.beir import read as read_beir
from graphlake.warehouse.readers.files import read as read_files
from graphlake.warehouse.readers.jsonl import read as read_jsonl


def write_bytes(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if path.suffix.lower() == ".gz" else data)
    return path


def write_text(path: Path, text: str) -> Path:
    return write_bytes(path, text.encode())


def write_jsonl(path: Path, records: list) -> Path:
    return write_text(path, "".join(json.dumps(record) + "\n" for record in records))


def rows(table) -> list[dict]:
    return table.to_pylist()


def read_from(path: Path, **metadata) -> str:
    """A document's stored metadata: its own, and the file it was read from (what a hit cites)."""
    return json.dumps({**metadata, "source": str(path)}, sort_keys=True)


def by_id(result: Ingested, key: str = "query_id") -> dict[str, dict]:
    return {row[key]: row for row in result.queries.to_pylist()}


def located(path: Path, line: int | None = None) -> str:
    """Regex for the start of a located message: the exact file and, when given, the exact line."""
    return "^" + re.escape(str(path) if line is None else f"{path}:{line}") + r"\b"


# ---------------------------------------------------------------- BEIR

BEIR_CORPUS = [
    {"_id": "d1", "title": "Alpha", "text": "Alpha is the first letter.", "metadata": {"url": "http://a", "year": 2001}},
    {"_id": "d2", "title": "", "text": "Beta has no title."},
    {"_id": 3, "title": "Gamma", "text": "Gamma has a numeric id."},
]
BEIR_QUERIES = [
    {"_id": "q1", "text": "What is alpha?", "metadata": {"source": "test-set"}},
    {"_id": "q2", "text": "What is beta?"},
    {"_id": "q3", "text": "What is gamma?"},
    {"_id": "q4", "text": "Judged nowhere?"},
]


def beir_folder(root: Path, corpus_name: str = "corpus.jsonl") -> Path:
    write_jsonl(root / corpus_name, BEIR_CORPUS)
    write_jsonl(root / "queries.jsonl", BEIR_QUERIES)
    write_text(root / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\t3\t0\n\nq2\td2\t2\n")
    write_text(root / "qrels" / "train.tsv", "q3\t3\t1\n")
    return root


@pytest.mark.parametrize("corpus_name", ["corpus.jsonl", "corpus.jsonl.gz"])
def test_beir_documents_queries_splits_and_qrels(tmp_path: Path, corpus_name: str) -> None:
    folder = beir_folder(tmp_path, corpus_name)
    result = read_beir(ReadRequest(folder))
    assert rows(result.documents) == [
        {"doc_id": "d1", "title": "Alpha", "text": "Alpha is the first letter.", "metadata": '{"url": "http://a", "year": 2001}'},  # cited by its url
        {"doc_id": "d2", "title": "", "text": "Beta has no title.", "metadata": read_from(folder / corpus_name)},
        {"doc_id": "3", "title": "Gamma", "text": "Gamma has a numeric id.", "metadata": read_from(folder / corpus_name)},
    ]
    assert rows(result.queries) == [
        {"query_id": "q1", "text": "What is alpha?", "split": "test", "metadata": '{"source": "test-set"}'},
        {"query_id": "q2", "text": "What is beta?", "split": "test", "metadata": None},
        {"query_id": "q3", "text": "What is gamma?", "split": "train", "metadata": None},
        {"query_id": "q4", "text": "Judged nowhere?", "split": "test", "metadata": None},  # no split: held out
    ]
    assert rows(result.qrels) == [
        {"query_id": "q1", "doc_id": "d1", "relevance": 1, "split": "test"},
        {"query_id": "q1", "doc_id": "3", "relevance": 0, "split": "test"},
        {"query_id": "q2", "doc_id": "d2", "relevance": 2, "split": "test"},
        {"query_id": "q3", "doc_id": "3", "relevance": 1, "split": "train"},
    ]
    assert all(isinstance(value, int) for value in result.qrels.column("relevance").to_pylist())
    assert rows(result.foreign_keys) == []
    assert FORMATS["beir"] is read_beir


def test_beir_plain_corpus_is_preferred_to_gz(tmp_path: Path) -> None:
    beir_folder(tmp_path)
    write_jsonl(tmp_path / "corpus.jsonl.gz", [{"_id": "other", "text": "Never read."}])
    assert read_beir(ReadRequest(tmp_path)).documents.column("doc_id").to_pylist() == ["d1", "d2", "3"]


def test_beir_byte_order_mark_and_crlf(tmp_path: Path) -> None:
    beir_folder(tmp_path)
    corpus = tmp_path / "corpus.jsonl"
    write_bytes(corpus, b"\xef\xbb\xbf" + corpus.read_bytes())
    write_bytes(tmp_path / "qrels" / "test.tsv", b"\xef\xbb\xbfquery-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq2\td2\t2\r\n")
    result = read_beir(ReadRequest(tmp_path))
    assert result.documents.column("doc_id").to_pylist() == ["d1", "d2", "3"]
    assert [(r["query_id"], r["doc_id"], r["relevance"], r["split"]) for r in rows(result.qrels)] == [
        ("q1", "d1", 1, "test"),
        ("q2", "d2", 2, "test"),
        ("q3", "3", 1, "train"),
    ]


def test_beir_malformed_corpus_line(tmp_path: Path) -> None:
    beir_folder(tmp_path)
    corpus = tmp_path / "corpus.jsonl"
    write_text(corpus, corpus.read_text() + '{"_id": "d4", "text": \n')
    with pytest.raises(IngestError, match=located(corpus, 4) + ".*malformed JSON"):
        read_beir(ReadRequest(tmp_path))


def test_beir_malformed_line_in_gzipped_corpus(tmp_path: Path) -> None:
    beir_folder(tmp_path, "corpus.jsonl.gz")
    corpus = tmp_path / "corpus.jsonl.gz"
    write_text(corpus, '{"_id": "d1", "text": "ok"}\nnot json\n')
    with pytest.raises(IngestError, match=located(corpus, 2) + ".*malformed JSON"):
        read_beir(ReadRequest(tmp_path))


def test_beir_qrel_naming_unknown_document(tmp_path: Path) -> None:
    beir_folder(tmp_path)
    qrels = write_text(tmp_path / "qrels" / "train.tsv", "q3\t3\t1\nq3\tmissing\t1\n")
    with pytest.raises(IngestError, match=located(qrels, 2) + r".*'q3 -> missing'.*unknown document 'missing'"):
        read_beir(ReadRequest(tmp_path))


def test_beir_qrel_naming_unknown_query(tmp_path: Path) -> None:
    beir_folder(tmp_path)
    qrels = write_text(tmp_path / "qrels" / "train.tsv", "q3\t3\t1\nq9\t3\t1\n")
    with pytest.raises(IngestError, match=located(qrels, 2) + r" \(id 'q9'\): qrel names unknown query 'q9'"):
        read_beir(ReadRequest(tmp_path))


@pytest.mark.parametrize(("line", "count"), [("q3\t3", 2), ("q3\t3\t1\textra", 4), ("q3 3 1", 3)])
def test_beir_qrels_line_with_wrong_field_count(tmp_path: Path, line: str, count: int) -> None:
    beir_folder(tmp_path)
    qrels = write_text(tmp_path / "qrels" / "test.tsv", f"query-id\tcorpus-id\tscore\nq1\td1\t1\n{line}\n")
    with pytest.raises(IngestError, match=located(qrels, 3) + f": expected 3 tab-separated fields .*got {count}$"):
        read_beir(ReadRequest(tmp_path))


def test_beir_qrels_score_not_an_integer(tmp_path: Path) -> None:
    beir_folder(tmp_path)
    qrels = write_text(tmp_path / "qrels" / "train.tsv", "q3\t3\thigh\n")
    with pytest.raises(IngestError, match=located(qrels, 1) + ": score 'high' is not an integer"):
        read_beir(ReadRequest(tmp_path))


def test_beir_duplicate_document_with_different_content(tmp_path: Path) -> None:
    beir_folder(tmp_path)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [*BEIR_CORPUS, {"_id": "d2", "title": "", "text": "Another beta."}])
    first = re.escape(f"{corpus}:2 (id 'd2')")
    with pytest.raises(IngestError, match=located(corpus, 4) + rf" \(id 'd2'\): duplicate document id, first seen at {first}$"):
        read_beir(ReadRequest(tmp_path))


def test_beir_empty_document(tmp_path: Path) -> None:
    beir_folder(tmp_path)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [*BEIR_CORPUS, {"_id": "blank", "title": "T", "text": " \n\t "}])
    with pytest.raises(IngestError, match=located(corpus, 4) + r" \(id 'blank'\): empty document"):
        read_beir(ReadRequest(tmp_path))


def test_beir_without_qrels_is_an_error(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "corpus.jsonl", BEIR_CORPUS)
    write_jsonl(tmp_path / "queries.jsonl", BEIR_QUERIES)
    with pytest.raises(IngestError, match=located(tmp_path / "qrels") + ": no qrels"):
        read_beir(ReadRequest(tmp_path))


# ---------------------------------------------------------------- generic JSONL

JSONL_DOCUMENTS = [
    {"id": "a", "title": "Doc A", "text": "Text of A.", "metadata": {"lang": "en", "tags": ["x", "y"]}},
    {"id": "b", "title": "Doc B", "text": "Text of B."},
    {"id": 7, "title": "", "text": "Numbered doc."},
]
JSONL_QUERIES = [
    {"id": "q1", "text": "Ask A?", "split": "train", "qrels": {"a": 1, "b": 2}, "metadata": {"kind": "pair"}},
    {"id": "q2", "text": "Ask 7?", "split": "test", "qrels": {"7": 1}},
    {"id": "q3", "text": "No gold, no split."},
]


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_jsonl_documents_queries_and_gold(tmp_path: Path, suffix: str) -> None:
    documents = write_jsonl(tmp_path / f"docs.jsonl{suffix}", JSONL_DOCUMENTS)
    queries = write_jsonl(tmp_path / f"queries.jsonl{suffix}", JSONL_QUERIES)
    result = read_jsonl(ReadRequest(documents, queries))
    assert rows(result.documents) == [
        {"doc_id": "a", "title": "Doc A", "text": "Text of A.", "metadata": read_from(documents, lang="en", tags=["x", "y"])},
        {"doc_id": "b", "title": "Doc B", "text": "Text of B.", "metadata": read_from(documents)},
        {"doc_id": "7", "title": "", "text": "Numbered doc.", "metadata": read_from(documents)},
    ]
    assert rows(result.queries) == [
        {"query_id": "q1", "text": "Ask A?", "split": "train", "metadata": '{"kind": "pair"}'},
        {"query_id": "q2", "text": "Ask 7?", "split": "test", "metadata": None},
        {"query_id": "q3", "text": "No gold, no split.", "split": "test", "metadata": None},
    ]
    assert rows(result.qrels) == [
        {"query_id": "q1", "doc_id": "a", "relevance": 1, "split": "train"},
        {"query_id": "q1", "doc_id": "b", "relevance": 2, "split": "train"},
        {"query_id": "q2", "doc_id": "7", "relevance": 1, "split": "test"},
    ]
    assert FORMATS["jsonl"] is read_jsonl


def test_jsonl_byte_order_mark(tmp_path: Path) -> None:
    documents = write_bytes(tmp_path / "docs.jsonl", b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in JSONL_DOCUMENTS).encode())
    assert read_jsonl(ReadRequest(documents)).documents.column("doc_id").to_pylist() == ["a", "b", "7"]


def test_jsonl_documents_only(tmp_path: Path) -> None:
    result = read_jsonl(ReadRequest(write_jsonl(tmp_path / "docs.jsonl", JSONL_DOCUMENTS)))
    assert result.documents.column("doc_id").to_pylist() == ["a", "b", "7"]
    assert (result.queries.num_rows, result.qrels.num_rows) == (0, 0)


def test_jsonl_request_split_overrides_record_split(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "docs.jsonl", JSONL_DOCUMENTS)
    queries = write_jsonl(tmp_path / "queries.jsonl", JSONL_QUERIES)
    result = read_jsonl(ReadRequest(documents, queries, split="dev"))
    assert result.queries.column("split").to_pylist() == ["dev", "dev", "dev"]
    assert result.qrels.column("split").to_pylist() == ["dev", "dev", "dev"]


def test_jsonl_identical_duplicate_document_is_stored_once(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "docs.jsonl", [*JSONL_DOCUMENTS, JSONL_DOCUMENTS[1]])
    assert read_jsonl(ReadRequest(documents)).documents.column("doc_id").to_pylist() == ["a", "b", "7"]


def test_jsonl_malformed_line(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "x.jsonl", JSONL_DOCUMENTS[:2])
    write_text(documents, documents.read_text() + '{"id": "c", "title": "C", "text": "unterminated}\n')
    with pytest.raises(IngestError, match=located(documents, 3) + ": malformed JSON at column"):
        read_jsonl(ReadRequest(documents))


def test_jsonl_malformed_line_after_blank_lines_in_gz(tmp_path: Path) -> None:
    lines = [json.dumps(JSONL_DOCUMENTS[0]), "", "   ", json.dumps(JSONL_DOCUMENTS[1]), "[1, 2"]
    documents = write_text(tmp_path / "x.jsonl.gz", "\n".join(lines) + "\n")
    with pytest.raises(IngestError, match=located(documents, 5) + ": malformed JSON"):
        read_jsonl(ReadRequest(documents))


def test_jsonl_malformed_queries_line(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "docs.jsonl", JSONL_DOCUMENTS)
    queries = write_text(tmp_path / "queries.jsonl", json.dumps(JSONL_QUERIES[0]) + "\n{oops}\n")
    with pytest.raises(IngestError, match=located(queries, 2) + ": malformed JSON"):
        read_jsonl(ReadRequest(documents, queries))


def test_jsonl_duplicate_document_with_different_content(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "x.jsonl", [*JSONL_DOCUMENTS, {"id": "a", "title": "Doc A", "text": "Changed."}])
    first = re.escape(f"{documents}:1 (id 'a')")
    with pytest.raises(IngestError, match=located(documents, 4) + rf" \(id 'a'\): duplicate document id, first seen at {first}$"):
        read_jsonl(ReadRequest(documents))


def test_jsonl_duplicate_document_with_different_title(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "x.jsonl", [*JSONL_DOCUMENTS, {"id": "b", "title": "Other B", "text": "Text of B."}])
    with pytest.raises(IngestError, match=located(documents, 4) + r" \(id 'b'\): duplicate document id, first seen at .*:2 "):
        read_jsonl(ReadRequest(documents))


def test_jsonl_gold_naming_unknown_document(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "docs.jsonl", JSONL_DOCUMENTS)
    queries = write_jsonl(tmp_path / "queries.jsonl", [*JSONL_QUERIES[:2], {"id": "q9", "text": "Lost?", "qrels": {"a": 1, "zz": 1}}])
    with pytest.raises(IngestError, match=located(queries, 3) + r" \(id 'q9 -> zz'\): gold names unknown document 'zz'$"):
        read_jsonl(ReadRequest(documents, queries))


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_jsonl_empty_document(tmp_path: Path, text: str) -> None:
    documents = write_jsonl(tmp_path / "x.jsonl", [JSONL_DOCUMENTS[0], {"id": "e", "title": "Empty", "text": text}])
    with pytest.raises(IngestError, match=located(documents, 2) + r" \(id 'e'\): empty document"):
        read_jsonl(ReadRequest(documents))


def test_jsonl_document_missing_text(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "x.jsonl", [*JSONL_DOCUMENTS, {"id": "t", "title": "No text"}])
    with pytest.raises(IngestError, match=located(documents, 4) + r" \(id 't'\): missing field 'text'$"):
        read_jsonl(ReadRequest(documents))


def test_jsonl_document_missing_id(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "x.jsonl", [JSONL_DOCUMENTS[0], {"title": "No id", "text": "x"}])
    with pytest.raises(IngestError, match=located(documents, 2) + ": missing field 'id'$"):
        read_jsonl(ReadRequest(documents))


def test_jsonl_document_metadata_must_be_an_object(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "x.jsonl", [{"id": "m", "title": "M", "text": "x", "metadata": ["not", "a", "dict"]}])
    with pytest.raises(IngestError, match=located(documents, 1) + r" \(id 'm'\): field 'metadata' should be an object$"):
        read_jsonl(ReadRequest(documents))


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_jsonl_non_utf8_line(tmp_path: Path, suffix: str) -> None:
    good = "".join(json.dumps(record) + "\n" for record in JSONL_DOCUMENTS[:2]).encode()
    documents = write_bytes(tmp_path / f"x.jsonl{suffix}", good + b'{"id": "c", "title": "C", "text": "caf\xe9"}\n')
    with pytest.raises(IngestError, match=located(documents, 3) + r": not valid UTF-8 \(byte 0xe9 at column 39\)$"):
        read_jsonl(ReadRequest(documents))


def test_jsonl_non_utf8_in_queries_file(tmp_path: Path) -> None:
    documents = write_jsonl(tmp_path / "docs.jsonl", JSONL_DOCUMENTS)
    queries = write_bytes(tmp_path / "queries.jsonl", b'{"id": "q1", "text": "ok"}\n{"id": "q2", "text": "\xff"}\n')
    with pytest.raises(IngestError, match=located(queries, 2) + ": not valid UTF-8"):
        read_jsonl(ReadRequest(documents, queries))


def test_jsonl_truncated_gz(tmp_path: Path) -> None:
    text = "".join(json.dumps({"id": f"d{n}", "title": "T", "text": f"document number {n} " * 8}) + "\n" for n in range(5000))
    packed = gzip.compress(text.encode())
    documents = tmp_path / "x.jsonl.gz"
    documents.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(IngestError, match=located(documents) + ": cannot read beyond line [0-9]+: Compressed file ended"):
        read_jsonl(ReadRequest(documents))


def test_jsonl_gz_that_is_not_gzip(tmp_path: Path) -> None:
    documents = tmp_path / "x.jsonl.gz"
    documents.write_text(json.dumps(JSONL_DOCUMENTS[0]) + "\n")
    with pytest.raises(IngestError, match=located(documents) + ": cannot read: Not a gzipped file"):
        read_jsonl(ReadRequest(documents))


def test_jsonl_missing_file(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=located(tmp_path / "absent.jsonl") + ": no such file$"):
        read_jsonl(ReadRequest(tmp_path / "absent.jsonl"))


# ---------------------------------------------------------------- a folder of files


def files_folder(root: Path) -> Path:
    write_text(root / "intro.md", "Some preamble.\n\n# The Introduction\n\nBody text.\n\n# Second heading\n")
    write_text(root / "notes" / "field_notes-2021.txt", "Plain notes without a heading.\n# not a title for txt\n")
    write_text(root / "notes" / "deep" / "untitled.md", "## Only a subheading\n\nNo level-one heading here.\n")
    write_text(root / "archive" / "old.md.gz", "#   Archived Title  ##\nOld content.\n")
    write_text(root / "ignored.json", '{"not": "read"}')
    write_text(root / "notes" / "image.png", "not an image")
    write_text(root / "readme.rst", "Intro\n\nThe  Title\n=========\n")
    write_text(root / "pkg-a" / "copyright", "Copyright A.\n")
    write_text(root / "pkg-b" / "copyright", "Copyright B.\n")
    write_text(root / "pkg-b" / "README.Debian", "Debian notes.\n")
    write_text(root / ".git" / "config", "hidden: never read, never counted\n")
    write_text(root / "notes" / "blank.txt", "  \n\n")
    return root


def test_files_titles_ids_and_what_is_skipped(tmp_path: Path) -> None:
    folder = files_folder(tmp_path)
    result = read_files(ReadRequest(folder))
    assert [(r["doc_id"], r["title"]) for r in rows(result.documents)] == [
        ("archive/old.md", "Archived Title"),
        ("intro.md", "The Introduction"),
        ("notes/deep/untitled.md", "untitled"),
        ("notes/field_notes-2021.txt", "field notes 2021"),
        ("pkg-a/copyright", "pkg a copyright"),  # extension-less; a name many files share gets its folder's
        ("pkg-b/README.Debian", "README"),  # documentation's names, whatever their suffix
        ("pkg-b/copyright", "pkg b copyright"),
        ("readme.rst", "The Title"),
    ]
    for row in rows(result.documents):  # a file's metadata: its path in the folder and as read (a .gz's own), when it changed, its size
        path = next(p for p in (folder / row["doc_id"], folder / f"{row['doc_id']}.gz") if p.exists())
        changed = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert json.loads(row["metadata"]) == {"path": path.relative_to(folder).as_posix(), "source": str(path), "mtime": changed, "size": path.stat().st_size}
    assert rows(result.documents)[1]["text"] == "Some preamble.\n\n# The Introduction\n\nBody text.\n\n# Second heading\n"
    assert result.notes == ["skipped 3 files: 1 empty, 1 .json (--ext .json reads them), 1 .png"]  # an image is not pointed to --ext
    assert (result.queries.num_rows, result.qrels.num_rows, result.foreign_keys.num_rows) == (0, 0, 0)
    assert FORMATS["files"] is read_files
    named = read_files(ReadRequest(tmp_path, extensions=(".json",)))
    assert "ignored.json" in named.documents.column("doc_id").to_pylist() and "1 .png" in named.notes[0]


def test_files_title_keeps_dots_and_suffixes_are_case_insensitive(tmp_path: Path) -> None:
    write_text(tmp_path / "report.2021_v2.txt", "Dotted name.")
    write_text(tmp_path / "UPPER.MD", "# Shouted Heading\nbody\n")
    write_text(tmp_path / "Packed.TXT.GZ", "Compressed, upper-case suffix.")
    write_text(tmp_path / "double__gap - name.txt", "Spaces collapse in titles.")
    result = read_files(ReadRequest(tmp_path))
    assert [(r["doc_id"], r["title"], r["text"]) for r in rows(result.documents)] == [
        ("Packed.TXT", "Packed", "Compressed, upper-case suffix."),
        ("UPPER.MD", "Shouted Heading", "# Shouted Heading\nbody\n"),
        ("double__gap - name.txt", "double gap name", "Spaces collapse in titles."),
        ("report.2021_v2.txt", "report.2021 v2", "Dotted name."),
    ]


def test_files_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=located(tmp_path) + r": no text files found \(read: \.txt, \.md.*--ext adds a suffix\)$"):
        read_files(ReadRequest(tmp_path))


def test_files_folder_with_only_other_extensions_is_an_error(tmp_path: Path) -> None:
    write_text(tmp_path / "data.csv", "a,b\n")
    with pytest.raises(IngestError, match=located(tmp_path) + r": no text files found"):
        read_files(ReadRequest(tmp_path))


def test_files_path_that_is_not_a_folder(tmp_path: Path) -> None:
    path = write_text(tmp_path / "one.txt", "text")
    with pytest.raises(IngestError, match=located(path) + ": expected a folder"):
        read_files(ReadRequest(path))


def test_files_encodings_binary_files_and_skip_bad(tmp_path: Path) -> None:
    files_folder(tmp_path)
    bad = write_bytes(tmp_path / "notes" / "latin1.txt", b"first line\nsecond caf\xe9\n")
    with pytest.raises(IngestError, match=located(bad, 2) + r": not valid UTF-8 \(byte 0xe9\) \(--encoding names another one; --skip-bad"):
        read_files(ReadRequest(tmp_path))
    as_latin = {r["doc_id"]: r["text"] for r in rows(read_files(ReadRequest(tmp_path, encoding="latin-1")).documents)}
    assert as_latin["notes/latin1.txt"] == "first line\nsecond café\n"
    write_bytes(tmp_path / "wide.txt", "\ufeffUTF-16 with its byte-order mark\n".encode("utf-16"))  # the mark decides, no option needed
    nul = write_bytes(tmp_path / "zeros.txt", b"\x00" * 4096)
    bad.unlink()
    with pytest.raises(IngestError, match=located(nul) + r": binary, not text: 4,096 NUL bytes in 4,096"):
        read_files(ReadRequest(tmp_path))
    nul.unlink()
    elf = write_bytes(tmp_path / "tool", b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\x03\x00>\x00\xe9\xff")  # an executable, no suffix
    with pytest.raises(IngestError, match=located(elf) + r": binary \(an ELF executable or library\), not text"):
        read_files(ReadRequest(tmp_path))
    elf.unlink()
    nul = write_bytes(tmp_path / "zeros.txt", b"\x00" * 4096)
    bad = write_bytes(tmp_path / "notes" / "latin1.txt", b"caf\xe9\n")
    skipping = read_files(ReadRequest(tmp_path, skip_bad=True))
    texts = {r["doc_id"]: r["text"] for r in rows(skipping.documents)}
    assert texts["wide.txt"] == "UTF-16 with its byte-order mark\n" and "zeros.txt" not in texts and "notes/latin1.txt" not in texts
    assert skipping.notes[-1] == "skipped 2 files that could not be read (--skip-bad): notes/latin1.txt (not valid UTF-8 (byte 0xe9)); zeros.txt (binary, not text: 4,096 NUL bytes in 4,096)"
    only_bad = tmp_path / "only_bad"
    write_bytes(only_bad / "a.txt", b"\x00\x01")
    with pytest.raises(IngestError, match=r"no file could be read: skipped 1 file \(--skip-bad\): a.txt \(binary, not text"):
        read_files(ReadRequest(only_bad, skip_bad=True))


def test_files_metadata_from_sidecars_and_the_folders_metadata_jsonl(tmp_path: Path) -> None:
    """What the user says of a file: ``metadata.jsonl`` at the folder's top, a ``NAME.meta.json`` beside
    it over that, both over the file's own fields; neither is read as a document; a sidecar of no file
    read, a line naming no file, or a non-object stops the read naming the file and line."""
    write_text(tmp_path / "a.md", "# A\n\nAlpha.\n")
    write_text(tmp_path / "notes" / "b.txt", "Beta.\n")
    write_text(tmp_path / "notes" / "c.txt", "Gamma.\n")
    write_text(tmp_path / "metadata.jsonl", '{"path": "a.md", "lang": "en", "year": 2020}\n{"path": "notes/b.txt", "lang": "de"}\n')
    write_text(tmp_path / "a.md.meta.json", '{"year": 2021, "tags": ["x"], "source": "https://example.org/a"}')
    found = {row["doc_id"]: json.loads(row["metadata"]) for row in rows(read_files(ReadRequest(tmp_path)).documents)}
    assert set(found) == {"a.md", "notes/b.txt", "notes/c.txt"}
    assert {key: found["a.md"][key] for key in ("path", "lang", "year", "tags", "source")} == {"path": "a.md", "lang": "en", "year": 2021, "tags": ["x"], "source": "https://example.org/a"}
    assert found["notes/b.txt"]["lang"] == "de" and found["notes/b.txt"]["path"] == "notes/b.txt" and "lang" not in found["notes/c.txt"]
    write_text(tmp_path / "metadata.jsonl", '{"path": "a.md"}\n{"path": "nope.md", "x": 1}\n')
    with pytest.raises(IngestError, match=r"metadata.jsonl:2: path 'nope.md': no such text file in the folder"):
        read_files(ReadRequest(tmp_path))
    (tmp_path / "metadata.jsonl").unlink()
    write_text(tmp_path / "gone.md.meta.json", "{}")
    with pytest.raises(IngestError, match=r"gone.md.meta.json: the metadata of 'gone.md', which is not a text file read here"):
        read_files(ReadRequest(tmp_path))
    (tmp_path / "gone.md.meta.json").unlink()
    write_text(tmp_path / "a.md.meta.json", "[1, 2]")
    with pytest.raises(IngestError, match="a.md.meta.json: expected a JSON object of metadata fields, got list"):
        read_files(ReadRequest(tmp_path))


def test_files_a_long_file_becomes_parts_at_paragraph_breaks(tmp_path: Path, monkeypatch) -> None:
    from graphlake.warehouse.readers import files

    monkeypatch.setattr(files, "PART_CHARS", 40)
    text = "First paragraph, short.\n\nSecond paragraph is here.\n\nThird.\nA line of it.\n" + "x" * 50
    write_text(tmp_path / "book.txt", text)
    result = read_files(ReadRequest(tmp_path))
    parts = rows(result.documents)
    assert [r["doc_id"] for r in parts] == ["book.txt", "book.txt#2", "book.txt#3", "book.txt#4", "book.txt#5"]
    assert "".join(r["text"] for r in parts) == text and all(len(r["text"]) <= 40 for r in parts)
    assert parts[0]["text"] == "First paragraph, short.\n\n" and parts[1]["text"] == "Second paragraph is here.\n\n"
    assert parts[1]["title"] == "book (2 of 5)" and {k: v for k, v in json.loads(parts[1]["metadata"]).items() if k != "mtime"} == {
        "path": "book.txt",
        "source": str(tmp_path / "book.txt"),
        "size": (tmp_path / "book.txt").stat().st_size,
        "part": 2,
        "parts": 5,
    }
    assert result.notes == [f"book.txt: {len(text)} characters, split at paragraph boundaries into 5 documents of at most 40"]


def test_files_read_separate_queries_and_trec_qrels(tmp_path: Path) -> None:
    folder = files_folder(tmp_path / "docs")
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q1", "text": "the introduction", "split": "test"}, {"id": "q2", "text": "old", "qrels": {"archive/old.md": 1}}])
    qrels = write_text(tmp_path / "gold.qrels", "q1 0 intro.md 2\nq1 0 readme.rst 1\n")
    result = read_files(ReadRequest(folder, queries=queries, qrels=qrels))
    assert [(r["query_id"], r["split"]) for r in rows(result.queries)] == [("q1", "test"), ("q2", "test")]  # no split: test, said once
    assert result.notes[-1] == "1 of 2 queries name no split: they are in `test` (evaluated, never trained on)"
    assert sorted((r["query_id"], r["doc_id"], r["relevance"]) for r in rows(result.qrels)) == [("q1", "intro.md", 2), ("q1", "readme.rst", 1), ("q2", "archive/old.md", 1)]
    unknown = write_text(tmp_path / "bad.qrels", "q9 0 intro.md 1\n")
    with pytest.raises(IngestError, match=located(unknown, 1) + r" \(id 'q9'\): qrel names unknown query 'q9'"):
        read_files(ReadRequest(folder, queries=queries, qrels=unknown))


def test_files_md_gz_that_is_not_gzip(tmp_path: Path) -> None:
    files_folder(tmp_path)
    fake = tmp_path / "notes" / "fake.md.gz"
    fake.write_text("# Not compressed\n")
    with pytest.raises(IngestError, match=located(fake) + ": cannot read: Not a gzipped file"):
        read_files(ReadRequest(tmp_path))


def test_files_plain_and_gz_of_same_name_with_different_text(tmp_path: Path) -> None:
    write_text(tmp_path / "a.md", "# A\none\n")
    gz = write_text(tmp_path / "a.md.gz", "# A\ntwo\n")
    first = re.escape(f"{tmp_path / 'a.md'} (id 'a.md')")
    with pytest.raises(IngestError, match=located(gz) + rf" \(id 'a\.md'\): duplicate document id, first seen at {first}$"):
        read_files(ReadRequest(tmp_path))


# ---------------------------------------------------------------- the bundled demo


@pytest.fixture(scope="module")
def demo() -> Ingested:
    return FORMATS["demo"](ReadRequest(DEMO_PATH))


TABLES = ["sites", "vessels", "divers", "funding_grants", "dives", "species", "sightings"]


def test_demo_documents_and_tables(demo: Ingested) -> None:
    doc_ids = demo.documents.column("doc_id").to_pylist()
    assert doc_ids == [f"d{n:02d}" for n in range(1, 47)] + [f"halvane_survey.{table}" for table in TABLES]
    assert len(set(doc_ids)) == 53
    assert all(text.strip() for text in demo.documents.column("text").to_pylist())


def test_demo_foreign_keys(demo: Ingested) -> None:
    fks = [(r["src_doc_id"], r["src_column"], r["dst_doc_id"], r["dst_column"], r["position"]) for r in rows(demo.foreign_keys)]
    assert fks == [
        ("halvane_survey.dives", "site_id", "halvane_survey.sites", "site_id", 0),
        ("halvane_survey.dives", "vessel_id", "halvane_survey.vessels", "vessel_id", 1),
        ("halvane_survey.dives", "lead_diver_id", "halvane_survey.divers", "diver_id", 2),
        ("halvane_survey.dives", "grant_id", "halvane_survey.funding_grants", "grant_id", 3),
        ("halvane_survey.sightings", "dive_id", "halvane_survey.dives", "dive_id", 4),
        ("halvane_survey.sightings", "species_id", "halvane_survey.species", "species_id", 5),
    ]


def test_demo_queries_splits_and_gold(demo: Ingested) -> None:
    queries = rows(demo.queries)
    assert len(queries) == 34
    assert [q["query_id"] for q in queries] == [f"q{n:02d}" for n in range(1, 35)]
    splits = [q["split"] for q in queries]
    assert (splits.count("train"), splits.count("test")) == (11, 23)
    doc_ids = set(demo.documents.column("doc_id").to_pylist())
    split_of = {q["query_id"]: q["split"] for q in queries}
    gold: dict[str, set[str]] = {}
    for qrel in rows(demo.qrels):
        assert qrel["doc_id"] in doc_ids
        assert qrel["relevance"] == 1
        assert qrel["split"] == split_of[qrel["query_id"]]
        gold.setdefault(qrel["query_id"], set()).add(qrel["doc_id"])
    assert set(gold) == set(split_of)  # every query has gold
    needs: dict[tuple[str, str], int] = {}
    for query in queries:
        metadata = json.loads(query["metadata"])
        assert metadata["hops"] == len(gold[query["query_id"]])
        key = (metadata["needs"], query["split"])
        needs[key] = needs.get(key, 0) + 1
        if metadata["needs"] == "foreign_key":
            assert all(doc.startswith("halvane_survey.") for doc in gold[query["query_id"]])
    assert needs == {
        ("single", "train"): 3,
        ("single", "test"): 6,
        ("citation", "train"): 3,
        ("citation", "test"): 7,
        ("entity", "train"): 3,
        ("entity", "test"): 5,
        ("foreign_key", "train"): 2,
        ("foreign_key", "test"): 5,
    }


def test_demo_citations_resolve(demo: Ingested) -> None:
    doc_ids = set(demo.documents.column("doc_id").to_pylist())
    links = 0
    for row in rows(demo.documents):
        if row["doc_id"].startswith("halvane_survey."):
            continue
        cites = json.loads(row["metadata"])["cites"]
        assert set(cites) <= doc_ids, row["doc_id"]
        assert row["doc_id"] not in cites
        links += len(cites)
    assert links == 40


def test_demo_split_override(tmp_path: Path) -> None:
    result = FORMATS["demo"](ReadRequest(DEMO_PATH, split="dev"))
    assert set(result.queries.column("split").to_pylist()) == {"dev"}
    assert set(result.qrels.column("split").to_pylist()) == {"dev"}
