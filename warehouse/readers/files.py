"""A folder of text files: one document per file (or per part of a long file), id = path inside the folder.

What a folder of real documentation holds is read or accounted for, never dropped in silence: text
suffixes (``TEXT_SUFFIXES``, plus any the user names), extension-less files (``COPYING``), the names
documentation goes by whatever their suffix (``README.Debian``), and their ``.gz``; every other file
is skipped and counted by suffix in the notes. A
file that cannot be decoded, or is binary (NUL bytes), stops the read naming it, unless the request
says to skip bad files (then it is listed too). A file longer than a document may be is split at
paragraph boundaries into parts ``path#2``, ``path#3``... (the first keeps the path).

A file's metadata are its ``path`` inside the folder (as a filter names it: ``path = "notes/a.md"``),
its ``source`` (the file as read, what a hit cites), ``mtime`` and ``size``, and what the user says of
it: a sidecar ``NAME.meta.json`` beside it (a JSON object), or a line of ``metadata.jsonl`` at the
folder's top (``{"path": "notes/a.md", ...}``); a sidecar's field wins over the folder file's, and
both over the file's own. A sidecar that names no file read, or is not an object, stops the read
naming it: metadata are never dropped in silence.
"""

from __future__ import annotations

import codecs
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from graphlake.warehouse.readers import jsonl
from graphlake.warehouse.readers.base import CorpusBuilder, Ingested, IngestError, Location, ReadRequest, add_qrels_file, iter_jsonl, load_json, read_bytes, require

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".text")
SIDECAR = ".meta.json"  # NAME.meta.json: the metadata of the file NAME beside it
FOLDER_METADATA = "metadata.jsonl"  # at the folder's top: {"path": ..., fields} a line
# the names a package's documentation goes by: read whatever follows them (README.Debian, NEWS.md)
TEXT_NAMES = frozenset({"readme", "news", "changes", "changelog", "authors", "copying", "license", "licence", "todo", "thanks", "history", "install", "copyright", "notice"})
MARKDOWN = (".md", ".markdown")
# images, archives, fonts and compiled files: skipped and counted, never suggested to --ext
BINARY_SUFFIXES = frozenset(".png .jpg .jpeg .gif .webp .ico .bmp .tif .tiff .pdf .zip .tar .tgz .bz2 .xz .zst .7z .whl .jar .so .o .a .dll .exe .bin .pyc .class .mo .woff .woff2 .ttf .otf".split())
# spaCy's default max_length: its parser and NER need about 1 GB per million characters, so a longer
# file becomes several documents rather than one the chunker would choke on
PART_CHARS = 1_000_000
_HEADING = re.compile(r"^\s{0,3}#\s+(.+?)\s*#*\s*$", re.MULTILINE)
_RST_TITLE = re.compile(r"^(?:([=\-~^*#+])\1{2,}\n)?(?P<title>\S.*?)\s*\n([=\-~^*#+])\3{2,}\s*$", re.MULTILINE)
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
# what the first bytes of the binaries a documentation folder holds say they are
_BINARY_MAGIC = ((b"\x7fELF", "binary (an ELF executable or library)"), (b"%PDF", "binary (a PDF)"), (b"PK\x03\x04", "binary (a zip archive)"), (b"\x89PNG", "binary (a PNG image)"))
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def read(request: ReadRequest) -> Ingested:
    folder = request.path
    if not folder.is_dir():
        raise IngestError(folder, "expected a folder of text files")
    suffixes = (*TEXT_SUFFIXES, *request.extensions)
    builder = CorpusBuilder()
    skipped: Counter[str] = Counter()
    bad: list[str] = []
    paths, others = _listing(folder, suffixes)
    if not paths:
        raise IngestError(folder, f"no text files found (read: {', '.join(suffixes)}, extension-less files and their .gz; --ext adds a suffix)")
    told = _told(folder, paths)
    stems = Counter(_stem(doc_id) for _, doc_id in paths)
    for path, doc_id in paths:
        try:
            text = _decode(path, request.encoding)
        except IngestError as error:
            if not request.skip_bad:
                raise IngestError(error.where, f"{error.problem} (--encoding names another one; --skip-bad skips such files and lists them)") from None
            bad.append(f"{doc_id} ({error.problem})")
            continue
        if not text.strip():
            skipped["empty"] += 1
            continue
        title = _title(doc_id, text, stems)
        parts = [part for part in _parts(text, PART_CHARS) if part.strip()]
        for number, part in enumerate(parts, start=1):
            part_id = doc_id if number == 1 else f"{doc_id}#{number}"
            metadata = _file_metadata(path, folder) | ({"part": number, "parts": len(parts)} if len(parts) > 1 else {}) | told.get(path, {})
            builder.add_document(part_id, title if len(parts) == 1 else f"{title} ({number} of {len(parts)})", part, Location(path), metadata)
        if len(parts) > 1:
            builder.notes.append(f"{doc_id}: {len(text):,} characters, split at paragraph boundaries into {len(parts)} documents of at most {PART_CHARS:,}")
    for suffix, count in others.most_common():
        skipped[suffix if suffix in BINARY_SUFFIXES else f"{suffix} (--ext {suffix} reads them)"] += count
    if skipped:
        builder.notes.append(f"skipped {_files(sum(skipped.values()))}: " + ", ".join(f"{count} {why}" for why, count in skipped.items()))
    if bad:
        builder.notes.append(f"skipped {_files(len(bad))} that could not be read (--skip-bad): " + "; ".join(bad))
    if bad and not builder.has_documents:
        raise IngestError(folder, f"no file could be read: skipped {_files(len(bad))} (--skip-bad): " + "; ".join(bad))
    if request.queries is not None:
        jsonl.add_queries(builder, request.queries, request.split)
    if request.qrels is not None:
        add_qrels_file(builder, request.qrels, request.split)
    return builder.build()


