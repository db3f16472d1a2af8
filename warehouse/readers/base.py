"""What every format reader shares: located errors, strict text decoding, and the corpus builder.

A reader turns raw files into an :class:`Ingested` bundle or raises :class:`IngestError` naming the
file, line and id at fault. Nothing is written until a reader has returned, so bad input writes
nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from graphlake.common.settings import MAX_LINE_BYTES
from graphlake.common.unicode_checks import same_id
from graphlake.kernels.text.chunking import MAX_TEXT_CHARS
from graphlake.warehouse.tables import CITED_BY, row_schema

MAX_LINE_ENV = MAX_LINE_BYTES.name
TOO_DEEP = "JSON nested deeper than the parser reads (about 1,000 levels): a document is a flat record"


@dataclass(frozen=True)
class Location:
    """Where a record came from: file, 1-based line when known, and the record's id when known."""

    file: Path
    line: int | None = None
    record: str | None = None

    def __str__(self) -> str:
        text = str(self.file) if self.line is None else f"{self.file}:{self.line}"
        return text if self.record is None else f"{text} (id {self.record!r})"

    def with_record(self, record: str) -> Location:
        return Location(self.file, self.line, record)


class IngestError(ValueError):
    def __init__(self, where: Location | Path, problem: str) -> None:
        self.where = where if isinstance(where, Location) else Location(where)
        self.problem = problem
        super().__init__(f"{self.where}: {problem}")


class NoDocuments(IngestError):
    """A reader found no document; the format's reader call names the file it read."""


@dataclass(frozen=True)
class ReadRequest:
    """A reader's input: the main path, an optional separate query file and gold file, an optional
    split override; for a folder of files, how to decode them, which bad ones to skip, which suffixes
    to read besides the text ones."""

    path: Path
    queries: Path | None = None
    split: str | None = None
    qrels: Path | None = None
    encoding: str | None = None
    skip_bad: bool = False
    extensions: tuple[str, ...] = ()


@dataclass
class Ingested:
    documents: pa.Table
    queries: pa.Table
    qrels: pa.Table
    foreign_keys: pa.Table
    notes: list[str] = field(default_factory=list)
    log_through: int | None = None  # a lake-owned corpus: the last write of its log these documents hold


# ---------------------------------------------------------------- reading files


# What a corrupt or truncated .gz raises while reading (gzip.BadGzipFile is an OSError).
_UNREADABLE = (OSError, EOFError, zlib.error)


def open_binary(path: Path):
    """Open a file for reading bytes, decompressing ``.gz`` transparently."""
    path = Path(path)
    if not path.is_file():
        raise IngestError(path, "no such file")
    return gzip.open(path, "rb") if path.suffix.lower() == ".gz" else open(path, "rb")


def find_file(folder: Path, *names: str) -> Path:
    """The first of ``names`` (or its ``.gz``) present in ``folder``."""
    for name in names:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise IngestError(folder, f"none of {', '.join(names)} (or .gz) found")


def max_line_bytes() -> int:
    try:
        return int(MAX_LINE_BYTES.number())
    except ValueError as error:
        raise IngestError(Path(MAX_LINE_ENV), str(error)) from None


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)``; a line that is not UTF-8, or longer than ``GRAPHLAKE_MAX_LINE_BYTES``
    (read no further than that), is an error naming that line.

    A UTF-8 byte-order mark opening the file is dropped, as :func:`read_text` does.
    """
    limit = max_line_bytes()
    with open_binary(path) as handle:
        number = 0
        try:
            while raw := handle.readline(limit + 1):
                number += 1
                if len(raw) > limit and not raw.endswith(b"\n"):  # limit + 1 bytes, and the line goes on
                    raise IngestError(Location(path, number), f"line longer than {limit:,} bytes ({MAX_LINE_ENV}); is the file JSON lines?")
                if number == 1:
                    raw = raw.removeprefix(b"\xef\xbb\xbf")
                yield number, _decode(raw, Location(path, number))
        except _UNREADABLE as error:
            read = f" beyond line {number}" if number else ""  # buffered reads: no exact line to blame
            raise IngestError(path, f"cannot read{read}: {error}") from None


def iter_jsonl(path: Path) -> Iterator[tuple[Location, Any]]:
    """Yield ``(location, record)`` for each non-blank line of a JSON-lines file."""
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        where = Location(path, number)
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as error:
            raise IngestError(where, f"malformed JSON at column {error.colno}: {error.msg}") from None
        except RecursionError:
            raise IngestError(where, TOO_DEEP) from None


def read_head(path: Path, size: int = 4096) -> bytes:
    """The first bytes of a file, to tell its layout (a JSON list or JSON lines) before parsing."""
    with open_binary(path) as handle:
        try:
            return handle.read(size).removeprefix(b"\xef\xbb\xbf")
        except _UNREADABLE as error:
            raise IngestError(path, f"cannot read: {error}") from None


def read_bytes(path: Path) -> bytes:
    """A whole file's bytes, ``.gz`` decompressed; a file that cannot be read is an error naming it."""
    with open_binary(path) as handle:
        try:
            return handle.read()
        except _UNREADABLE as error:
            raise IngestError(path, f"cannot read: {error}") from None


