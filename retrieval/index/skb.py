"""GRASP's SKBs in the lake: built per corpus and source, and loaded for Stage 1 (``skb_stage_one.py``)
into an in-memory DuckDB with their node vectors.

Which SKBs a corpus gets is its declared linking (``warehouse/linking.py``): by default the SQL schema graph for
Spider/BIRD, the extracted 2Wiki KB and its oracle for 2Wiki, the entity graph for anything else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa

from graphlake.kernels.plan import skb_builders
from graphlake.kernels.plan.match import Adjacency
from graphlake.kernels.plan.plans import Schema
from graphlake.kernels.plan.sql import Linked, link
from graphlake.kernels.text.entities import normalise
from graphlake.retrieval.index.kinds import read_models
from graphlake.retrieval.index.snapshot import Snapshot
from graphlake.warehouse.digest import content_hash
from graphlake.warehouse.storage import LakeStorage, StorageError

SKB_ARTIFACT = "skb"
VECTORS_ARTIFACT = "skb_vectors"
VECTORS_FILE = "vectors.npz"
WIKI_SOURCES = ("wiki_rules", "wiki_evidence")


def adjacency_file(source: str) -> str:
    """The file of the ``skb`` artefact holding a source's adjacency (``kernels/plan/match.py``)."""
    return f"adjacency-{source}.npz"


def build(lake: LakeStorage, corpus: str, source: str, train_corpus: str | None) -> skb_builders.SKB:
    """One source's SKB for a corpus, from the lake's tables; only the oracle reads questions."""
    part = {"corpus": corpus}
    documents, nodes = lake.read("documents", part), lake.read("nodes", part)
    if source == "sql_schema":
        return skb_builders.sql_schema(documents, nodes, lake.read("foreign_keys", part))
    if source == "wiki_rules":
        return skb_builders.wiki_rules(documents, nodes)
    if source == "wiki_evidence":
        return skb_builders.wiki_evidence(documents, nodes, evidences(lake, [corpus, *([train_corpus] if train_corpus else [])]))
    if source == "entities":
        citations = lake.read("edges", part | {"kind": "citation"}) if lake.has("edges", part | {"kind": "citation"}) else None
        spacy = part | {"extractor": "spacy"}
        return skb_builders.entities_skb(documents, nodes, lake.read("entities", spacy), lake.read("mentions", spacy), citations)
    raise ValueError(f"unknown SKB source {source!r}; one of {', '.join(skb_builders.SOURCES)}")


def evidences(lake: LakeStorage, corpora: list[str]) -> list[tuple[str, list]]:
    """(query id, gold evidence triples) of every question of these corpora (2Wiki keeps them in the metadata)."""
    found = []
    for corpus in corpora:
        for row in lake.read("queries", {"corpus": corpus}).to_pylist():
            found.append((row["query_id"], json.loads(row["metadata"] or "{}").get("evidences") or []))
    return found


def coverage(lake: LakeStorage, corpus: str, extracted: skb_builders.SKB) -> dict:
    """The extracted 2Wiki KB's share of the corpus's gold evidence triples, per relation and overall."""
    documents, nodes = lake.read("documents", {"corpus": corpus}), lake.read("nodes", {"corpus": corpus})
    linker = skb_builders.TitleLinker({skb_id: title for skb_id, title, _ in skb_builders.passages(documents, nodes)})
    triples = [tuple(t) for _, ts in evidences(lake, [corpus]) for t in ts if len(t) == 3]
    per = skb_builders.coverage(extracted, triples, linker)
    total = sum(v["triples"] for v in per.values())
    return {"share": round(sum(v["recovered"] for v in per.values()) / total, 4) if total else None, "triples": total, "per_relation": per}