def _file_metadata(path: Path, folder: Path) -> dict:
    """What a file says of itself: its path inside the folder (a .gz's own), the file as read, when it
    last changed (ISO 8601, UTC: comparable as text, ``mtime >= "2026-01-01"``) and its size in bytes."""
    status = path.stat()
    changed = datetime.fromtimestamp(status.st_mtime, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"path": path.relative_to(folder).as_posix(), "source": str(path), "mtime": changed, "size": status.st_size}


def _told(folder: Path, paths: list[tuple[Path, str]]) -> dict[Path, dict]:
    """The metadata the user gives files: ``metadata.jsonl``'s lines, then each file's sidecar over them."""
    read = {path.relative_to(folder).as_posix(): path for path, _ in paths}
    told: dict[Path, dict] = {}
    listed = folder / FOLDER_METADATA
    if listed.is_file():
        seen: dict[str, Location] = {}
        for where, record in iter_jsonl(listed):
            named = require(record, "path", where)
            if named not in read:
                raise IngestError(where, f"path {named!r}: no such text file in the folder (a path inside it, as {next(iter(read))!r})")
            if named in seen:
                raise IngestError(where, f"path {named!r} again, first at line {seen[named].line}")
            seen[named] = where
            told[read[named]] = {key: value for key, value in record.items() if key != "path"}
    for sidecar in sorted(folder.rglob(f"*{SIDECAR}")):
        file = sidecar.with_name(sidecar.name[: -len(SIDECAR)])
        if any(part.startswith(".") for part in sidecar.relative_to(folder).parts):
            continue
        if file not in read.values():
            raise IngestError(sidecar, f"the metadata of {file.name!r}, which is not a text file read here")
        fields = load_json(sidecar)
        if not isinstance(fields, dict):
            raise IngestError(sidecar, f"expected a JSON object of metadata fields, got {type(fields).__name__}")
        told[file] = told.get(file, {}) | fields
    return told


def _files(count: int) -> str:
    return f"{count} file{'' if count == 1 else 's'}"


def _listing(folder: Path, suffixes: tuple[str, ...]) -> tuple[list[tuple[Path, str]], Counter[str]]:
    """The files to read, with their document ids, and the others' count by suffix; hidden files and
    folders (``.git``) are neither."""
    read, others = [], Counter()
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if not path.is_file() or any(part.startswith(".") for part in relative.parts) or path.name.endswith(SIDECAR) or relative.as_posix() == FOLDER_METADATA:
            continue  # hidden, or metadata of the files (read by _told)
        doc_id = relative.as_posix()
        doc_id = doc_id[: -len(".gz")] if doc_id.lower().endswith(".gz") else doc_id
        suffix = PurePosixPath(doc_id).suffix.lower()
        if suffix in suffixes or not suffix or PurePosixPath(doc_id).name.split(".")[0].lower() in TEXT_NAMES:
            read.append((path, doc_id))
        else:
            others[suffix] += 1
    return read, others


def _decode(path: Path, encoding: str | None) -> str:
    """The file's text in ``encoding`` (default UTF-8; a byte-order mark decides for UTF-8 and UTF-16);
    a text with NUL bytes is binary and refused."""
    raw = read_bytes(path)
    chosen = next((name for bom, name in _BOMS if raw.startswith(bom)), None) if encoding is None else encoding
    if b"\x00" in raw and not codecs.lookup(chosen or "utf-8").name.startswith(("utf-16", "utf-32")):
        kind = next((what for magic, what in _BINARY_MAGIC if raw.startswith(magic)), "binary")
        raise IngestError(path, f"{kind}, not text: {raw.count(0):,} NUL bytes in {len(raw):,}")
    try:
        text = raw.decode(chosen or "utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise IngestError(Location(path, line), f"not valid {chosen or 'UTF-8'} (byte 0x{raw[error.start]:02x})") from None
    return text.removeprefix("\ufeff")


def _stem(doc_id: str) -> str:
    name = PurePosixPath(doc_id).name
    return name if name.startswith(".") else PurePosixPath(doc_id).stem


def _title(doc_id: str, text: str, stems: Counter[str]) -> str:
    """The first level-one heading of Markdown or reStructuredText; else the file name (its folder's
    name before it where many files share it, as ``copyright`` and ``README`` do), ``_``/``-`` as spaces."""
    suffix = PurePosixPath(doc_id).suffix.lower()
    found = _HEADING.search(text) if suffix in MARKDOWN else _RST_TITLE.search(text) if suffix == ".rst" else None
    if found:
        return " ".join(found.group("title" if suffix == ".rst" else 1).split())
    stem = _stem(doc_id)
    parent = PurePosixPath(doc_id).parent.name
    name = f"{parent} {stem}" if stems[stem] > 1 and parent else stem
    return " ".join(name.replace("_", " ").replace("-", " ").split())


def _parts(text: str, limit: int) -> list[str]:
    """``text`` cut into pieces of at most ``limit`` characters, at paragraph breaks where it can, else
    at line breaks, else anywhere; the pieces joined give the text back."""
    if len(text) <= limit:
        return [text]
    parts, start = [], 0
    while len(text) - start > limit:
        window = text[start : start + limit]
        cut = max((m.end() for m in _PARAGRAPH.finditer(window)), default=0) or window.rfind("\n") + 1 or limit
        parts.append(text[start : start + cut])
        start += cut
    parts.append(text[start:])
    return parts
