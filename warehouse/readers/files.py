"""A folder of ``.txt`` / ``.md`` files: one document per file, id = path inside the folder."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from graphlake.warehouse.readers.base import CorpusBuilder, Ingested, IngestError, Location, ReadRequest, read_text

SUFFIXES = (".txt", ".md", ".txt.gz", ".md.gz")
_HEADING = re.compile(r"^\s{0,3}#\s+(.+?)\s*#*\s*$", re.MULTILINE)


def read(request: ReadRequest) -> Ingested:
    folder = request.path
    if not folder.is_dir():
        raise IngestError(folder, "expected a folder of .txt/.md files")
    builder = CorpusBuilder()
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIXES))
    if not paths:
        raise IngestError(folder, "no .txt or .md files found")
    for path in paths:
        doc_id = path.relative_to(folder).as_posix()
        doc_id = doc_id[: -len(".gz")] if doc_id.lower().endswith(".gz") else doc_id
        text = read_text(path)
        heading = _HEADING.search(text) if doc_id.lower().endswith(".md") else None
        title = heading.group(1) if heading else PurePosixPath(doc_id).stem.replace("_", " ").replace("-", " ")
        builder.add_document(doc_id, title, text, Location(path), {"path": doc_id})
    return builder.build()
