"""GRASP's SKBs in the lake: built per corpus and source, and loaded for Stage 1 (``skb_stage_one.py``)
into an in-memory DuckDB with their node vectors.

Which SKBs a corpus gets follows its format (``retrieval/corpus_policy.py``): the SQL schema graph for
Spider/BIRD, the extracted 2Wiki KB and its oracle for 2Wiki, the entity graph for anything else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from graphlake.kernels.plan import skb_builders
from graphlake.kernels.plan.plans import Schema
from graphlake.kernels.plan.sql import Linked, link
from graphlake.kernels.text.entities import normalise
from graphlake.retrieval.index.kinds import read_models
from graphlake.retrieval.index.tables import CorpusTables
from graphlake.warehouse.digest import content_hash
from graphlake.warehouse.storage import LakeStorage, StorageError

SKB_ARTIFACT = "skb"
VECTORS_ARTIFACT = "skb_vectors"
VECTORS_FILE = "vectors.npz"
WIKI_SOURCES = ("wiki_rules", "wiki_evidence")


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
    """One (corpus, source) SKB ready to execute plans: its tables in an in-memory DuckDB, its node
    vectors (name, and document: the ``dense`` index's rows for passage and table nodes), its schema.
    Shared by the requests served at once: each statement runs on a cursor of its own (``cursor``), as
    one DuckDB connection runs one statement at a time and refuses a second."""

    def __init__(self, tables: CorpusTables, source: str, dense: Callable[[], np.ndarray]) -> None:
        """``dense``: the corpus's ``dense`` index, asked for only where the SKB has passage or table nodes."""
        self.corpus, self.source = tables.corpus, source
        partition = {"corpus": tables.corpus, "source": source}
        lake = tables.lake
        try:
            nodes, edges = lake.read("skb_nodes", partition), lake.read("skb_edges", partition)
        except StorageError:
            raise StorageError(f"corpus {tables.corpus!r} has no {source!r} SKB; materialize skb (sources: {source})") from None
        self._database = duckdb.connect()
        self._database.register("nodes_in", nodes)
        self._database.register("edges_in", edges)
        self._database.execute("CREATE TABLE skb_nodes AS SELECT * FROM nodes_in")
        self._database.execute("CREATE TABLE skb_edges AS SELECT * FROM edges_in")
        self._database.unregister("nodes_in")
        self._database.unregister("edges_in")
        self.ids: list[str] = nodes.column("skb_id").to_pylist()
        self.labels = np.asarray(nodes.column("label").to_pylist(), dtype=object)
        self.names: list[str] = nodes.column("name").to_pylist()
        backed = nodes.column("node_id").to_pylist()
        position = {node_id: row for row, node_id in enumerate(tables.node_ids)}
        self.node_row = np.array([position.get(n, -1) if n is not None else -1 for n in backed], dtype=np.int64)
        self.by_id = {skb_id: i for i, skb_id in enumerate(self.ids)}
        self.by_label = {label: np.flatnonzero(self.labels == label) for label in set(self.labels.tolist())}
        self._load_vectors(tables, dense)
        with self.cursor() as con:
            rows = con.execute(
                "SELECT s.label, e.relation, d.label FROM skb_edges e JOIN skb_nodes s ON s.skb_id = e.src JOIN skb_nodes d ON d.skb_id = e.dst GROUP BY ALL"
            ).fetchall()
        self.schema = Schema.of(rows, set(self.labels.tolist()))

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of this thread's own to the SKB's tables (close it: ``with skb.cursor() as con``)."""
        return self._database.cursor()

    def _load_vectors(self, tables: CorpusTables, dense: Callable[[], np.ndarray]) -> None:
        """The distinct texts' vectors and each SKB node's rows into them, not one gathered copy per
        node and kind: two hundred thousand SKB nodes would hold 600 MB of copies, mostly zeros."""
        folder = tables.lake.artifact(VECTORS_ARTIFACT, {"corpus": self.corpus})
        for role, made_by in read_models(folder).items():
            tables.check_model(VECTORS_ARTIFACT, role, made_by)
        stored = load_vectors(folder)
        if "vector" not in stored:
            raise StorageError(f"skb_vectors of corpus {self.corpus!r} are in an older layout; materialize skb_vectors again")
        row_of = {skb_id: i for i, skb_id in enumerate(stored["ids"].tolist())}
        missing = next((skb_id for skb_id in self.ids if skb_id not in row_of), None)
        if missing is not None:
            raise StorageError(f"skb_vectors of corpus {self.corpus!r} lack SKB node {missing!r}; materialize skb_vectors again")
        order = np.fromiter((row_of[skb_id] for skb_id in self.ids), np.int64, len(self.ids))
        self._texts, self._name_row, self._doc_row = stored["vector"], stored["name_row"][order], stored["doc_row"][order]
        self._dense = dense() if (self.node_row >= 0).any() else None

    def name_cosines(self, positions: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """The cosines of these SKB nodes' name vectors with ``vector``."""
        return _cosines(self._texts, self._name_row[positions], vector)

    def doc_cosines(self, positions: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """The cosines of these SKB nodes' document vectors with ``vector``: a passage or table node's row
        of the ``dense`` index, else its own text's vector, else 0 (an entity has no document)."""
        found = np.zeros(len(positions), np.float32)
        nodes, docs = self.node_row[positions], self._doc_row[positions]
        backed = nodes >= 0
        if backed.any():
            found[backed] = _cosines(self._dense, nodes[backed], vector)
        own = ~backed & (docs >= 0)
        found[own] = _cosines(self._texts, docs[own], vector)
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

    @cached_property
    def _neighbours(self) -> dict[str, dict[str, list[str]]]:
        """skb_id -> relation -> neighbour names (both directions, by name), for serialisation."""
        found: dict[str, dict[str, list[str]]] = {}
        with self.cursor() as con:
            rows = con.execute(
                "SELECT a, relation, n.name FROM (SELECT src AS a, relation, dst AS b FROM skb_edges UNION SELECT dst, relation, src FROM skb_edges) "
                "JOIN skb_nodes n ON n.skb_id = b ORDER BY a, relation, n.name, b"
            ).fetchall()
        for skb_id, relation, name in rows:
            found.setdefault(skb_id, {}).setdefault(relation, []).append(name)
        return found

    def serialised(self, row: int, text: str, max_neighbours: int = 10, max_field_tokens: int = 300) -> str:
        """A ``nodes`` row as App. B.6 writes a candidate: type, name and text, neighbours by relation."""
        from graphlake.kernels.plan.skb_serialise import serialise

        position = self.position_of_row.get(int(row))
        if position is None:  # a node the SKB does not hold (a later chunk of a document): its text alone
            return serialise("passage", [("text", text)], {}, max_neighbours, max_field_tokens)
        skb_id = self.ids[position]
        fields = [("name", self.names[position]), ("text", text)]
        return serialise(str(self.labels[position]), fields, self._neighbours.get(skb_id, {}), max_neighbours, max_field_tokens)

    def link(self, text_vector: np.ndarray, label: str, mode: str, k: int, tau: float) -> Linked:
        rows = self.by_label.get(label, np.zeros(0, np.int64))
        cosines = (self.name_cosines if mode == "name" else self.doc_cosines)(rows, text_vector)
        kept = link(cosines, k, tau)
        return Linked([self.ids[rows[i]] for i in kept.tolist()], cosines[kept].astype(float).tolist())


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
