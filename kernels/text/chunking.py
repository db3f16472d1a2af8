"""Sentence-aware chunking of documents into nodes.

Sentences are packed greedily into windows of at most ``size`` tokens; consecutive windows share
whole trailing sentences worth at most ``overlap`` tokens. A sentence longer than the window is
cut at token boundaries. A text that fits the window stays one chunk. Offsets are character
offsets into the original text, so ``text[start:end]`` is the chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spacy.language import Language

MAX_TEXT_CHARS = 50_000_000  # spaCy's max_length for a text here; ingest refuses a longer document up front


@dataclass(frozen=True)
class Chunk:
    start: int
    end: int
    tokens: int


@dataclass(frozen=True)
class _Span:
    """A sentence (or a piece of an over-long one) as the character extents of its tokens."""

    extents: tuple[tuple[int, int], ...]

    @property
    def start(self) -> int:
        return self.extents[0][0]

    @property
    def end(self) -> int:
        return self.extents[-1][1]

    @property
    def tokens(self) -> int:
        return len(self.extents)


@lru_cache(maxsize=1)
def _sentencizer() -> Language:
    """Rule-based sentence boundaries: fast and deterministic, no statistical model needed."""
    import spacy  # here, not at import: the Definitions load this module and spaCy takes a second

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.max_length = MAX_TEXT_CHARS
    return nlp


def chunk_texts(texts: list[str], size: int | None, overlap: int = 0, batch_size: int = 256) -> list[list[Chunk]]:
    """Chunk many texts; ``size=None`` keeps each text whole (one chunk)."""
    if size is None:
        return [[Chunk(0, len(text), -1)] for text in texts]
    if not 0 <= overlap < size:
        raise ValueError(f"overlap {overlap} must be in [0, size={size})")
    return [_pack(_sentences(doc), size, overlap) for doc in _sentencizer().pipe(texts, batch_size=batch_size)]


def _sentences(doc) -> list[_Span]:
    spans = []
    for sentence in doc.sents:
        extents = tuple((t.idx, t.idx + len(t.text)) for t in sentence if not t.is_space)
        if extents:
            spans.append(_Span(extents))
    return spans


def _pack(sentences: list[_Span], size: int, overlap: int) -> list[Chunk]:
    pieces: list[_Span] = []
    for sentence in sentences:
        pieces.extend(_split_long(sentence, size))
    chunks: list[Chunk] = []
    first = 0
    while first < len(pieces):
        last, tokens = first, pieces[first].tokens
        while last + 1 < len(pieces) and tokens + pieces[last + 1].tokens <= size:
            last += 1
            tokens += pieces[last].tokens
        chunks.append(Chunk(pieces[first].start, pieces[last].end, tokens))
        if last + 1 >= len(pieces):
            break
        following, carried = last + 1, 0
        budget = min(overlap, size - pieces[last + 1].tokens)  # carried context must leave room for new text
        while following - 1 > first and carried + pieces[following - 1].tokens <= budget:
            following -= 1
            carried += pieces[following].tokens
        first = following
    return chunks


def _split_long(sentence: _Span, size: int) -> list[_Span]:
    """Cut a sentence longer than the window into window-sized runs of tokens."""
    if sentence.tokens <= size:
        return [sentence]
    return [_Span(sentence.extents[i : i + size]) for i in range(0, sentence.tokens, size)]
