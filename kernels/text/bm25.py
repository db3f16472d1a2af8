"""BM25 with the Lucene/Anserini scoring (k1 = 0.9, b = 0.4), Porter stemming and English stopwords.

A thin layer over bm25s: tokenisation is kept beside the index so queries are tokenised exactly as
the corpus was, and the pair saves to and loads from one folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
import scipy.sparse as sp
import Stemmer
from bm25s.tokenization import Tokenizer

from graphlake.kernels.results import FILL_ROW, FILL_SCORE, Ranking, SearchParams, filled
from graphlake.kernels.text.stopwords import ENGLISH

# Lucene's StandardAnalyzer keeps one-character tokens; bm25s's default pattern drops them.
TOKEN_PATTERN = r"(?u)\b\w+\b"
K1, B = 0.9, 0.4  # Anserini's


@dataclass
class BM25Index:
    retriever: bm25s.BM25
    tokenizer: Tokenizer

    @classmethod
    def build(cls, texts: list[str], k1: float = K1, b: float = B) -> BM25Index:
        tokenizer = _tokenizer()
        tokens = tokenizer.tokenize(texts, show_progress=False, return_as="tuple")
        retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        retriever.index(tokens, show_progress=False)
        return cls(retriever, tokenizer)

    def search(self, queries: list[str], k: int, params: SearchParams = SearchParams()) -> Ranking:
        """A ``Ranking`` (``kernels/results.py``; bm25s's top ``k`` in its order, ties in bm25s's): a node sharing no term with the query is no result, and with a filter
        (``params.allowed``) only its rows are, the others scoring 0 before the top ``k`` are taken."""
        found_scores, found_rows = filled(len(queries), k)
        k_found = min(k, self.retriever.scores["num_docs"])
        if not queries or not k_found:
            return Ranking(found_scores, found_rows)
        # token ids, not the (ids, vocab) tuple: from a tuple bm25s rebuilds a reverse vocabulary on every
        # call (7x slower per query, see benchmarks/results/bm25_throughput.md); n_threads=0 skips its pool
        tokens = self.tokenizer.tokenize(queries, update_vocab=False, show_progress=False, return_as="ids")
        mask = None if params.allowed is None else params.allowed.mask.astype(self.retriever.dtype)
        rows, scores = self.retriever.retrieve(tokens, k=k_found, show_progress=False, n_threads=0, weight_mask=mask)
        matched = scores > 0  # bm25s's order kept, ties included: the recorded rankings follow it (a tie rule to the lower row is open)
        found_scores[:, :k_found] = np.where(matched, scores, FILL_SCORE)
        found_rows[:, :k_found] = np.where(matched, rows, FILL_ROW)
        return Ranking(found_scores, found_rows)

    def weights(self) -> sp.csr_matrix:
        """The per-document BM25 weight of every token, ``(docs, vocabulary)``: a query's score is the
        inner product of its token counts (``token_counts``) with a row, as Lucene's formula sums it."""
        scores = self.retriever.scores
        shape = (scores["num_docs"], len(scores["indptr"]) - 1)
        return sp.csc_matrix((scores["data"], scores["indices"], scores["indptr"]), shape=shape, dtype=np.float32).tocsr()

    def token_counts(self, texts: list[str]) -> sp.csr_matrix:
        """How often each vocabulary token occurs in each text (unknown words dropped), ``(texts, vocabulary)``."""
        ids = self.tokenizer.tokenize(texts, update_vocab=False, show_progress=False, return_as="ids")
        placeholder = self.tokenizer.get_vocab_dict().get("")  # what bm25s returns for a text with no known word
        ids = [[token for token in tokens if token != placeholder] for tokens in ids]
        rows = np.repeat(np.arange(len(ids)), [len(t) for t in ids])
        columns = np.fromiter((token for tokens in ids for token in tokens), dtype=np.int64, count=len(rows))
        shape = (len(texts), len(self.retriever.scores["indptr"]) - 1)
        counts = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, columns)), shape=shape)
        counts.sum_duplicates()
        return counts

    def save(self, folder: Path) -> None:
        self.retriever.save(str(folder), show_progress=False)
        self.tokenizer.save_vocab(str(folder))

    @classmethod
    def load(cls, folder: Path) -> BM25Index:
        retriever = bm25s.BM25.load(str(folder))
        tokenizer = _tokenizer()
        tokenizer.load_vocab(str(folder))
        return cls(retriever, tokenizer)


