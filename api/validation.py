"""The Python API's arguments checked before any work, each refusal a ``RequestError`` naming the
argument: names, queries, ``k``, the corpora of one call, a filter. The HTTP server bounds its request
bodies by the same limits."""

from __future__ import annotations

from typing import Any

from graphlake.api.hit_spans import GROUPINGS, MAX_CONTEXT, Shown
from graphlake.api.results import RequestError
from graphlake.common.unicode_checks import blank, lone_surrogate
from graphlake.retrieval.core import METHOD_NAME
from graphlake.retrieval.filters import Filter, FilterError, parse_filter
from graphlake.warehouse.corpora import CORPUS_NAME
from graphlake.warehouse.write_checks import MAX_NAME_CHARS, kind_of

MAX_QUERY_CHARS = 2_000
MAX_K = 1_000
MAX_BATCH = 256
MAX_CORPORA = 16  # searched in one call
MAX_PAGE = 1_000  # documents a page of list_documents
MAX_EMBED_CHARS = 100_000  # a text embed() encodes (the model reads its first 256 tokens)
EMBED_KINDS = ("passage", "query")


def check_names(corpus: Any, method: Any) -> None:
    check_name("corpus", corpus)
    check_name("method", method)


def check_name(what: str, value: Any) -> None:
    """A ``corpus`` or ``method`` name, or a ``RequestError`` saying what a name is."""
    if not isinstance(value, str) or not value:
        raise RequestError(f"{what}: a name, got {kind_of(value)}")
    if len(value) > MAX_NAME_CHARS or not (CORPUS_NAME if what == "corpus" else METHOD_NAME).fullmatch(value):
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise RequestError(f"{what}: {shown!r} is not a {what} name (letters, digits and {'_ . -' if what == 'corpus' else '_'})")


def check_queries(queries: list[str], k: int) -> None:
    if isinstance(queries, str) or not isinstance(queries, list | tuple):
        raise RequestError(f"queries: a list of strings, got {kind_of(queries)} (search() takes one query)")
    if isinstance(k, bool) or not isinstance(k, int):
        raise RequestError(f"k: an integer, got {k!r}")
    if not queries:
        raise RequestError("queries: give at least one")
    if len(queries) > MAX_BATCH:
        raise RequestError(f"queries: at most {MAX_BATCH} in one batch, got {len(queries)}")
    for i, query in enumerate(queries):
        if not isinstance(query, str):
            raise RequestError(f"query {i}: a string, got {kind_of(query)}")
        if blank(query):
            raise RequestError(f"query {i}: empty")
        if len(query) > MAX_QUERY_CHARS:
            raise RequestError(f"query {i}: at most {MAX_QUERY_CHARS} characters, got {len(query)}")
        if not query.isascii() and (bad := lone_surrogate(query)) is not None:  # isascii: a flag, no scan
            raise RequestError(f"query {i}: not valid Unicode (a lone surrogate at character {bad + 1})")
    if not 1 <= k <= MAX_K:
        raise RequestError(f"k: between 1 and {MAX_K}, got {k}")


def corpora_named(corpus: Any) -> list[str]:
    """The corpora a request names: one, or a list of distinct ones."""
    if isinstance(corpus, list | tuple):
        if not corpus:
            raise RequestError("corpus: name at least one")
        if len(set(map(str, corpus))) != len(corpus):
            raise RequestError(f"corpus: each corpus once, got {', '.join(map(str, corpus))}")
        if len(corpus) > MAX_CORPORA:
            raise RequestError(f"corpus: at most {MAX_CORPORA} in one call, got {len(corpus)}")
        return list(corpus)
    return [corpus]


def parsed_filter(given: Any) -> Filter | None:
    if given is None:
        return None
    try:
        return parse_filter(given)
    except FilterError as error:
        raise RequestError(str(error)) from None


def shown(group_by: Any, context: Any, min_relevance: Any = None) -> Shown:
    if group_by not in GROUPINGS:
        raise RequestError(f"group_by: one of {', '.join(GROUPINGS)}, got {group_by!r}"[:200])
    if context is not None and context != "document" and (isinstance(context, bool) or not isinstance(context, int) or not 0 <= context <= MAX_CONTEXT):
        raise RequestError(f'context: neighbouring nodes a side, 0 to {MAX_CONTEXT}, or "document", got {context!r}'[:200])
    if min_relevance is not None and (isinstance(min_relevance, bool) or not isinstance(min_relevance, int | float) or not 0 <= min_relevance <= 1):
        raise RequestError(f"min_relevance: a number from 0 to 1, got {min_relevance!r}"[:200])
    return Shown(group_by, context, None if min_relevance is None else float(min_relevance))


def check_texts(texts: Any) -> list[str]:
    """Texts to embed: 1 to ``MAX_BATCH`` strings of at most ``MAX_EMBED_CHARS`` characters."""
    if not isinstance(texts, list) or not 1 <= len(texts) <= MAX_BATCH:
        raise RequestError(f"texts: a list of 1 to {MAX_BATCH} texts, got {kind_of(texts) if not isinstance(texts, list) else f'{len(texts)} texts'}")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or len(text) > MAX_EMBED_CHARS:
            raise RequestError(f"texts[{i}]: a string of at most {MAX_EMBED_CHARS:,} characters, got {kind_of(text) if not isinstance(text, str) else f'{len(text):,} characters'}")
        if not text.isascii() and (bad := lone_surrogate(text)) is not None:
            raise RequestError(f"texts[{i}]: not valid Unicode (a lone surrogate at character {bad})")
    return texts
