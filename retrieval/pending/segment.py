"""The fresh segment of a lake-owned corpus: its pending writes (``warehouse/write_log.py``), chunked and
encoded by the corpus's own models into a small BM25, dense and SPLADE index that a search reads beside
the committed snapshot (the growing segment of Milvus, Lucene's near-real-time reader), until the next
build folds them in.

Its scores are the snapshot's: the same dense and SPLADE models, and BM25 weights computed with the
snapshot's and the segment's statistics together (``SegmentBM25``: a word no committed node has
matches, scored as a build of both would score it). A corpus the lake owns that was never built has
an empty snapshot: its pending documents alone are the corpus, by their own statistics. The
snapshot's nodes of a document written since are masked, as a filter masks (``allowed``). Its rows follow
the snapshot's: row ``len(snapshot) + i`` is its node ``i``, and ``FreshTables`` answers for both, so a
hit on a pending document cites it like any other.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from graphlake.common.once import once
from graphlake.kernels.results import Allowed, top_k
from graphlake.retrieval.core import Candidates, unfill
from graphlake.retrieval.filters import Filter
from graphlake.retrieval.index.index_set import Derived, IndexSet
from graphlake.retrieval.index.metadata import DocumentMetadata
from graphlake.retrieval.index.snapshot import Snapshot
from graphlake.retrieval.index.tables import retrieval_text
from graphlake.retrieval.pending.encodings import Encoded, encode, store, stored
from graphlake.warehouse.tables import row_schema
from graphlake.warehouse.write_log import Write, apply

if TYPE_CHECKING:
    from graphlake.kernels.text.bm25 import SegmentBM25

SIGNALS = ("bm25", "dense", "splade")  # what the segment ranks by, each on the snapshot's scale


class FreshSegment:
    """The writes pending on one snapshot of a corpus (every one after the number it folded, through
    ``through``), ready to search; ``before``: the segment of fewer of them, whose encodings it reuses;
    ``log``: the corpus's log folder, whose kept vectors (``encodings.py``) it reads for the others, so
    that it encodes (and keeps) only a write's whose vectors were never kept: ``encoded_here`` counts them."""

    def __init__(self, indexes: IndexSet, writes: list[Write], through: int, before: FreshSegment | None = None, log: Path | None = None) -> None:
        self.indexes, self.corpus, self.through, self.writes = indexes, indexes.corpus, through, len(writes)
        live: dict[str, dict] = {}
        last: dict[str, Write] = {}  # by document: the write that upserted it last
        for write in writes:
            apply(live, write)
            last.update((doc_id, write) for doc_id in write.doc_ids if write.op == "upsert")
        self.touched = sorted({doc_id for write in writes for doc_id in write.doc_ids})  # masked in the snapshot
        self.present = dict(sorted(live.items()))  # the pending documents, as the documents table will hold them
        reused = before.encoded if before is not None and before.indexes is indexes else {}
        self.encoded = {d: e for d, e in reused.items() if d in live and (e.title, e.text) == (live[d]["title"], live[d]["text"])}
        self.encoded_here = 0
        missing: dict[int, Write] = {last[d].seq: last[d] for d in self.present if d not in self.encoded}
        for write in missing.values():
            self.encoded.update({d: e for d, e in self._vectors(write, log).items() if last.get(d) is write and d in live})

    def _vectors(self, write: Write, log: Path | None) -> dict[str, Encoded]:
        """An upsert's documents encoded: as kept beside the log, else encoded now and kept."""
        rows: dict[str, dict] = {}
        apply(rows, write)
        documents = list(rows.values())
        kept = stored(log, write.seq, self.indexes, documents) if log is not None else None
        if kept is None:
            kept = encode(self.indexes, documents)
            self.encoded_here += len(documents)
            if log is not None:
                try:
                    store(log, write.seq, self.indexes, kept)
                except OSError:  # a full or read-only disk: this search has them, the next encodes them again
                    pass
        return kept

    def __len__(self) -> int:
        """Its nodes."""
        return self._nodes

    @cached_property
    def _nodes(self) -> int:
        return sum(e.nodes.num_rows for e in self.encoded.values())

    @cached_property
    def nbytes(self) -> int:
        """What it holds in memory, about: its documents, nodes and vectors (a server counts it in its budget)."""
        documents = sum(len(d["text"]) + len(d["title"]) + len(d["metadata"]) for d in self.present.values())
        return documents + sum(e.nodes.nbytes + e.dense.nbytes + e.splade.data.nbytes + e.splade.indices.nbytes + sum(map(len, e.stems)) * 8 for e in self.encoded.values())

    @cached_property
    def masked(self) -> np.ndarray:
        """Per snapshot node row, whether a pending write replaced or deleted its document."""
        return np.isin(self.indexes.snapshot.doc_ids(), self.touched) if self.touched else np.zeros(len(self.indexes.snapshot.node_ids), bool)

    def allowed(self, allowed: Allowed | None) -> Allowed | None:
        """The snapshot rows a search may return: those the filter allows, less the masked ones."""
        if not self.masked.any():
            return allowed
        mask = ~self.masked if allowed is None else allowed.mask & ~self.masked
        return Allowed(mask, np.flatnonzero(mask).astype(np.int64), f"{allowed.key if allowed else ''} less writes through {self.through}")

    def pending_allowed(self, expression: Filter | None) -> np.ndarray | None:
        """Per pending node, whether ``expression`` allows it (None: no filter)."""
        if expression is None or not self.present:
            return None
        documents = DocumentMetadata(self.corpus, self.tables.pending_documents).select(expression)
        return np.repeat(documents, [self.encoded[d].nodes.num_rows for d in self.present])

    def search(self, signal: str, queries: list[str], encoded: np.ndarray | sp.csr_matrix | None, k: int, allowed: np.ndarray | None) -> list[Candidates]:
        """Each query's top ``k`` pending nodes by ``signal`` (``SIGNALS``; ``encoded``: the queries' dense
        rows or SPLADE weights), on the snapshot's scale, rows past the snapshot's; ``allowed``: a mask
        over the pending nodes."""
        dense, splade_by_term, bm25 = self._matrices
        if signal == "dense":
            scores = np.asarray(encoded, np.float32).reshape(len(queries), -1) @ dense.T
        elif signal == "splade":
            scores = np.asarray((sp.csr_matrix(encoded) @ splade_by_term).todense())
        else:
            scores = bm25.scores(queries)
        scores = np.asarray(scores, np.float64).reshape(len(queries), len(self))
        rows = None if allowed is None else np.flatnonzero(allowed)
        best = top_k(scores if rows is None else scores[:, rows], k, rows, positive=signal != "dense")  # as the snapshot's: no shared term, no result
        offset = len(self.indexes.snapshot.node_ids)
        return [replace(found, rows=found.rows + offset) for found in unfill(*best)]

    @cached_property
    def tables(self) -> FreshTables:
        return FreshTables(self.indexes, self)

    @cached_property
    def _matrices(self) -> tuple[np.ndarray, sp.csr_matrix, SegmentBM25]:
        """The pending nodes' dense rows, their SPLADE weights by term (a query's terms select rows: no
        transpose per search) and BM25 index, in node order."""
        from graphlake.kernels.text.bm25 import SegmentBM25

        encoded = [self.encoded[d] for d in self.present]
        built = self.indexes.snapshot.built
        bm25 = SegmentBM25.of([s for e in encoded for s in e.stems], self.indexes.bm25 if built else None, self.indexes.derived(BM25_MEAN_LENGTH) if built else 0.0)
        if not encoded:
            return np.zeros((0, 1), np.float32), sp.csr_matrix((1, 0), dtype=np.float32), bm25
        return np.concatenate([e.dense for e in encoded]), _stacked([e.splade for e in encoded]).T.tocsr(), bm25


