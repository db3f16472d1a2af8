"""What the retrieval methods read of a corpus, by its format: which proximity links GraphER's
candidates, which graph FastInsight and GAR walk, which knowledge bases GRASP builds. Retrieval's
policy, kept here apart from the warehouse that stores the corpus (``CorpusSpec.format``)."""

from __future__ import annotations

from collections.abc import Callable

# GraphER §3: which proximity links a corpus's candidates. Tables link by foreign keys, multi-hop
# passages by shared named entities, chunks of one document by adjacency.
PROXIMITY: dict[str, str] = {
    "spider": "structural",
    "bird": "structural",
    "hotpotqa": "conceptual",
    "hotpotqa-ircot": "conceptual",
    "2wiki": "conceptual",
    "musique": "conceptual",
    "hipporag": "conceptual",
}

# the corpus graph FastInsight and GAR walk: citations where documents cite, shared entities for
# multi-hop passages, semantic kNN + shared entities for BEIR sets (SciFact has no citations)
CORPUS_GRAPH: dict[str, tuple[str, ...]] = {
    "demo": ("citation",),
    "beir": ("semantic", "conceptual"),
    **{name: ("conceptual",) for name in ("hotpotqa", "hotpotqa-ircot", "2wiki", "musique", "hipporag")},
    "spider": ("structural",),
    "bird": ("structural",),
}


# GRASP's knowledge bases (kernels/plan/skb_builders.py): the schema graph of SQL benchmarks, the 2Wiki KB
# extracted from passages and its oracle built from gold evidence, and the entity graph of any other corpus
SKB_SOURCES: dict[str, tuple[str, ...]] = {
    "spider": ("sql_schema",),
    "bird": ("sql_schema",),
    "2wiki": ("wiki_rules", "wiki_evidence"),
}


def proximity(format: str) -> str:
    return PROXIMITY.get(format, "contextual")


def corpus_graph_kinds(format: str) -> tuple[str, ...]:
    """The edge kinds of the graph ``graph: auto`` walks."""
    return CORPUS_GRAPH.get(format, ("citation", "semantic"))


def skb_sources(format: str) -> tuple[str, ...]:
    """The SKBs GRASP builds for a corpus; the first is what ``source: auto`` means."""
    return SKB_SOURCES.get(format, ("entities",))


SETTINGS: dict[str, Callable[[str], object]] = {"proximity": proximity, "corpus_graph": corpus_graph_kinds, "skb_sources": skb_sources}