def read_text(path: Path) -> str:
    raw = read_bytes(path)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise IngestError(Location(path, line), f"not valid UTF-8 (byte 0x{raw[error.start]:02x})") from None


def add_qrels_file(builder: CorpusBuilder, path: Path, split: str | None = None, known_queries: bool = True) -> None:
    """Gold from a qrels file: BEIR's ``query-id<TAB>corpus-id<TAB>score`` (a header line optional) or
    TREC's ``query-id iteration doc-id relevance``; ``known_queries``: each must name a query read before."""
    for number, line in iter_lines(path):
        where = Location(path, number)
        tabbed = "\t" in line
        fields = line.rstrip("\r\n").split("\t") if tabbed else line.split()
        if not line.strip() or (number == 1 and fields[0] == "query-id"):
            continue
        if not tabbed and len(fields) == 4:
            fields = [fields[0], fields[2], fields[3]]
        elif not tabbed or len(fields) != 3:
            raise IngestError(where, f"expected 3 tab-separated fields (query-id, corpus-id, score) or 4 space-separated ones (TREC: query-id iteration doc-id relevance), got {len(fields)}")
        query_id, doc_id, score = fields
        if known_queries and not builder.has_query(query_id):
            raise IngestError(where.with_record(query_id), f"qrel names unknown query {query_id!r}")
        try:
            relevance = int(score)
        except ValueError:
            raise IngestError(where, f"score {score!r} is not an integer") from None
        builder.add_qrel(query_id, doc_id, where, relevance, split)