def token_lengths(texts: list[str]) -> np.ndarray:
    """Each text's length as the index counts it when built: its tokens after stopwords and stemming."""
    ids = _tokenizer().tokenize(texts, show_progress=False, return_as="ids")
    return np.fromiter((len(tokens) for tokens in ids), dtype=np.float64, count=len(texts))


def _tokenizer() -> Tokenizer:
    return Tokenizer(lower=True, splitter=TOKEN_PATTERN, stopwords=list(ENGLISH), stemmer=Stemmer.Stemmer("porter"))


def stems(texts: list[str]) -> list[tuple[str, ...]]:
    """Each text's tokens as BM25 counts them (stopwords dropped, Porter-stemmed), as strings: what
    ``SegmentBM25`` indexes with another index's statistics."""
    ids, vocabulary = _tokenizer().tokenize(texts, show_progress=False, return_as="tuple")
    words = {i: word for word, i in vocabulary.items()}
    return [tuple(words[i] for i in row if words[i]) for row in ids]


@dataclass(frozen=True)
class SegmentBM25:
    """BM25 over a few texts written since ``base`` was built (or with no index at all), scored as if
    they had been indexed with it: each word's document frequency, the text count and the mean length
    are the base's and the segment's together, so a word no base text has matches (Lucene's collection
    statistics summed over segments). The base's own scores stay as built."""

    vocabulary: dict[str, int]
    by_word: sp.csr_matrix  # (vocabulary, texts): each word's weight in each text, by word so that a query's words select rows

    @classmethod
    def of(cls, texts: list[tuple[str, ...]], base: BM25Index | None = None, base_mean_length: float = 0.0) -> SegmentBM25:
        """``texts``: each one's ``stems``; ``base_mean_length``: the base's mean text length in tokens."""
        vocabulary: dict[str, int] = {}
        columns = np.fromiter((vocabulary.setdefault(word, len(vocabulary)) for text in texts for word in text), dtype=np.int64)
        lengths = np.fromiter((len(text) for text in texts), dtype=np.float64, count=len(texts))
        rows = np.repeat(np.arange(len(texts)), lengths.astype(np.int64))
        counts = sp.csr_matrix((np.ones(len(columns), np.float64), (rows, columns)), shape=(len(texts), len(vocabulary)))
        counts.sum_duplicates()
        frequencies = np.bincount(counts.indices, minlength=len(vocabulary)).astype(np.float64)
        k1, b, total, length_sum = K1, B, float(len(texts)), float(lengths.sum())
        if base is not None:
            scores, known = base.retriever.scores, base.tokenizer.get_vocab_dict()
            base_frequencies = np.diff(scores["indptr"])
            frequencies += [base_frequencies[known[word]] if word in known else 0 for word in vocabulary]
            k1, b, total, length_sum = base.retriever.k1, base.retriever.b, total + scores["num_docs"], length_sum + base_mean_length * scores["num_docs"]
        idf = np.log1p((total - frequencies + 0.5) / (frequencies + 0.5))
        coo = counts.tocoo()
        norm = k1 * ((1 - b) + b * lengths[coo.row] / max(length_sum / max(total, 1.0), 1e-9))
        weights = idf[coo.col] * coo.data / (norm + coo.data)
        return cls(vocabulary, sp.csr_matrix((weights.astype(np.float32), (coo.col, coo.row)), shape=counts.shape[::-1]))

    def scores(self, queries: list[str]) -> np.ndarray:
        """``(queries, texts)``: each query's BM25 score of each text (its words' counts times their weights)."""
        query_stems = stems(queries)
        columns = [[self.vocabulary[w] for w in words if w in self.vocabulary] for words in query_stems]
        rows = np.repeat(np.arange(len(queries)), [len(c) for c in columns])
        counts = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, np.fromiter((c for cs in columns for c in cs), dtype=np.int64, count=len(rows)))), shape=(len(queries), len(self.vocabulary)))
        counts.sum_duplicates()
        return np.asarray((counts @ self.by_word).todense(), np.float64)
