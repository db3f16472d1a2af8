"""Allan-Poe's knowledge-graph part (§3.4, §4.2.3): entities, their relations and the nodes holding
them, kept beside the hybrid graph so a query that names entities walks and rewards along the KG.

Built from a ``triples`` table the same way as the ``logical_edges`` asset (``kernels/text/triples.py``):
a node holds the entities its own triples name (subjects and objects, ``normalize_entity``), and the
relation graph links subject to object. The node-level logical edges of §3.4 (node X to every node
holding an entity that one of X's entities points at) are not stored: the search derives them from
these two small matrices, which also serve the hop counts Algorithm 2 rewards.

Hops are counted on the relation graph taken undirected (a question may name either end of a
relation), from the query's entities (hop 0), up to ``kg_hops``. A node's hop is the least hop of its
entities, and it earns ``kg_weight / max(hop, 1)`` (the authors' code: hop-0 entry nodes get the
whole weight, a node reached through h relations ``1/h`` of it). The reward is a function of the node
and the query alone, not of the path the walk took, so the exact scorer and the walk rank the same
function (the paper rewards along the walk's own path).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from graphlake.kernels.text.entities import normalise, spacy_entities
from graphlake.kernels.text.triples import normalize_entity

ENTITIES_FILE, HOLDERS_FILE, RELATIONS_FILE = "kg_entities.json", "entity_nodes.npz", "entity_graph.npz"
HOPS = 3  # the hop limit of the authors' code (``kg_hop < 3``), the operators' default


@dataclass(frozen=True)
class KnowledgeGraph:
    """Entity norms, relation names, ``holders`` (entities × nodes, 1 where the node names the entity)
    and the relation edges ``source → target`` with their relation ids, one per distinct triple."""

    extractor: str
    entities: list[str]
    relations: list[str]
    holders: sp.csr_matrix
    source: np.ndarray
    target: np.ndarray
    relation: np.ndarray

    @classmethod
    def from_triples(cls, extractor: str, rows: Iterable[tuple[int, str, str, str]], n_nodes: int) -> KnowledgeGraph:
        """From ``(node row, subject, relation, object)``; a triple whose two ends normalise alike is dropped."""
        entity_ids: dict[str, int] = {}
        relation_ids: dict[str, int] = {}
        held: set[tuple[int, int]] = set()
        triples: set[tuple[int, int, int]] = set()
        for row, subject, relation, obj in rows:
            s, t = normalize_entity(subject), normalize_entity(obj)
            if not s or not t or s == t:
                continue
            a, b = entity_ids.setdefault(s, len(entity_ids)), entity_ids.setdefault(t, len(entity_ids))
            held.update(((a, row), (b, row)))
            triples.add((a, relation_ids.setdefault(" ".join(relation.casefold().split()), len(relation_ids)), b))
        pairs = np.array(sorted(held), dtype=np.int64).reshape(-1, 2)
        holders = sp.csr_matrix((np.ones(len(pairs), np.int8), (pairs[:, 0], pairs[:, 1])), shape=(len(entity_ids), n_nodes))
        edges = np.array(sorted(triples), dtype=np.int32).reshape(-1, 3)
        return cls(extractor, list(entity_ids), list(relation_ids), holders, edges[:, 0], edges[:, 2], edges[:, 1])

    def save(self, folder: Path) -> None:
        (folder / ENTITIES_FILE).write_text(json.dumps({"extractor": self.extractor, "entities": self.entities, "relations": self.relations}), encoding="utf-8")
        sp.save_npz(folder / HOLDERS_FILE, self.holders)
        np.savez(folder / RELATIONS_FILE, source=self.source, target=self.target, relation=self.relation)

    @classmethod
    def load(cls, folder: Path) -> KnowledgeGraph | None:
        """The folder's knowledge graph, ``None`` when the index was built without one."""
        if not (folder / ENTITIES_FILE).is_file():
            return None
        names = json.loads((folder / ENTITIES_FILE).read_text(encoding="utf-8"))
        with np.load(folder / RELATIONS_FILE) as edges:
            source, target, relation = edges["source"], edges["target"], edges["relation"]
        return cls(names["extractor"], names["entities"], names["relations"], sp.load_npz(folder / HOLDERS_FILE).tocsr(), source, target, relation)

    def edge_bytes(self) -> int:
        """What the logical structures take: the entity→node matrix and the relation edges."""
        holders = self.holders
        return int(holders.indptr.nbytes + holders.indices.nbytes + self.source.nbytes + self.target.nbytes + self.relation.nbytes)

    @cached_property
    def node_entities(self) -> sp.csr_matrix:
        """Nodes × entities: what each node names."""
        return self.holders.T.tocsr()

    @cached_property
    def undirected(self) -> sp.csr_matrix:
        """Entities × entities, linked when a relation joins them either way (the graph hops are counted on)."""
        n = len(self.entities)
        both = sp.csr_matrix((np.ones(2 * len(self.source), np.int8), (np.r_[self.source, self.target], np.r_[self.target, self.source])), shape=(n, n))
        both.sum_duplicates()
        both.sort_indices()
        return both

    @cached_property
    def _lookup(self) -> dict[str, list[int]]:
        keys: dict[str, list[int]] = {}
        for entity, norm in enumerate(self.entities):
            keys.setdefault(normalise(norm), []).append(entity)
        return keys

    def match(self, mentions: Iterable[str], aliases: Mapping[str, str]) -> np.ndarray:
        """The entities the query's mentions name: compared after ``normalise``, an alias read as the title it abbreviates."""
        found = set()
        for mention in mentions:
            key = normalise(mention)
            found.update(self._lookup.get(aliases.get(key, key), ()))
        return np.array(sorted(found), dtype=np.int64)

    def query_entities(self, texts: list[str], aliases: Mapping[str, str]) -> list[np.ndarray]:
        """The KG entities each query names: its spaCy NER mentions, ``match``ed."""
        return [self.match([name for name, _ in mentions], aliases) for mentions in spacy_entities(texts)]

    def hops(self, seeds: np.ndarray, limit: int) -> np.ndarray:
        """Each entity's hop distance from ``seeds`` on the undirected relation graph, −1 past ``limit``."""
        hop = np.full(len(self.entities), -1, np.int32)
        frontier = np.unique(np.asarray(seeds, dtype=np.int64))
        hop[frontier] = 0
        graph = self.undirected
        for step in range(1, limit + 1):
            if len(frontier) == 0:
                break
            reached = np.unique(graph[frontier].indices)
            frontier = reached[hop[reached] < 0]
            hop[frontier] = step
        return hop

    def node_hops(self, entity_hops: np.ndarray) -> np.ndarray:
        """Each node's least entity hop, −1 for a node holding no reached entity."""
        reached = np.flatnonzero(entity_hops >= 0)
        best = np.full(self.holders.shape[1], np.iinfo(np.int32).max, np.int64)
        part = self.holders[reached]
        np.minimum.at(best, part.indices, np.repeat(entity_hops[reached], np.diff(part.indptr)))
        return np.where(best == np.iinfo(np.int32).max, -1, best).astype(np.int32)


def reward(node_hops: np.ndarray, weight: float) -> np.ndarray:
    """``weight / max(hop, 1)`` for each node within the hop limit, 0 for the others."""
    return np.where(node_hops >= 0, weight / np.maximum(node_hops, 1), 0.0)