def load_json(path: Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise IngestError(Location(path, error.lineno), f"malformed JSON at column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise IngestError(path, TOO_DEEP) from None


def _decode(raw: bytes, where: Location) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise IngestError(where, f"not valid UTF-8 (byte 0x{raw[error.start]:02x} at column {error.start + 1})") from None


def require(record: Any, key: str, where: Location, kind: type = str) -> Any:
    """``record[key]`` checked for presence and type, or an error naming the record."""
    if not isinstance(record, dict):
        raise IngestError(where, f"expected a JSON object, got {type(record).__name__}")
    if key not in record:
        raise IngestError(where, f"missing field {key!r}")
    value = record[key]
    if kind is str and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, kind):
        raise IngestError(where, f"field {key!r} should be {kind.__name__}, got {type(value).__name__}")
    return value


DEFAULT_SPLIT = "test"  # a query that names no split is held out


def split_from_name(path: Path, default: str = "dev") -> str:
    """Infer a split from a file name (``..._train...`` -> train); benchmarks name their files so."""
    name = Path(path).name.lower()
    for split, markers in (("train", ("train",)), ("test", ("test",)), ("dev", ("dev", "val"))):
        if any(marker in name for marker in markers):
            return split
    return default


def passage_id(title: str, text: str) -> str:
    """Stable id of a passage from its content, so identical passages are stored once across runs."""
    return hashlib.blake2b(f"{title}\x1f{text}".encode(), digest_size=8).hexdigest()


# ---------------------------------------------------------------- building tables


_DOCUMENTS, _QUERIES, _QRELS, _FOREIGN_KEYS = (row_schema(name) for name in ("documents", "queries", "qrels", "foreign_keys"))


def _metadata(metadata: dict | None) -> str | None:
    return None if not metadata else json.dumps(metadata, ensure_ascii=False, sort_keys=True)


def record_metadata(record: dict, columns: tuple[str, ...], where: Location) -> dict:
    """A JSON record's metadata: its ``metadata`` object, and every field besides its own ``columns``
    (``{"id", "title", "text", "year": 2019}`` is filterable by year)."""
    given = record.get("metadata")
    if given is not None and not isinstance(given, dict):
        raise IngestError(where, "field 'metadata' should be an object")
    return {**{key: value for key, value in record.items() if key not in columns and key != "metadata"}, **(given or {})}


class CorpusBuilder:
    """Collects documents, queries, gold and foreign keys, checking each as it arrives.

    Ids must be unique unless the content is identical (a passage shared by several questions);
    gold must name known documents and queries. ``build`` runs the checks that need everything.
    """

    def __init__(self) -> None:
        self._documents: dict[str, dict] = {}
        self._document_at: dict[str, Location] = {}
        self._queries: dict[str, dict] = {}
        self._query_at: dict[str, Location] = {}
        self._qrels: dict[tuple[str, str], dict] = {}
        self._qrel_at: dict[tuple[str, str], Location] = {}
        self._foreign_keys: list[dict] = []
        self._foreign_key_at: list[Location] = []
        self.notes: list[str] = []

    @property
    def has_documents(self) -> bool:
        return bool(self._documents)

    def has_document(self, doc_id: str) -> bool:
        return same_id(doc_id) in self._documents

    def has_query(self, query_id: str) -> bool:
        return query_id in self._queries

    def add_document(self, doc_id: str, title: str, text: str, where: Location, metadata: dict | None = None) -> str:
        where, doc_id = where.with_record(doc_id), same_id(doc_id)
        if not doc_id:
            raise IngestError(where, "document has an empty id")
        if not text.strip():
            raise IngestError(where, "empty document: no text")
        if len(text) > MAX_TEXT_CHARS:
            raise IngestError(where, f"{len(text):,} characters, more than the {MAX_TEXT_CHARS:,} the sentence splitter and NER take in one text: split it into several documents")
        if not any(key in (metadata or {}) for key in CITED_BY):  # what a hit cites: the file the record was read from
            metadata = {**(metadata or {}), "source": str(where.file)}  # not its line: adding a record would change every later one
        row = {"doc_id": doc_id, "title": title, "text": text, "metadata": _metadata(metadata)}
        if doc_id in self._documents:
            if (self._documents[doc_id]["title"], self._documents[doc_id]["text"]) != (title, text):
                raise IngestError(where, f"duplicate document id, first seen at {self._document_at[doc_id]}")
            return doc_id
        self._documents[doc_id] = row
        self._document_at[doc_id] = where
        return doc_id

    def add_passage(self, title: str, text: str, where: Location, metadata: dict | None = None) -> str:
        """Add a passage whose id is its content hash (multi-hop sets have no passage ids)."""
        return self.add_document(passage_id(title, text), title, text, where, metadata)

    def add_query(self, query_id: str, text: str, where: Location, split: str | None = None, metadata: dict | None = None) -> None:
        where = where.with_record(query_id)
        if not query_id:
            raise IngestError(where, "query has an empty id")
        if not text.strip():
            raise IngestError(where, "empty query text")
        if query_id in self._queries:
            raise IngestError(where, f"duplicate query id, first seen at {self._query_at[query_id]}")
        self._queries[query_id] = {"query_id": query_id, "text": text, "split": split, "metadata": _metadata(metadata)}
        self._query_at[query_id] = where

    def add_qrel(self, query_id: str, doc_id: str, where: Location, relevance: int = 1, split: str | None = None) -> None:
        """Record gold; the same pair seen twice keeps its highest relevance."""
        doc_id = same_id(doc_id)
        key = (query_id, doc_id)
        previous = self._qrels.get(key)
        if previous is None or relevance > previous["relevance"]:
            self._qrels[key] = {"query_id": query_id, "doc_id": doc_id, "relevance": relevance, "split": split}
            self._qrel_at[key] = where.with_record(f"{query_id} -> {doc_id}")

    def add_foreign_key(self, src_doc_id: str, src_column: str, dst_doc_id: str, dst_column: str, position: int, where: Location) -> None:
        """One declared foreign key; ``position`` is its index in the schema's declaration list."""
        src_doc_id, dst_doc_id = same_id(src_doc_id), same_id(dst_doc_id)
        self._foreign_keys.append(
            {
                "src_doc_id": src_doc_id,
                "src_column": src_column,
                "dst_doc_id": dst_doc_id,
                "dst_column": dst_column,
                "position": position,
            }
        )
        self._foreign_key_at.append(where)

    def build(self) -> Ingested:
        if not self._documents:
            raise NoDocuments(Location(Path("<input>")), "no documents found")
        for key, row in self._qrels.items():
            where = self._qrel_at[key]
            if row["doc_id"] not in self._documents:
                raise IngestError(where, f"gold names unknown document {row['doc_id']!r}")
            if self._queries and row["query_id"] not in self._queries:
                raise IngestError(where, f"gold names unknown query {row['query_id']!r}")
            query = self._queries.get(row["query_id"])
            if query is not None:
                if row["split"] is None:
                    row["split"] = query["split"]
                elif query["split"] is None:
                    query["split"] = row["split"]
        unsplit = [query for query in self._queries.values() if query["split"] is None]
        for query in unsplit:  # held out by default: evaluated, never trained on
            query["split"] = DEFAULT_SPLIT
        for row in self._qrels.values():
            if row["split"] is None and row["query_id"] in self._queries:
                row["split"] = self._queries[row["query_id"]]["split"]
        if unsplit:
            self.notes.append(f"{len(unsplit)} of {len(self._queries)} queries name no split: they are in `{DEFAULT_SPLIT}` (evaluated, never trained on)")
        for fk, where in zip(self._foreign_keys, self._foreign_key_at):
            for side in ("src_doc_id", "dst_doc_id"):
                if fk[side] not in self._documents:
                    raise IngestError(where, f"foreign key names unknown table {fk[side]!r}")
        return Ingested(
            documents=pa.Table.from_pylist(list(self._documents.values()), _DOCUMENTS),
            queries=pa.Table.from_pylist(list(self._queries.values()), _QUERIES),
            qrels=pa.Table.from_pylist(list(self._qrels.values()), _QRELS),
            foreign_keys=pa.Table.from_pylist(self._foreign_keys, _FOREIGN_KEYS),
            notes=list(self.notes),
        )
