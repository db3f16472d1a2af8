"""Signals that score a candidate together with the candidates ranked above it (its partners).

A multi-hop question's later-hop passage shares little with the question and much with an earlier-hop
passage: the bridge entity, or the title the first passage names (MDR and Beam Retrieval score hop two
with hop one in the input; HippoRAG walks from the question's entities to the passages they link). Scored
alone against the question such a passage ranks in the tens; read beside the few candidates ranked first
(the *anchors*), it is the one that shares their bridge. Every signal here is a number per candidate
given the anchors; a candidate is never partnered with an anchor of its own document (itself, or another
chunk of the same passage: a page's chunks share its title and entities by construction).

- dense: the best cosine to an anchor; the best cosine to the question expanded by an anchor (the sum of
  both unit vectors, normalised: IRCoT's "retrieve with what was found", in one vector); and how much
  that expansion adds over the question alone.
- titles: whether the candidate's title occurs in an anchor's text, an anchor's title in the candidate's
  text, and the candidate's title in the question (a comparison question names both of its pages).
- entities: the inverse-document-frequency weight of the entities shared with the best anchor; whether
  the candidate's title is an entity an anchor mentions, or an anchor's title one the candidate mentions
  (the hyperlink a wiki page would carry); the weight of the question's entities the candidate mentions,
  of those the first anchor lacks, and whether its own title is one of them (set-wise coverage).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

DENSE = ("partner_cosine", "partner_expanded", "partner_expansion_gain")
TITLES = ("title_in_anchor", "anchor_title_in_text", "title_in_query")
ENTITIES = ("partner_entities", "partner_title_link", "query_entities", "query_entities_new", "title_entity_in_query")
FAMILIES = {"dense": DENSE, "titles": TITLES, "entities": ENTITIES}  # as a learned_fusion declares which it reads
FAMILY_READS = {"dense": ("dense",), "titles": (), "entities": ("cooccurrence",)}  # the index kinds each reads (titles: the nodes)
SIGNALS = (*DENSE, *TITLES, *ENTITIES)
CACHED = 4096  # normalised node texts a NodeTitles keeps (the anchors of recent queries)
SHORTEST_TITLE = 3  # characters: a shorter title ("1", "uk"), or a stop word, is inside too many texts to link them
_RUN = re.compile(r"[^\W_]+")  # a run of letters and digits, as ``normalise`` keeps them


@dataclass
class NodeTitles:
    """Each node's title as text mentions it (``bare_title``; None where it links nothing: shorter than
    :data:`SHORTEST_TITLE` or a stop word) and its text, normalised the same way on use. A query reads a
    few hundred texts and normalising one costs more than every other signal, so only the anchors' are
    normalised, and a candidate's only where its lower-cased raw text holds the anchor title's *probe*:
    the longest run of letters and digits in the raw title ("brien" of "O'Brien"), which a raw text
    holds wherever its normalised form holds the title, unless the text breaks that run with a
    punctuation mark the title lacks. The first :data:`CACHED` normalised texts since the oldest was dropped are kept (first in, first out)."""

    titles: list[str | None]
    probes: list[str]
    text: Callable[[int], str]  # a node row's raw text
    normalise: Callable[[str], str]
    _seen: dict[int, str] = field(default_factory=dict, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def build(cls, titles: list[str], text: Callable[[int], str]) -> NodeTitles:
        """From each node's document title (raw) and its raw text by row."""
        from graphlake.kernels.text.entities import bare_title, normalise, strip_parentheticals
        from graphlake.kernels.text.stopwords import ENGLISH

        bare = [bare_title(title) for title in titles]
        linkable = [b if len(b) >= SHORTEST_TITLE and b not in ENGLISH else None for b in bare]
        probes = [max(_RUN.findall(strip_parentheticals(title).lower()), key=len, default="") for title in titles]
        return cls(linkable, probes, text, normalise)

    def padded(self, row: int) -> str:
        """The node's normalised text between spaces, for word-bounded ``in`` tests."""
        found = self._seen.get(row)
        if found is None:
            found = f" {self.normalise(self.text(row))} "
            with self._lock:
                if len(self._seen) >= CACHED:
                    self._seen.pop(next(iter(self._seen)))
                self._seen[row] = found
        return found


def title_signals(titles: NodeTitles, rows: np.ndarray, documents: np.ndarray, anchors: np.ndarray, query: str) -> np.ndarray:
    """(candidates, 3): :data:`TITLES` for the candidates at node ``rows`` (of ``documents``, a code per
    candidate) beside the ``anchors`` (positions into them), ``query`` normalised as the texts are."""
    named = [f" {titles.titles[row]} " if titles.titles[row] else None for row in rows.tolist()]
    anchor_texts = [(j, titles.padded(int(rows[j]))) for j in anchors.tolist()]
    probes = [(j, named[j], titles.probes[int(rows[j])]) for j in anchors.tolist() if named[j] is not None]
    asked = f" {query} "
    out = np.zeros((len(rows), len(TITLES)), np.float64)
    for i, title in enumerate(named):
        if title is not None:
            out[i, 2] = title in asked
    for j, text in anchor_texts:  # loops over the few anchors outside, the candidates inside: no generator per candidate
        for i, title in enumerate(named):
            if documents[i] != documents[j] and title is not None and title in text:
                out[i, 0] = 1.0
    if probes:
        raws = [titles.text(row).lower() for row in rows.tolist()]
        for j, anchor_title, probe in probes:
            for i, raw in enumerate(raws):
                if documents[i] != documents[j] and probe in raw and anchor_title in titles.padded(int(rows[i])):
                    out[i, 1] = 1.0
    return out


