"""Multi-hop QA benchmarks: HotpotQA, 2WikiMultihopQA, MuSiQue, IRCoT's processed files, HippoRAG v1 layout.

None of them ships passage ids, so a passage's id is its content hash (:func:`passage_id`): a paragraph
repeated in many questions' contexts is stored once, and the corpus is the union of all contexts
(HippoRAG's convention). Gold comes in two shapes, each read by one helper:

* ``supporting_facts`` ``[[title, sentence_index]]`` against ``context`` ``[[title, [sentences]]]``
  (HotpotQA, 2Wiki): judged per (question, title), since retrieval returns paragraphs, not sentences;
* a paragraph list flagged ``is_supporting`` (IRCoT ``contexts``, MuSiQue ``paragraphs``).

Other benchmarks' extras (MIGRES ``reranked_ret_res``, ``qa_pairs``, ``explanation``...) are model
outputs, not gold, and are ignored. Files may be a JSON list or JSON lines: MIGRES stores the same
HotpotQA/2Wiki records either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from graphlake.warehouse.readers.base import (
    CorpusBuilder,
    Ingested,
    IngestError,
    Location,
    ReadRequest,
    iter_jsonl,
    load_json,
    passage_id,
    read_head,
    require,
    split_from_name,
)

# Answer-side fields worth keeping with the question (for QA scoring and per-type breakdowns).
_QUERY_METADATA = ("answer", "answer_aliases", "answerable", "answers_objects", "type", "level", "evidences", "question_decomposition")


def read_hotpotqa(request: ReadRequest) -> Ingested:
    """Original HotpotQA distractor records.

    Sentences are joined with ``""``: HotpotQA sentences carry their own leading spaces, and some are
    split inside a quote (``'... in 2015. "'`` + ``'Modern Drummer" magazine ...'``), so only ``""``
    restores the paragraph; HippoRAG v1 joins them the same way.
    """
    return _read_context_questions(request, joiner="")


def read_2wiki(request: ReadRequest) -> Ingested:
    """Original 2WikiMultihopQA records; questions without ``context`` are skipped with a note.

    Sentences are joined with ``" "``: 2Wiki sentences carry no spaces, and this gives exactly the
    passage texts of HippoRAG's ``2wikimultihopqa_corpus.json``.
    """
    return _read_context_questions(request, joiner=" ")


def read_ircot(request: ReadRequest) -> Ingested:
    """IRCoT processed jsonl: ``contexts`` of ``{title, paragraph_text, is_supporting}`` per question."""
    return _read_paragraph_questions(request, "question_id", "question_text", "contexts")


def read_musique(request: ReadRequest) -> Ingested:
    """Original MuSiQue jsonl; gold is title and text, as titles repeat with different paragraphs."""
    return _read_paragraph_questions(request, "id", "question", "paragraphs")


def read_hipporag(request: ReadRequest) -> Ingested:
    """HippoRAG v1: ``<name>_corpus.json`` plus optional ``<name>.json`` queries (HotpotQA/2Wiki or MuSiQue records).

    The corpus is a list of ``{title, text}`` (``idx`` unused: ids are content hashes) or a dict
    ``title -> [sentences]`` joined with ``""`` as HippoRAG does. Gold is resolved against the corpus:
    by title for ``supporting_facts`` (a title naming several passages makes all of them gold, with a
    note), by title and text for MuSiQue ``paragraphs``.
    """
    corpus, queries = _hipporag_files(request)
    builder = CorpusBuilder()
    by_title: dict[str, list[str]] = {}
    entries = 0
    for where, title, text in _corpus_passages(corpus):
        _index(by_title, title, _add_passage(builder, title, text, where))
        entries += 1
    stored = sum(len(doc_ids) for doc_ids in by_title.values())
    if stored < entries:
        builder.notes.append(f"{corpus.name}: {entries - stored} duplicate passages stored once")
    if queries is None:
        return builder.build()
    split = request.split or split_from_name(queries)
    ambiguous = 0
    for where, record in _records(queries):
        if isinstance(record, dict) and "paragraphs" in record:
            query_id, where = _add_query(builder, record, where, "id", "question", split)
            for title, text, supporting in _paragraphs(record, "paragraphs", where):
                if supporting:
                    doc_id = passage_id(title, text)
                    if not builder.has_document(doc_id):
                        raise IngestError(where, f"supporting paragraph {title!r} is not in {corpus.name} (title and text)")
                    builder.add_qrel(query_id, doc_id, where, split=split)
        else:
            query_id, where = _add_query(builder, record, where, "_id", "question", split)
            ambiguous += _add_title_gold(builder, query_id, _supporting_titles(record, where), by_title, where, split, corpus.name)
    if ambiguous:
        builder.notes.append(f"{queries.name}: {ambiguous} supporting titles name several passages of {corpus.name}; all taken as gold")
    return builder.build()


# ---------------------------------------------------------------- the two gold shapes


def _read_context_questions(request: ReadRequest, joiner: str) -> Ingested:
    """Questions with their own ``context`` and ``supporting_facts``; without context they cannot be judged."""
    builder = CorpusBuilder()
    split = request.split or split_from_name(request.path)
    skipped = ambiguous = 0
    for where, record in _records(request.path):
        if isinstance(record, dict) and not record.get("context"):
            skipped += 1
            continue
        query_id, where = _add_query(builder, record, where, "_id", "question", split)
        by_title: dict[str, list[str]] = {}
        for title, sentences in _context(record, where):
            _index(by_title, title, _add_passage(builder, title, joiner.join(sentences), where))
        ambiguous += _add_title_gold(builder, query_id, _supporting_titles(record, where), by_title, where, split, "the question's context")
    if skipped:
        builder.notes.append(f"{request.path.name}: {skipped} questions without context skipped")
    if ambiguous:
        builder.notes.append(f"{request.path.name}: {ambiguous} supporting titles name several context paragraphs; all taken as gold")
    return builder.build()


def _read_paragraph_questions(request: ReadRequest, id_key: str, text_key: str, paragraphs_key: str) -> Ingested:
    """Questions carrying a paragraph list whose ``is_supporting`` flags are the gold."""
    builder = CorpusBuilder()
    split = request.split or split_from_name(request.path)
    for where, record in _records(request.path):
        query_id, where = _add_query(builder, record, where, id_key, text_key, split)
        for title, text, supporting in _paragraphs(record, paragraphs_key, where):
            doc_id = _add_passage(builder, title, text, where)
            if supporting:
                builder.add_qrel(query_id, doc_id, where, split=split)
    return builder.build()


def _context(record: dict, where: Location) -> Iterator[tuple[str, list[str]]]:
    """``(title, sentences)`` of a ``context`` list, checked for shape."""
    for entry in require(record, "context", where, list):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], list) and all(isinstance(sentence, str) for sentence in entry[1])):
            raise IngestError(where, f"context entry should be [title, [sentences]], got {str(entry)[:80]}")
        yield entry[0], entry[1]


def _supporting_titles(record: dict, where: Location) -> list[str]:
    """Distinct titles of ``supporting_facts`` in order (sentence indices dropped: gold is per paragraph)."""
    titles = []
    for fact in require(record, "supporting_facts", where, list):
        if not (isinstance(fact, list) and fact and isinstance(fact[0], str)):
            raise IngestError(where, f"supporting fact should be [title, sentence_index], got {str(fact)[:80]}")
        titles.append(fact[0])
    return list(dict.fromkeys(titles))


def _add_title_gold(builder: CorpusBuilder, query_id: str, titles: list[str], by_title: dict[str, list[str]], where: Location, split: str, scope: str) -> int:
    """Gold for each title from ``by_title``; returns how many titles named several passages."""
    ambiguous = 0
    for title in titles:
        if title not in by_title:
            raise IngestError(where, f"supporting title {title!r} is not in {scope}")
        ambiguous += len(by_title[title]) > 1
        for doc_id in by_title[title]:
            builder.add_qrel(query_id, doc_id, where, split=split)
    return ambiguous


def _paragraphs(record: dict, key: str, where: Location) -> Iterator[tuple[str, str, bool]]:
    """``(title, text, is_supporting)`` of an IRCoT/MuSiQue paragraph list, each located by its index."""
    for index, paragraph in enumerate(require(record, key, where, list)):
        here = where.with_record(f"{where.record} {key}[{index}]")
        supporting = paragraph.get("is_supporting", False) if isinstance(paragraph, dict) else None
        if not isinstance(supporting, bool):
            raise IngestError(here, "field 'is_supporting' should be true or false")
        yield require(paragraph, "title", here), require(paragraph, "paragraph_text", here), supporting


# ---------------------------------------------------------------- shared plumbing


def _records(path: Path) -> Iterator[tuple[Location, Any]]:
    """Records of a JSON list (located by index until their id is known) or of JSON lines (by line)."""
    if not read_head(path).lstrip().startswith(b"["):
        yield from iter_jsonl(path)
        return
    for index, record in enumerate(load_json(path)):
        yield Location(path, record=f"[{index}]"), record


def _add_query(builder: CorpusBuilder, record: Any, where: Location, id_key: str, text_key: str, split: str) -> tuple[str, Location]:
    """Add a question with its answer-side fields as metadata; return its id and its id-named location."""
    query_id = require(record, id_key, where)
    where = where.with_record(query_id)
    metadata = {key: record[key] for key in _QUERY_METADATA if key in record}
    builder.add_query(query_id, require(record, text_key, where), where, split, metadata)
    return query_id, where


def _add_passage(builder: CorpusBuilder, title: str, text: str, where: Location) -> str:
    """Add a passage, refusing an empty one here so the error names the question, not a hash."""
    if not text.strip():
        raise IngestError(where, f"paragraph {title!r} has no text")
    return builder.add_passage(title, text, where)


def _index(by_title: dict[str, list[str]], title: str, doc_id: str) -> None:
    """Remember ``doc_id`` under ``title`` once (a context may repeat an identical paragraph)."""
    doc_ids = by_title.setdefault(title, [])
    if doc_id not in doc_ids:
        doc_ids.append(doc_id)


def _hipporag_files(request: ReadRequest) -> tuple[Path, Path | None]:
    """The corpus and query files: as given, or ``<name>_corpus.json[.gz]`` and ``<name>.json[.gz]`` in a folder."""
    if not request.path.is_dir():
        return request.path, request.queries
    corpora = sorted(request.path.glob("*_corpus.json")) + sorted(request.path.glob("*_corpus.json.gz"))
    if len(corpora) != 1:
        found = ", ".join(path.name for path in corpora) or "none"
        raise IngestError(request.path, f"expected one <name>_corpus.json[.gz] (name the file to pick one), found {found}")
    corpus = corpora[0]
    if request.queries is not None:
        return corpus, request.queries
    name = corpus.name.removesuffix(".gz").removesuffix("_corpus.json")
    candidates = (request.path / f"{name}.json", request.path / f"{name}.json.gz")
    return corpus, next((path for path in candidates if path.is_file()), None)


def _corpus_passages(path: Path) -> Iterator[tuple[Location, str, str]]:
    """``(location, title, text)`` of a HippoRAG corpus, list or dict form."""
    corpus = load_json(path)
    if isinstance(corpus, dict):
        for title, sentences in corpus.items():
            where = Location(path, record=title)
            if not (isinstance(sentences, list) and all(isinstance(sentence, str) for sentence in sentences)):
                raise IngestError(where, "a dict corpus maps each title to a list of sentences")
            yield where, title, "".join(sentences)
    elif isinstance(corpus, list):
        for index, entry in enumerate(corpus):
            where = Location(path, record=f"[{index}]")
            yield where, require(entry, "title", where), require(entry, "text", where)
    else:
        raise IngestError(path, "expected a list of {title, text} or a dict title -> [sentences]")
