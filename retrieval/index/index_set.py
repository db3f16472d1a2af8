"""The index set: a snapshot's indexes, opened for what the methods over it read, each loaded through
its declared kind (``kinds.py``) on first use and shared by every request the snapshot serves; and the
structures operators derive from them (the corpus graph, the hybrid vectors, the entity graph, title
aliases), which are declared kinds too (``Derived``, ``derived.py``), read by typed keys. Lucene's
``IndexSearcher`` over one reader: what a search reads, never what it owns (that is its ``Request``,
``retrieval/core.py``). Kernels are imported where an index is loaded, so a command loads only what its
method reads."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np
import scipy.sparse as sp

from graphlake.retrieval.core import MethodError, Request
from graphlake.retrieval.filters import Filter
from graphlake.retrieval.index.encoders import QueryEncoders
from graphlake.retrieval.index.kinds import IndexKinds
from graphlake.retrieval.index.snapshot import Snapshot
from graphlake.warehouse.storage import LakeStorage

if TYPE_CHECKING:
    import faiss

    from graphlake.kernels.hybrid.cuda_search import DeviceSearcher
    from graphlake.kernels.hybrid.graph_index import Searcher
    from graphlake.kernels.text.bm25 import BM25Index
    from graphlake.retrieval.index.skb import LoadedSKB

T = TypeVar("T")


class Handle(Generic[T]):
    """A typed handle on the declared index kind of its attribute's name: ``indexes.bm25`` is the corpus's
    loaded BM25 index, so an operator's call into its kernel (``indexes.bm25.search(queries, k)``) is a
    method call a reader and a type checker can follow."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.kind = name

    @overload
    def __get__(self, indexes: None, owner: type) -> Handle[T]: ...

    @overload
    def __get__(self, indexes: IndexSet, owner: type) -> T: ...

    def __get__(self, indexes, owner):
        return self if indexes is None else indexes.get(self.kind)


@dataclass(frozen=True, eq=False)
class Derived(Generic[T]):
    """A structure derived from an index set's indexes (and some parameters, its key), made once per
    index set by ``make(indexes, *key)``; declared once, a module-level constant (``derived.py``)."""

    name: str
    make: Callable[..., T]


class IndexSet:
    """A snapshot's indexes, read through the typed handles below (the kinds above the index layer,
    the entity graph and the learned models, have theirs on ``retrieval/models/index_set.py``'s
    ``LakeIndexSet``); ``get(name)`` is for a kind named by data (an edge kind of the corpus graph),
    ``derived(kind, *key)`` for a derived structure. ``encoders``: the snapshot's query encoders, which a
    request is given."""

    bm25: Handle[BM25Index] = Handle()
    dense: Handle[np.ndarray] = Handle()  # (nodes, dimension) float32, the corpus's dense model's
    dense_hnsw: Handle[faiss.Index] = Handle()
    splade: Handle[sp.csc_matrix] = Handle()  # (nodes, vocabulary)
    hybrid_graph: Handle[Searcher | DeviceSearcher] = Handle()
    skb: Handle[Callable[[str], LoadedSKB]] = Handle()  # by source, ``auto`` the corpus's first

    def __init__(self, snapshot: Snapshot, kinds: IndexKinds, reuse_pairs: bool = False) -> None:
        """``kinds``: every kind it may load (``retrieval/learned_kinds.py``'s ``INDEX_KINDS``, through ``open_index_set``)."""
        self.snapshot, self.kinds = snapshot, kinds
        self.lake: LakeStorage = snapshot.lake
        self.corpus: str = snapshot.corpus
        self.encoders = QueryEncoders(snapshot, lambda: self.get("reranker"), reuse_pairs)
        self.loading: str | None = None  # the index being loaded now, for a caller that says what it waits for
        self._loaded: dict[str, Any] = {}
        self._derived: dict[tuple[str, tuple], Any] = {}
        self._lock = threading.RLock()  # reentrant: what one loads or derives may ask for another

    def get(self, name: str) -> Any:
        """The loaded index ``name``, loaded once (requests served on several threads load it once)."""
        if name not in self._loaded:
            kind = self.kinds.kind(name)
            if kind.load is None:
                raise MethodError(f"index {name!r} is resolved per corpus; read its edge kinds instead")
            with self._lock:
                if name not in self._loaded:
                    self.loading = name
                    try:
                        self._loaded[name] = kind.load(self)
                    finally:
                        self.loading = None
        return self._loaded[name]

    def derived(self, kind: Derived[T], *key: Hashable) -> T:
        """The structure ``kind`` derives from these indexes for ``key``, made once."""
        slot = (kind.name, key)
        if slot not in self._derived:
            with self._lock:
                if slot not in self._derived:
                    self._derived[slot] = kind.make(self, *key)
        return self._derived[slot]


def new_request(indexes: IndexSet, queries: list[str], expression: Filter | None = None, check: bool = True, k: int = 10) -> Request:
    """A search's own state over ``indexes``: the queries, ``k``, the snapshot rows ``expression`` allows
    (a filter naming a field no document has raises ``FilterError``, unless not ``check``) and the
    snapshot's query encoders."""
    allowed = None if expression is None else indexes.snapshot.allowed(expression, check)
    return Request(list(queries), indexes.encoders, k, allowed)


def sibling(indexes: IndexSet, corpus: str) -> IndexSet:
    """Another corpus's index set of the same lake, loading through the same kinds (a training corpus)."""
    snapshot = indexes.snapshot
    return type(indexes)(Snapshot(indexes.lake, corpus, snapshot.config, snapshot.registry), indexes.kinds)