class LoadedSKB:
    """One (corpus, source) SKB ready to execute plans: its nodes, its adjacency as the ``skb`` asset
    stored it (``kernels/plan/match.py``), its node vectors (name, and document: the ``dense`` index's
    rows for passage and table nodes), its schema. Read only once loaded: the requests served at once share it."""

    def __init__(self, tables: Snapshot, source: str, dense: Callable[[], np.ndarray]) -> None:
        """``dense``: the corpus's ``dense`` index, asked for only where the SKB has passage or table nodes."""
        self.corpus, self.source = tables.corpus, source
        lake = tables.lake
        try:
            nodes = lake.read("skb_nodes", {"corpus": tables.corpus, "source": source})
        except StorageError:
            raise StorageError(f"corpus {tables.corpus!r} has no {source!r} SKB; materialize skb (sources: {source})") from None
        stored = lake.artifact(SKB_ARTIFACT, {"corpus": tables.corpus}) / adjacency_file(source)
        if not stored.exists():
            raise StorageError(f"the {source!r} SKB of corpus {tables.corpus!r} is in an older layout (no adjacency); materialize skb again")
        self.adjacency = Adjacency.load(stored)
        self.ids: list[str] = nodes.column("skb_id").to_pylist()
        if self.adjacency.size != len(self.ids):
            raise StorageError(f"the {source!r} SKB of corpus {tables.corpus!r}: its adjacency holds {self.adjacency.size:,} nodes, skb_nodes {len(self.ids):,}; materialize skb again")
        self.labels = np.asarray(nodes.column("label").to_pylist(), dtype=object)
        self.names: list[str] = nodes.column("name").to_pylist()
        backed = nodes.column("node_id").to_pylist()
        position = {node_id: row for row, node_id in enumerate(tables.node_ids)}
        self.node_row = np.array([position.get(n, -1) if n is not None else -1 for n in backed], dtype=np.int64)
        self.by_id = {skb_id: i for i, skb_id in enumerate(self.ids)}
        self.by_label = {label: np.flatnonzero(self.labels == label) for label in set(self.labels.tolist())}
        self._load_vectors(tables, dense)
        self.schema = Schema.of(self.adjacency.patterns(), set(self.labels.tolist()))

    def _load_vectors(self, tables: Snapshot, dense: Callable[[], np.ndarray]) -> None:
        """The distinct texts' vectors and each SKB node's rows into them, not one copy per node and kind
        (two hundred thousand SKB nodes would hold 600 MB of copies, mostly zeros): names by label, and
        the documents of the nodes that have no ``nodes`` row."""
        folder = tables.lake.artifact(VECTORS_ARTIFACT, {"corpus": self.corpus})
        for role, made_by in read_models(folder).items():
            tables.models.check(VECTORS_ARTIFACT, role, made_by)
        stored = load_vectors(folder)
        if "vector" not in stored:
            raise StorageError(f"skb_vectors of corpus {self.corpus!r} are in an older layout; materialize skb_vectors again")
        row_of = {skb_id: i for i, skb_id in enumerate(stored["ids"].tolist())}
        missing = next((skb_id for skb_id in self.ids if skb_id not in row_of), None)
        if missing is not None:
            raise StorageError(f"skb_vectors of corpus {self.corpus!r} lack SKB node {missing!r}; materialize skb_vectors again")
        order = np.fromiter((row_of[skb_id] for skb_id in self.ids), np.int64, len(self.ids))
        vectors, name_row, doc_row = stored["vector"], stored["name_row"][order], stored["doc_row"][order]
        # names laid out label by label, each distinct name of a label once: an anchor of a label reads
        # one contiguous block (at 100k passages a gather of a label's rows copied tens of MB a query),
        # and nodes of one name score alike to the bit, so the linker's ties stay ties
        blocks, self._name_row, self._label_block, start = [], np.zeros(len(self.ids), np.int64), {}, 0
        for label in sorted(self.by_label):
            rows = self.by_label[label]
            distinct, inverse = np.unique(name_row[rows], return_inverse=True)
            blocks.append(distinct)
            self._name_row[rows] = start + inverse
            self._label_block[label] = (start, start + len(distinct))
            start += len(distinct)
        self._names = vectors[np.concatenate(blocks)] if blocks else vectors[:0]
        own, inverse = np.unique(doc_row, return_inverse=True)  # the documents of nodes with no ``nodes`` row (-1: none)
        self._docs, self._doc_row = vectors[np.maximum(own, 0)] if len(vectors) else vectors, np.where(doc_row >= 0, inverse, -1)
        self._dense = dense() if (self.node_row >= 0).any() else None

    def doc_cosines(self, positions: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """The cosines of these SKB nodes' document vectors with ``vectors`` (one, or a column each): a
        passage or table node's row of the ``dense`` index, else its own text's vector, else 0 (an entity
        has no document)."""
        found = np.zeros((len(positions), *vectors.shape[1:]), np.float32)
        nodes, docs = self.node_row[positions], self._doc_row[positions]
        backed = nodes >= 0
        if backed.any():
            found[backed] = _cosines(self._dense, nodes[backed], vectors)
        own = ~backed & (docs >= 0)
        found[own] = _cosines(self._docs, docs[own], vectors)
        return found

    @cached_property
    def label_of_name(self) -> dict[str, str]:
        """Normalised name (and title alias) -> label of the retrievable node so named: how the rules planner types a span."""
        named = {self.names[i]: self.labels[i] for i in np.flatnonzero(self.node_row >= 0)}
        aliases = skb_builders.title_aliases(named)
        found = {normalise(name): label for name, label in named.items()}
        return found | {alias: found[target] for alias, target in aliases.items() if target in found}

    @cached_property
    def position_of_row(self) -> dict[int, int]:
        """SKB position of each ``nodes`` row that is an SKB node."""
        return {int(row): position for position, row in enumerate(self.node_row.tolist()) if row >= 0}

    def neighbour_names(self, position: int) -> dict[str, list[str]]:
        """Relation -> the names of an SKB node's neighbours along it (both directions; by name, then id), for serialisation."""
        found = {}
        for relation in sorted(self.adjacency.relations):
            near = self.adjacency.neighbours(relation, position).tolist()
            if near:
                found[relation] = [self.names[n] for n in sorted(near, key=lambda n: (self.names[n], n))]
        return found

    def serialised(self, row: int, text: str, max_neighbours: int = 10, max_field_tokens: int = 300) -> str:
        """A ``nodes`` row as App. B.6 writes a candidate: type, name and text, neighbours by relation."""
        from graphlake.kernels.plan.skb_serialise import serialise

        position = self.position_of_row.get(int(row))
        if position is None:  # a node the SKB does not hold (a later chunk of a document): its text alone
            return serialise("passage", [("text", text)], {}, max_neighbours, max_field_tokens)
        fields = [("name", self.names[position]), ("text", text)]
        return serialise(str(self.labels[position]), fields, self.neighbour_names(position), max_neighbours, max_field_tokens)

    def link(self, vectors: np.ndarray, anchors: Sequence[tuple[str, str]], limits: Mapping[str, tuple[int, float]]) -> list[Linked]:
        """Each anchor's bindings, an anchor a (label, match mode) and its row of ``vectors``; ``limits``
        (k, tau) per mode. The anchors of one label and mode are compared with its nodes in one product."""
        found: list[Linked | None] = [None] * len(anchors)
        groups: dict[tuple[str, str], list[int]] = {}
        for number, anchor in enumerate(anchors):
            groups.setdefault(anchor, []).append(number)
        for (label, mode), members in groups.items():
            rows = self.by_label.get(label, np.zeros(0, np.int64))
            if mode == "name":  # the label's block of distinct names (``_load_vectors``)
                start, end = self._label_block.get(label, (0, 0))
                cosines = (self._names[start:end] @ vectors[members].T)[self._name_row[rows] - start]
            else:
                cosines = self.doc_cosines(rows, vectors[members].T)
            k, tau = limits[mode]
            for column, number in enumerate(members):
                scores = np.ascontiguousarray(cosines[:, column])
                kept = link(scores, k, tau)
                found[number] = Linked([self.ids[rows[i]] for i in kept.tolist()], scores[kept].astype(float).tolist())
        return found


def _cosines(matrix: np.ndarray, rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix[rows] @ vector``; for many rows, the whole product indexed, which copies no rows (a
    document-mode anchor is compared with every passage)."""
    if len(rows) * 4 > len(matrix):
        return (matrix @ vector)[rows]
    return matrix[rows] @ vector


def vectors_for(nodes: list[pa.Table], encode, previous: dict[str, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], int]:
    """Name vectors of every SKB node of these tables, and document vectors of those with no ``nodes``
    row (the others reuse ``dense_vectors``), as one row per distinct text: an entity whose name is its
    text, or a title many passages share, is encoded once, and a text the ``previous`` build encoded
    (matched by content hash) not at all. Also returns how many texts were encoded."""
    seen: dict[str, tuple[str, str | None]] = {}
    for table in nodes:
        for skb_id, name, text, node_id in zip(*(table.column(c).to_pylist() for c in ("skb_id", "name", "text", "node_id")), strict=True):
            seen.setdefault(skb_id, (name, text if node_id is None else None))
    ids = sorted(seen)
    row_of: dict[str, int] = {}
    for name, text in (seen[skb_id] for skb_id in ids):
        row_of.setdefault(name, len(row_of))
        if text is not None:
            row_of.setdefault(text, len(row_of))
    texts = list(row_of)
    hashes = [content_hash(text) for text in texts]
    cached = dict(zip(previous["hash"].tolist(), previous["vector"], strict=True)) if previous is not None else {}
    missing = [row for row, digest in enumerate(hashes) if digest not in cached]
    encoded = dict(zip(missing, encode([texts[row] for row in missing]), strict=True))
    vectors = np.stack([encoded[row] if row in encoded else cached[digest] for row, digest in enumerate(hashes)]) if texts else np.zeros((0, 0), np.float32)
    found = {
        "ids": np.asarray(ids),
        "hash": np.asarray(hashes),
        "vector": vectors.astype(np.float32, copy=False),
        "name_row": np.array([row_of[seen[skb_id][0]] for skb_id in ids], dtype=np.int64),
        "doc_row": np.array([row_of[text] if (text := seen[skb_id][1]) is not None else -1 for skb_id in ids], dtype=np.int64),
    }
    return found, len(missing)


def load_vectors(folder: Path) -> dict[str, np.ndarray]:
    with np.load(folder / VECTORS_FILE, allow_pickle=False) as stored:
        return {key: stored[key] for key in stored.files}


def save_vectors(folder: Path, vectors: dict[str, np.ndarray]) -> None:
    np.savez(folder / VECTORS_FILE, **vectors)
