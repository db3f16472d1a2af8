"""The encodings of pending documents, made once: by the process that acknowledges a write, before it
does (``api/searchers.py``), and kept beside the log as the write's vectors,
``writes/<corpus>/vectors/<seq>.arrow`` (``warehouse/write_log.py`` removes them with their entry). Every
searcher of the lake reads them back, a server restarted or another one, so a search encodes nothing
but a write whose vectors were never kept (a crash between its entry and its vectors, another model
since) and keeps them then.

The file is one Arrow table, a row per node, holding all that cost time to make: the node rows as the
build stores them (chunking runs spaCy's sentencizer, 6 ms a document), their BM25 tokens, the dense
rows and the SPLADE weights, and each node's content hash, by which the fold's build takes them as it
takes the previous build's vectors (``assets/vectors/encoders.py``); its schema's metadata name the
models and the chunking that made them, checked on reading. One memory-mapped read a write: a server
restarted with a thousand pending writes reads them back in a fraction of a second.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
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
from graphlake.warehouse.tables import row_schema
from graphlake.warehouse.write_log import VECTORS, VECTORS_SUFFIX


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
    table = _kept(indexes, encoded)
    folder = Path(log) / VECTORS
    folder.mkdir(exist_ok=True)
    staged = folder / f".{uuid.uuid4().hex}.tmp"
    try:
        with pa.OSFile(str(staged), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        with open(staged, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(staged, _path(log, seq))
    finally:
        staged.unlink(missing_ok=True)


def stored(log: Path, seq: int, indexes: IndexSet, documents: list[dict]) -> dict[str, Encoded] | None:
    """Write ``seq``'s kept vectors of ``documents`` (its upserted ones, as rows), None when none were
    kept, or by other models, or for other nodes than these documents hold."""
    table = _read(_path(log, seq))
    if table is None or _meta(table, "made_by") != _made_by(indexes) or _meta(table, "ids") != [d["doc_id"] for d in documents]:
        return None
    ids, owners = _meta(table, "ids"), table.column("doc_id").to_pylist()
    held = Counter(owners)
    if owners != [doc_id for doc_id in ids for _ in range(held[doc_id])]:  # the nodes in the write's order
        return None
    bounds = np.cumsum([0] + [held[doc_id] for doc_id in ids])
    nodes = table.select(row_schema("nodes").names)
    parts = [nodes.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    if not _fits(documents, parts):
        return None
    splade = _csr(table.column("splade_indices"), table.column("splade_values"), int(_meta(table, "splade_width")))
    stems = [tuple(words) for words in table.column("stems").to_pylist()]
    return _encoded(documents, parts, _texts(documents, parts), _dense(table.column("dense")), splade, stems)


def kept_rows(log: Path, role: str, made_by: dict[str, str]) -> pa.Table:
    """Every kept vector of the log's pending writes made by ``made_by``'s weights for ``role``
    (``dense`` or ``sparse``), as the build's vector rows (content_hash, dense, indices, values): what
    a fold takes instead of encoding those nodes again. A file that cannot be read is left out."""
    found = []
    for path in sorted((Path(log) / VECTORS).glob(f"*{VECTORS_SUFFIX}")):
        table = _read(path)
        if table is None or not same_weights(_meta(table, "made_by")[role], made_by):
            continue
        floats, ints = (pa.nulls(table.num_rows, pa.list_(kind)) for kind in (pa.float32(), pa.int32()))
        if role == "dense":
            columns = [table.column("dense").cast(pa.list_(pa.float32())), ints, floats]
        else:
            columns = [floats, table.column("splade_indices"), table.column("splade_values")]
        found.append(pa.table([table.column("retrieval_hash"), *columns], schema=_VECTOR_ROWS))
    return pa.concat_tables(found) if found else _VECTOR_ROWS.empty_table()


_VECTOR_ROWS = pa.schema([("content_hash", pa.string()), ("dense", pa.list_(pa.float32())), ("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float32()))])


def _path(log: Path, seq: int) -> Path:
    return Path(log) / VECTORS / f"{seq:012d}{VECTORS_SUFFIX}"


def _kept(indexes: IndexSet, encoded: dict[str, Encoded]) -> pa.Table:
    """The file's table: a row per node, its schema's metadata the models, the ids and SPLADE's width."""
    parts = list(encoded.values())
    schema = row_schema("nodes")
    nodes = pa.concat_tables([e.nodes.select(schema.names).cast(schema) for e in parts]) if parts else schema.empty_table()
    dense = np.concatenate([e.dense for e in parts]).astype(np.float32) if parts else np.zeros((0, 1), np.float32)
    splade = _stacked_csr([e.splade for e in parts])
    pointer = pa.array(splade.indptr.astype(np.int32))
    titles = [e.title for e in parts for _ in range(e.nodes.num_rows)]
    columns = {
        **{name: nodes.column(name) for name in schema.names},
        "retrieval_hash": pa.array([content_hash(retrieval_text(title, text)) for title, text in zip(titles, nodes.column("text").to_pylist(), strict=True)], pa.string()),
        "dense": pa.FixedSizeListArray.from_arrays(pa.array(dense.reshape(-1)), dense.shape[1]),
        "splade_indices": pa.ListArray.from_arrays(pointer, pa.array(splade.indices.astype(np.int32))),
        "splade_values": pa.ListArray.from_arrays(pointer, pa.array(splade.data.astype(np.float32))),
        "stems": pa.array([list(words) for e in parts for words in e.stems], pa.list_(pa.string())),
    }
    metadata = {"made_by": _made_by(indexes), "ids": list(encoded), "splade_width": splade.shape[1]}
    return pa.table(columns).replace_schema_metadata({key: json.dumps(value) for key, value in metadata.items()})


