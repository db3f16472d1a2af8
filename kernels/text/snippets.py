"""What a hit shows of itself: the query's words found in it (compared as BM25 compares them: lower
case, Porter stems, English stopwords left out) and a snippet of its text centred on them."""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

from graphlake.kernels.text.stopwords import ENGLISH

_WORD = re.compile(r"\w+")
STOPWORDS = frozenset(ENGLISH)
SNIPPET_CHARS = 240


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("porter")


def query_stems(query: str) -> dict[str, str]:
    """The query's words that BM25 would search for, by stem (the first spelling of each)."""
    words = [w for w in _WORD.findall(query.lower()) if w not in STOPWORDS]
    stems: dict[str, str] = {}
    for word, stem in zip(words, _stemmer().stemWords(words), strict=True):
        stems.setdefault(stem, word)
    return stems


def matched_terms(stems: dict[str, str], text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """The text's words that match a query word (``query_stems``), as the text spells them, each once
    in the order they first occur, and where in the text every match lies (character spans, for a
    reader to highlight)."""
    if not stems:
        return [], []
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    found = _stemmer().stemWords([text[a:b].lower() for a, b in spans])
    matched = [span for span, stem in zip(spans, found, strict=True) if stem in stems]
    return list(dict.fromkeys(text[a:b] for a, b in matched)), matched


def snippet(text: str, spans: list[tuple[int, int]], width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` around the window holding the most matches (its start
    without any), cut at word boundaries and marked with an ellipsis where the text goes on."""
    if len(text) <= width:
        return text
    start = 0
    if spans:
        best, count = 0, 0
        for i, (first, _) in enumerate(spans):  # the window starting at each match: how many matches it holds
            held = sum(1 for a, b in spans[i:] if b <= first + width)
            if held > count:
                best, count = i, held
        first, last = spans[best][0], max((b for a, b in spans[best:] if b <= spans[best][0] + width), default=spans[best][1])
        start = max(0, min(first - (width - (last - first)) // 2, len(text) - width))
    end = min(len(text), start + width)
    if start > 0:
        start = text.find(" ", start, start + 30) + 1 or start
    if end < len(text):
        end = text.rfind(" ", end - 30, end) if text.rfind(" ", end - 30, end) > start else end
    return ("…" if start > 0 else "") + text[start:end].strip() + ("…" if end < len(text) else "")
