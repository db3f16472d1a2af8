"""How a corpus's passages relate: what the graph methods read of a corpus, declared with the corpus.

GraphER links a retriever's candidates by one proximity (§3: tables by foreign keys, multi-hop
passages by shared named entities, chunks of one document by adjacency); FastInsight and GAR walk the
corpus graph (``graph: auto``: its edge kinds); GRASP builds knowledge bases (``source: auto``: the
first). Each format declares what its data is (``FORMAT_LINKING``, beside the readers that know it);
a corpus in ``corpora.yaml`` may declare its own (``linking: {proximity: conceptual}``), and the
retrieval methods read the corpus's resolved declaration, never its format's name."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from graphlake.kernels.plan.skb_sources import SOURCES

EdgeKind = Literal["cooccurrence", "structural", "contextual", "citation", "semantic", "conceptual"]
EDGE_KINDS: tuple[str, ...] = get_args(EdgeKind)
Proximity = Literal["structural", "conceptual", "contextual"]


@dataclass(frozen=True)
class Linking:
    """A corpus's resolved proximity, corpus-graph edge kinds and knowledge-base sources."""

    proximity: Proximity = "contextual"
    corpus_graph: tuple[EdgeKind, ...] = ("citation", "semantic")
    skb_sources: tuple[str, ...] = ("entities",)


class LinkingDeclaration(BaseModel):
    """What a corpus declares in ``corpora.yaml``; a field it leaves out keeps its format's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    proximity: Proximity | None = None
    corpus_graph: tuple[EdgeKind, ...] | None = Field(None, min_length=1)
    skb_sources: tuple[str, ...] | None = Field(None, min_length=1)

    @field_validator("skb_sources")
    @classmethod
    def _known_sources(cls, sources: tuple[str, ...] | None) -> tuple[str, ...] | None:
        unknown = [source for source in sources or () if source not in SOURCES]
        if unknown:
            raise ValueError(f"unknown knowledge-base source {unknown[0]!r}; one of {', '.join(SOURCES)}")
        return sources

    def over(self, base: Linking) -> Linking:
        """This declaration with ``base``'s values where it sets none."""
        return replace(base, **{name: value for name, value in self.model_dump().items() if value is not None})


_TABLES = Linking(proximity="structural", corpus_graph=("structural",), skb_sources=("sql_schema",))
_MULTI_HOP = Linking(proximity="conceptual", corpus_graph=("conceptual",))

FORMAT_LINKING: dict[str, Linking] = {  # a format not named: chunks of free text, citations and semantic kNN
    "spider": _TABLES,
    "bird": _TABLES,
    **dict.fromkeys(("hotpotqa", "hotpotqa-ircot", "musique", "hipporag"), _MULTI_HOP),
    "2wiki": replace(_MULTI_HOP, skb_sources=("wiki_rules", "wiki_evidence")),
    "beir": Linking(corpus_graph=("semantic", "conceptual")),  # SciFact cites nothing
    "demo": Linking(corpus_graph=("citation",)),
}


def format_linking(format: str) -> Linking:
    return FORMAT_LINKING.get(format, Linking())