class FreshTables(Snapshot):
    """The snapshot's nodes and documents with the pending ones after them: what hits are made from."""

    def __init__(self, indexes: IndexSet, fresh: FreshSegment) -> None:
        snapshot = indexes.snapshot
        super().__init__(snapshot.lake, snapshot.corpus, snapshot.config, snapshot.registry)
        self.snapshot, self.fresh = snapshot, fresh

    @cached_property
    def pending_documents(self) -> pa.Table:
        return pa.Table.from_pylist(list(self.fresh.present.values()), row_schema("documents"))

    @cached_property
    def pending_nodes(self) -> pa.Table:
        return pa.concat_tables([self.fresh.encoded[d].nodes for d in self.fresh.present]) if self.fresh.present else row_schema("nodes").empty_table()

    @property
    @once
    def node_ids(self) -> list[str]:
        return self.snapshot.node_ids + self.pending_nodes.column("node_id").to_pylist()

    @once
    def nodes(self) -> pa.Table:
        schema = self.pending_nodes.schema
        return pa.concat_tables([self.snapshot.nodes().select(schema.names).cast(schema), self.pending_nodes])

    @once
    def metadata(self) -> DocumentMetadata:
        return DocumentMetadata.joined(self.snapshot.metadata(), DocumentMetadata(self.corpus, self.pending_documents))

    @once
    def documents(self) -> pa.Table:
        names = self.pending_documents.column_names
        return pa.concat_tables([self.snapshot.documents().select(names).cast(self.pending_documents.schema), self.pending_documents])

    @once
    def node_documents(self) -> np.ndarray:
        offset = self.snapshot.documents().num_rows
        where = {d: offset + i for i, d in enumerate(self.fresh.present)}
        pending = np.fromiter((where[d] for d in self.pending_nodes.column("doc_id").to_pylist()), dtype=np.int64)
        return np.concatenate([self.snapshot.node_documents(), pending])

    @once
    def texts(self) -> list[str]:
        columns = (self.pending_nodes.column(c).to_pylist() for c in ("doc_id", "text"))
        return self.snapshot.texts() + [retrieval_text(self.fresh.present[d]["title"], text) for d, text in zip(*columns, strict=True)]

    @once
    def doc_ids(self) -> np.ndarray:
        return np.concatenate([self.snapshot.doc_ids(), np.asarray(self.pending_nodes.column("doc_id").to_pylist(), dtype=object)])


def _stacked(parts: list[sp.csr_matrix]) -> sp.csr_matrix:
    """Row blocks of one width as one matrix: their arrays joined (``sp.vstack`` of thousands of small
    blocks goes through COO and took a tenth of a second)."""
    data = np.concatenate([p.data for p in parts])
    indices = np.concatenate([p.indices for p in parts])
    offsets = np.cumsum([0] + [p.nnz for p in parts[:-1]])
    indptr = np.concatenate([[0], *(p.indptr[1:] + offset for p, offset in zip(parts, offsets, strict=True))])
    return sp.csr_matrix((data, indices, indptr), shape=(sum(p.shape[0] for p in parts), parts[0].shape[1]))


def _token_lengths(texts: list[str]) -> np.ndarray:
    from graphlake.kernels.text.bm25 import token_lengths

    return token_lengths(texts)


BM25_MEAN_LENGTH: Derived[float] = Derived("bm25_mean_length", lambda indexes: float(np.mean(_token_lengths(indexes.snapshot.texts()))))
"""The snapshot's mean node length in BM25 tokens, which a pending node's weights are computed with."""
