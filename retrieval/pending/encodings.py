"""The encodings of pending documents, made once: by the process that acknowledges a write, before it
does (``api/searchers.py``), and kept beside the log as the write's vectors,
``writes/<corpus>/vectors/<seq>.npz`` (``warehouse/write_log.py`` removes them with their entry). Every
searcher of the lake reads them back, a server restarted or another one, so a search encodes nothing
but a write whose vectors were never kept (a crash between its entry and its vectors, another model
since) and keeps them then. The nodes themselves are chunked again when read (deterministic, cheap);
what the file holds is what cost the time: the dense rows and the SPLADE weights, with the models and
the chunking that made them, checked on reading, and each node's content hash, by which the fold's
build takes them as it takes the previous build's vectors (``assets/vectors/encoders.py``).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from graphlake.retrieval.index.index_set import IndexSet
from graphlake.retrieval.index.tables import retrieval_text
from graphlake.warehouse.digest import content_hash
from graphlake.warehouse.encoder_specs import same_weights
from graphlake.warehouse.node_rows import node_rows
from graphlake.warehouse.write_log import VECTORS


@dataclass(frozen=True)
class Encoded:
    """One pending document's nodes (as the build's ``node_rows`` makes them) and vectors, reused while its title and text stay."""

    title: str
    text: str
    nodes: pa.Table
    dense: np.ndarray
    splade: sp.csr_matrix
    stems: tuple[tuple[str, ...], ...]  # each node's BM25 tokens, weighted by the segment as a whole


def encode(indexes: IndexSet, documents: list[dict]) -> dict[str, Encoded]:
    """``documents`` (rows of the documents table) chunked as the build chunks them and encoded by the
    corpus's models, by id."""
    nodes = _chunked(indexes, documents)
    texts = _texts(documents, nodes)
    dense, splade = (indexes.encoders.dense_passages(texts), indexes.encoders.splade(texts)) if texts else (np.zeros((0, 1), np.float32), sp.csr_matrix((0, 1)))
    return _encoded(documents, nodes, texts, dense, sp.csr_matrix(splade))


def store(log: Path, seq: int, indexes: IndexSet, encoded: dict[str, Encoded]) -> None:
    """Keep write ``seq``'s vectors beside the log (replaced whole: a reader sees all of them or none)."""
    parts = list(encoded.values())
    splade = sp.csr_matrix(sp.vstack([e.splade for e in parts], format="csr")) if parts else sp.csr_matrix((0, 1))
    folder = Path(log) / VECTORS
    folder.mkdir(exist_ok=True)
    staged = folder / f".{uuid.uuid4().hex}.tmp"
    try:
        with open(staged, "wb") as handle:
            np.savez(
                handle,
                made_by=np.array(json.dumps(_made_by(indexes))),
                ids=np.array(list(encoded), dtype=np.str_),
                hashes=np.array([content_hash(retrieval_text(e.title, t)) for e in parts for t in e.nodes.column("text").to_pylist()], dtype=np.str_),
                dense=np.concatenate([e.dense for e in parts]) if parts else np.zeros((0, 1), np.float32),
                splade_data=splade.data, splade_indices=splade.indices, splade_indptr=splade.indptr, splade_shape=np.array(splade.shape),
            )  # fmt: skip
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staged, folder / f"{seq:012d}.npz")
    finally:
        staged.unlink(missing_ok=True)