@dataclass(frozen=True)
class NodeEntities:
    """Which entities each node mentions (rows: nodes, columns: entities, 0/1), each entity's inverse
    document frequency, and the entity column of each node's title (-1 where the title is no entity)."""

    mentions: sp.csr_matrix
    idf: np.ndarray
    title: np.ndarray
    columns: dict[str, int]  # entity norm -> column

    @classmethod
    def build(cls, n_nodes: int, norms: list[str], entity: np.ndarray, node: np.ndarray, title_norms: list[str]) -> NodeEntities:
        """From entity->node mentions given as codes into ``norms`` and node rows; ``title_norms``: each
        node's title, normalised and alias-linked as the mentions were."""
        mentions = sp.csr_matrix((np.ones(len(node), np.float32), (node, entity)), shape=(n_nodes, len(norms)))
        mentions.sum_duplicates()
        mentions.data[:] = 1.0
        df = np.diff(mentions.tocsc().indptr)
        idf = np.log((1 + n_nodes) / (1 + df)).astype(np.float32)
        columns = {norm: i for i, norm in enumerate(norms)}
        title = np.fromiter((columns.get(t, -1) for t in title_norms), np.int64, count=n_nodes)
        return cls(mentions, idf, title, columns)


def anchors_of(scores: np.ndarray, documents: np.ndarray, count: int) -> np.ndarray:
    """Positions of the best-scored candidate of each of the ``count`` best documents, best first (ties to
    the earlier position): chunks of one page are one anchor, as they are never each other's partners."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    _, first = np.unique(documents[order], return_index=True)
    return order[np.sort(first)][:count]


def _best_other(pairs: np.ndarray, documents: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Per candidate, the largest of its values against the anchors of other documents (-inf with none)."""
    pairs = np.where(documents[:, None] == documents[anchors][None, :], -np.inf, pairs.astype(np.float64))
    return pairs.max(axis=1) if pairs.shape[1] else np.full(len(pairs), -np.inf)


def dense_signals(vectors: np.ndarray, query: np.ndarray, documents: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """(candidates, 3): :data:`DENSE` for candidates of unit-normalisable ``vectors`` (of ``documents``)
    and a ``query`` vector."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    asked = query / max(float(np.linalg.norm(query)), 1e-12)
    expanded = unit[anchors] + asked
    expanded /= np.maximum(np.linalg.norm(expanded, axis=1, keepdims=True), 1e-12)
    cosine = _best_other(unit @ unit[anchors].T, documents, anchors)
    expansion = _best_other(unit @ expanded.T, documents, anchors)
    out = np.stack([cosine, expansion, expansion - unit @ asked], axis=1)
    out[~np.isfinite(out)] = np.nan
    return out


def entity_signals(entities: NodeEntities, rows: np.ndarray, documents: np.ndarray, anchors: np.ndarray, query_columns: np.ndarray) -> np.ndarray:
    """(candidates, 5): :data:`ENTITIES` for the candidates at node ``rows`` (of ``documents``),
    ``anchors`` positions into them, the question's entity columns ``query_columns``."""
    mentions = entities.mentions[rows]
    weighted = mentions.multiply(entities.idf[None, :]).tocsr()
    anchored = mentions[anchors]
    shared = _best_other((weighted @ anchored.T).toarray(), documents, anchors)
    titles = entities.title[rows]
    named = titles >= 0
    link = np.zeros((len(rows), len(anchors)), np.float64)
    if named.any():  # the candidate's title among an anchor's mentions
        link[named] = anchored[:, titles[named]].toarray().T
    anchor_titles = titles[anchors]
    for j in np.flatnonzero(anchor_titles >= 0):  # an anchor's title among the candidate's mentions
        link[:, j] = np.maximum(link[:, j], mentions[:, anchor_titles[j]].toarray().ravel())
    linked = _best_other(link, documents, anchors)
    asked = np.unique(query_columns)
    covered = weighted[:, asked].toarray() if len(asked) else np.zeros((len(rows), 0), np.float32)
    first = anchored[0, asked].toarray().ravel() > 0 if len(anchors) and len(asked) else np.zeros(len(asked), bool)
    new = covered[:, ~first].sum(axis=1)
    if len(anchors):  # the first anchor's document is measured against nothing above it
        own = documents == documents[anchors[0]]
        new[own] = covered[own].sum(axis=1)
    out = np.stack([shared, linked, covered.sum(axis=1), new, np.isin(titles, asked) & named], axis=1).astype(np.float64)
    out[~np.isfinite(out)] = np.nan
    return out
