"""Citation and hyperlink detection: which other documents of a corpus a text points to.

Three citation styles are recognised, each resolved against a per-corpus :class:`CitationIndex`
and kept only when it names exactly one document other than the citing one (ambiguous or unknown
citations are dropped, never guessed):

- ``author_year``: "(Valtersen et al., 2014)", "(Brandt and Osei, 2016; Marrow, 2015)",
  "Castagne and Ferreira (2015)", "Fairweather (2018)". Resolved by (surname of the first author,
  year) from document metadata ``authors``/``year``; a second named author breaks ties. Documents
  without that metadata are simply not in the index, so a corpus without it yields no
  author-year citations and the other styles still work.
- ``numbered``: "[1]", "[1, 3]", "[2-4]" before a closing reference list
  ("References: [1] <title>. [2] <title>."), resolved by exact title match of the list entry
  (after :func:`normalise`). Markers without a list, or numbers missing from it, are ignored.
- ``title``: a double-quoted exact title (any length), or an unquoted, case-sensitive, whole-word
  occurrence of a title of at least ``MIN_TITLE_WORDS`` words: shorter titles ("Paris") occur as
  ordinary words too often to count as a citation. Titles shared by several documents are
  ambiguous and never resolve.

The reference list itself is not scanned: its entries are what the markers cite, not citations.
"""

from __future__ import annotations

import json
import posixpath
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, Field

from graphlake.common.llm import LLMClient

MIN_TITLE_WORDS = 5
KEY_WORDS = 3  # unquoted titles are looked up by their first words, so a text is scanned once
MAX_RANGE = 50  # "[1-400]" is not a citation range; longer ranges are ignored

