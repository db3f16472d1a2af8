"""The English stop set: Lucene's (``EnglishAnalyzer``), the one bm25s ships as ``STOPWORDS_EN``. Held
here, so that the BM25 index's tokenizer and a hit's matched words (``snippets.py``) leave out the same
words, and answering a query never imports bm25s (and numba with it) to read a list of 33 words."""

ENGLISH = (
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "will", "with",
)  # fmt: skip