def stored(log: Path, seq: int, indexes: IndexSet, documents: list[dict]) -> dict[str, Encoded] | None:
    """Write ``seq``'s kept vectors of ``documents`` (its upserted ones, as rows), None when none were
    kept, or by other models, or for other nodes than these documents chunk into now."""
    try:
        with np.load(Path(log) / VECTORS / f"{seq:012d}.npz", allow_pickle=False) as kept:
            if json.loads(str(kept["made_by"])) != _made_by(indexes) or kept["ids"].tolist() != [d["doc_id"] for d in documents]:
                return None
            dense, shape = kept["dense"], tuple(kept["splade_shape"])
            splade = sp.csr_matrix((kept["splade_data"], kept["splade_indices"], kept["splade_indptr"]), shape=shape)
    except (OSError, ValueError, KeyError):  # absent or unreadable: encoded again, never served wrong
        return None
    nodes = _chunked(indexes, documents)
    texts = _texts(documents, nodes)
    if len(texts) != dense.shape[0] or len(texts) != splade.shape[0]:
        return None
    return _encoded(documents, nodes, texts, dense, splade)


def kept_rows(log: Path, role: str, made_by: dict[str, str]) -> pa.Table:
    """Every kept vector of the log's pending writes made by ``made_by``'s weights for ``role``
    (``dense`` or ``sparse``), as the build's vector rows (content_hash, dense, indices, values): what
    a fold takes instead of encoding those nodes again. A file that cannot be read is left out."""
    hashes: list[str] = []
    dense: list = []
    indices: list = []
    values: list = []
    for path in sorted((Path(log) / VECTORS).glob("*.npz")):
        try:
            with np.load(path, allow_pickle=False) as kept:
                if "hashes" not in kept or not same_weights(json.loads(str(kept["made_by"]))[role], made_by):
                    continue
                found = kept["hashes"].tolist()
                if role == "dense":
                    rows = kept["dense"]
                    dense += list(rows)
                    indices += [None] * len(found)
                    values += [None] * len(found)
                else:
                    pointer, at, weights = kept["splade_indptr"], kept["splade_indices"], kept["splade_data"]
                    indices += [at[a:b] for a, b in zip(pointer[:-1], pointer[1:], strict=True)]
                    values += [weights[a:b] for a, b in zip(pointer[:-1], pointer[1:], strict=True)]
                    dense += [None] * len(found)
                hashes += found
        except (OSError, ValueError, KeyError):  # unreadable: its nodes are encoded by the build
            continue
    return pa.table(
        {
            "content_hash": pa.array(hashes, pa.string()),
            "dense": pa.array(dense, pa.list_(pa.float32())),
            "indices": pa.array(indices, pa.list_(pa.int32())),
            "values": pa.array(values, pa.list_(pa.float32())),
        }
    )


def _made_by(indexes: IndexSet) -> dict:
    """What a write's vectors depend on: the corpus's dense and sparse models and its chunking."""
    snapshot = indexes.snapshot
    chunking = snapshot.spec.effective_chunking
    return {"dense": snapshot.models.identity("dense"), "sparse": snapshot.models.identity("sparse"), "chunking": [chunking.size, chunking.overlap]}


def _chunked(indexes: IndexSet, documents: list[dict]) -> list[pa.Table]:
    from graphlake.kernels.text.chunking import chunk_texts

    chunking = indexes.snapshot.spec.effective_chunking
    cuts = chunk_texts([d["text"] for d in documents], chunking.size, chunking.overlap)
    return [node_rows([d["doc_id"]], [d["text"]], [pieces]) for d, pieces in zip(documents, cuts, strict=True)]


def _texts(documents: list[dict], nodes: list[pa.Table]) -> list[str]:
    return [retrieval_text(d["title"], text) for d, table in zip(documents, nodes, strict=True) for text in table.column("text").to_pylist()]


def _encoded(documents: list[dict], nodes: list[pa.Table], texts: list[str], dense: np.ndarray, splade: sp.csr_matrix) -> dict[str, Encoded]:
    from graphlake.kernels.text.bm25 import stems

    tokens, found, at = stems(texts) if texts else [], {}, 0
    for document, table in zip(documents, nodes, strict=True):
        n = table.num_rows
        found[document["doc_id"]] = Encoded(document["title"], document["text"], table, dense[at : at + n], splade[at : at + n], tuple(tokens[at : at + n]))
        at += n
    return found