_SURNAME = r"[A-ZÀ-ÖØ-Þ][\w'’\-]+"
_AUTHORS = rf"(?P<first>{_SURNAME})(?:\s+et\s+al\.?|\s+(?:and|&)\s+(?P<second>{_SURNAME}))?"
_PARENTHETICAL_PART = re.compile(rf"{_AUTHORS},?\s+(?P<year>\d{{4}})[a-z]?\s*$")
_NARRATIVE = re.compile(rf"\b{_AUTHORS}\s+\((?P<year>\d{{4}})[a-z]?\)")
_PARENTHESES = re.compile(r"\(([^()]*)\)")
_REFERENCES = re.compile(r"\b(?:References|Bibliography)\s*:?\s*(?=\[1\])")
_REFERENCE_ENTRY = re.compile(r"\[(\d+)\]\s*(.*?)\s*(?=\[\d+\]|$)", re.DOTALL)
_MARKER = re.compile(r"\[(\d+(?:\s*[-–,]\s*\d+)*)\]")
_QUOTED = re.compile(r"[\"“]([^\"“”]+)[\"”]")
_MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_WORD = re.compile(r"\w+")
_HTML_LINK = re.compile(r"<a\s[^>]*?href\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)


@dataclass(frozen=True)
class Citation:
    """A resolved citation: where it is in the citing text, which document it names, in what style."""

    start: int
    end: int
    doc_id: str
    style: str


def normalise(text: str) -> str:
    """Case-, accent-, punctuation- and whitespace-insensitive form, for comparing titles and names."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return " ".join(re.sub(r"[^\w]+", " ", plain).split())


@dataclass
class CitationIndex:
    """What citations resolve against: a corpus's titles and (first-author surname, year) keys."""

    titles: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    long_titles: dict[tuple[str, ...], list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    author_year: dict[tuple[str, int], list[tuple[str, tuple[str, ...]]]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def build(cls, doc_ids: Iterable[str], titles: Iterable[str | None], metadata: Iterable[str | Mapping | None]) -> CitationIndex:
        index = cls()
        for doc_id, title, meta in zip(doc_ids, titles, metadata, strict=True):
            if title and normalise(title):
                index.titles[normalise(title)].append(doc_id)
                if len(title.split()) >= MIN_TITLE_WORDS and re.match(r"\w", title):
                    index.long_titles[_first_words(title)].append((title.strip(), doc_id))
            surnames, year = _authorship(meta)
            if surnames and year is not None:
                index.author_year[(surnames[0], year)].append((doc_id, surnames))
        return index

    def by_title(self, title: str) -> str | None:
        found = self.titles.get(normalise(title), [])
        return found[0] if len(found) == 1 else None

    def title_occurrences(self, body: str) -> list[Citation]:
        """Unquoted, case-sensitive, whole-word occurrences of the corpus's long, unique titles."""
        found = []
        words = list(_WORD.finditer(body))
        for i, word in enumerate(words):
            for title, doc_id in self.long_titles.get(tuple(w.group() for w in words[i : i + KEY_WORDS]), ()):
                end = word.start() + len(title)
                whole = end >= len(body) or not _WORD.match(body[end])  # a title running past the body is no match below
                if whole and body.startswith(title, word.start()) and self.by_title(title):
                    found.append(Citation(word.start(), end, doc_id, "title"))
        return found

    def by_author_year(self, first: str, second: str | None, year: int) -> str | None:
        candidates = self.author_year.get((normalise(first), year), [])
        if len(candidates) > 1 and second:
            candidates = [c for c in candidates if len(c[1]) > 1 and c[1][1] == normalise(second)]
        return candidates[0][0] if len(candidates) == 1 else None


def _authorship(meta: str | Mapping | None) -> tuple[tuple[str, ...], int | None]:
    """Normalised author surnames and the year from ``authors``/``year`` metadata, if present."""
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip() else {}
    meta = meta if isinstance(meta, Mapping) else {}
    authors = meta.get("authors") or []
    if isinstance(authors, str):
        authors = re.split(r";|\band\b", authors)
    surnames = tuple(normalise(_surname(a)) for a in authors if isinstance(a, str) and a.strip())
    year = re.search(r"\d{4}", str(meta.get("year", "")))
    return surnames, int(year.group()) if year else None


def _surname(author: str) -> str:
    """ "Valtersen, Ingrid" and "Ingrid Valtersen" both give "Valtersen"."""
    return author.split(",")[0] if "," in author else author.split()[-1]


def find_citations(text: str, index: CitationIndex, doc_id: str | None = None) -> list[Citation]:
    """Every resolved citation in ``text`` (minus self-citations of ``doc_id``), in text order."""
    body_end, references = _reference_list(text)
    body = text[:body_end]
    found = _author_year(body, index) + _numbered(body, references, index) + _titles(body, index)
    return sorted((c for c in found if c.doc_id != doc_id), key=lambda c: c.start)


def _reference_list(text: str) -> tuple[int, dict[int, str]]:
    """Where the closing reference list starts (or the text's end) and its entries by number."""
    headings = list(_REFERENCES.finditer(text))
    if not headings:
        return len(text), {}
    heading = headings[-1]
    entries = {int(m.group(1)): m.group(2).rstrip(" .") for m in _REFERENCE_ENTRY.finditer(text, heading.end())}
    return heading.start(), entries


def _author_year(body: str, index: CitationIndex) -> list[Citation]:
    found = []
    for group in _PARENTHESES.finditer(body):
        offset = group.start(1)
        for part in group.group(1).split(";"):
            match = _PARENTHETICAL_PART.search(part)
            if match:
                found.append(_resolve_author_year(match, offset, index))
            offset += len(part) + 1
    found += [_resolve_author_year(m, 0, index) for m in _NARRATIVE.finditer(body)]
    return [c for c in found if c is not None]


def _resolve_author_year(match: re.Match, offset: int, index: CitationIndex) -> Citation | None:
    doc_id = index.by_author_year(match.group("first"), match.group("second"), int(match.group("year")))
    return Citation(offset + match.start(), offset + match.end(), doc_id, "author_year") if doc_id else None


def _numbered(body: str, references: dict[int, str], index: CitationIndex) -> list[Citation]:
    if not references:
        return []
    found = []
    for marker in _MARKER.finditer(body):
        for number in _marker_numbers(marker.group(1)):
            doc_id = index.by_title(references[number]) if number in references else None
            if doc_id:
                found.append(Citation(marker.start(), marker.end(), doc_id, "numbered"))
    return found


def _marker_numbers(inside: str) -> list[int]:
    """ "1, 3" -> [1, 3]; "2-4" -> [2, 3, 4]."""
    numbers: list[int] = []
    for part in inside.split(","):
        low, _, high = part.replace("–", "-").partition("-")
        first, last = int(low), int(high or low)
        if 0 <= last - first <= MAX_RANGE:
            numbers += range(first, last + 1)
    return numbers


def _titles(body: str, index: CitationIndex) -> list[Citation]:
    """Quoted titles first; an unquoted occurrence inside a quoted one is the same citation."""
    found = []
    for quoted in _QUOTED.finditer(body):
        doc_id = index.by_title(quoted.group(1))
        if doc_id:
            found.append(Citation(quoted.start(), quoted.end(), doc_id, "title"))
    claimed = [(c.start, c.end) for c in found]
    return found + [c for c in index.title_occurrences(body) if not any(s <= c.start < e for s, e in claimed)]


def _first_words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text)[:KEY_WORDS])


def find_links(text: str, doc_path: str, paths: Mapping[str, str]) -> list[Citation]:
    """Markdown ``[text](other.md)`` and HTML ``<a href="other.html">`` links to other documents.

    Targets resolve relative to the linking document's folder (fragments and queries dropped,
    percent-escapes decoded) and count only if ``paths`` (relative path -> doc id) knows them;
    external URLs, anchors within the page and links to the document itself are ignored.
    """
    found = []
    for pattern in (_MARKDOWN_LINK, _HTML_LINK):
        for match in pattern.finditer(text):
            doc_id = paths.get(_relative_target(match.group(1), doc_path) or "")
            if doc_id and paths.get(doc_path) != doc_id:
                found.append(Citation(match.start(), match.end(), doc_id, "link"))
    return sorted(found, key=lambda c: c.start)


def _relative_target(href: str, doc_path: str) -> str | None:
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    target = unquote(parts.path)
    joined = target.lstrip("/") if target.startswith("/") else posixpath.join(posixpath.dirname(doc_path), target)
    resolved = posixpath.normpath(joined)
    return None if resolved.startswith("..") else resolved


# ---------------------------------------------------------------- LLM detector


class CitedWork(BaseModel):
    title: Annotated[str, Field(max_length=300)] = ""
    first_author_surname: Annotated[str, Field(max_length=80)] = ""
    year: int | None = None


class CitedWorks(BaseModel):
    works: Annotated[list[CitedWork], Field(max_length=30)]


CITATION_PROMPT = """List every work that the passage below cites or refers to by name. For each work give its
title if the passage states it (quoted or in a reference list), else the first author's surname and the year.
Answer in JSON: {"works": [{"title": "...", "first_author_surname": "...", "year": 2019}]}.
Passage:
{content}
"""


def llm_citations(client: LLMClient, text: str, index: CitationIndex, doc_id: str | None = None) -> list[str]:
    """Documents a passage cites, as an LLM reads it (FastInsight built its citation graph so), resolved
    against the corpus exactly like the regex detector's findings: by unique title, else (surname, year)."""
    answer = client.structured(CITATION_PROMPT.replace("{content}", text), CitedWorks)
    cited = []
    for work in answer.works:
        found = index.by_title(work.title) if work.title else None
        if found is None and work.first_author_surname and work.year is not None:
            found = index.by_author_year(work.first_author_surname, None, work.year)
        if found is not None and found != doc_id and found not in cited:
            cited.append(found)
    return cited