def _read(path: Path) -> pa.Table | None:
    """A kept file's table, None when absent or unreadable (encoded again, never served wrong)."""
    try:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowInvalid):
        return None


def _meta(table: pa.Table, key: str):
    return json.loads((table.schema.metadata or {}).get(key.encode(), b"null"))


def _fits(documents: list[dict], parts: list[pa.Table]) -> bool:
    """Whether each document's kept nodes are slices of its text as it is now."""
    for document, nodes in zip(documents, parts, strict=True):
        text = document["text"]
        for start, end, piece in zip(*(nodes.column(c).to_pylist() for c in ("start", "end", "text")), strict=True):
            if text[start:end] != piece or not 0 <= start < end:
                return False
    return True


def _dense(column: pa.ChunkedArray) -> np.ndarray:
    array = column.combine_chunks()
    return array.values.to_numpy(zero_copy_only=False).reshape(len(array), array.type.list_size)


def _csr(indices: pa.ChunkedArray, values: pa.ChunkedArray, width: int) -> sp.csr_matrix:
    at, weights = indices.combine_chunks(), values.combine_chunks()
    pointer = at.offsets.to_numpy()
    return sp.csr_matrix((weights.values.to_numpy(), at.values.to_numpy(), pointer - pointer[0]), shape=(len(at), width))


def _stacked_csr(parts: list[sp.csr_matrix]) -> sp.csr_matrix:
    return sp.csr_matrix(sp.vstack(parts, format="csr")) if parts else sp.csr_matrix((0, 1), dtype=np.float32)


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


def _encoded(documents: list[dict], nodes: list[pa.Table], texts: list[str], dense: np.ndarray, splade: sp.csr_matrix, tokens: list[tuple[str, ...]] | None = None) -> dict[str, Encoded]:
    """By id, each document's nodes and their rows of ``dense``, ``splade`` and ``tokens`` (its BM25
    tokens, counted here when not kept)."""
    from graphlake.kernels.text.bm25 import stems

    if tokens is None:
        tokens = stems(texts) if texts else []
    found, at = {}, 0
    for document, table in zip(documents, nodes, strict=True):
        n = table.num_rows
        found[document["doc_id"]] = Encoded(document["title"], document["text"], table, dense[at : at + n], splade[at : at + n], tuple(tokens[at : at + n]))
        at += n
    return found
