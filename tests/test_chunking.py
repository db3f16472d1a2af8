"""Sentence-aware chunking: windows, overlap, offsets, and the one-node rule for short passages."""

from __future__ import annotations

import pytest

from graphlake.kernels.text.chunking import chunk_texts

pytestmark = pytest.mark.fast  # unit tests over small in-memory data: `pytest -m fast`

TEXT = "Alpha beta gamma. Delta epsilon zeta eta. Theta iota. Kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega. End. Fin fin."


def pieces(text: str, size: int | None, overlap: int = 0) -> list[str]:
    return [text[c.start : c.end] for c in chunk_texts([text], size, overlap)[0]]


def test_short_passage_stays_one_chunk():
    text = "  A short passage. It fits.  "
    assert pieces(text, 64) == ["A short passage. It fits."]


def test_whole_document_mode_keeps_text_verbatim():
    [[chunk]] = chunk_texts([TEXT], None)
    assert (chunk.start, chunk.end) == (0, len(TEXT))


def test_windows_end_on_sentence_boundaries_and_cut_overlong_sentences():
    assert pieces(TEXT, 8) == [
        "Alpha beta gamma.",
        "Delta epsilon zeta eta. Theta iota.",
        "Kappa lambda mu nu xi omicron pi rho",
        "sigma tau upsilon phi chi psi omega.",
        "End. Fin fin.",
    ]


def test_overlap_repeats_whole_trailing_sentences_within_budget():
    text = "One two three. Four five. Six seven eight. Nine ten."
    # tokens per sentence: 4, 3, 4, 3 (punctuation counts)
    assert pieces(text, 8, 0) == ["One two three. Four five.", "Six seven eight. Nine ten."]
    # the last window cannot carry "Six seven eight." (4 tokens > overlap 3)
    assert pieces(text, 8, 3) == ["One two three. Four five.", "Four five. Six seven eight.", "Nine ten."]
    assert all(c.tokens <= 8 for c in chunk_texts([text], 8, 3)[0])


def test_offsets_point_into_the_original_text():
    texts = [TEXT, "Ünïcode sentence — with dashes. Another one here.", "x"]
    for text, chunks in zip(texts, chunk_texts(texts, 6, 2)):
        assert chunks, text
        for chunk in chunks:
            piece = text[chunk.start : chunk.end]
            assert piece == piece.strip() and piece in text
        assert chunks[0].start == text.index(text.strip()[0])
        assert chunks[-1].end == len(text.rstrip())
