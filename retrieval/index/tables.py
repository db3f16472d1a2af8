"""One corpus's tables as of one lake (a lake pinned to a snapshot, when the API serves it): the nodes,
documents and vectors every index is built over, read once; the models that encode the corpus, and the
check that an index or vectors were made by them and over the nodes in the same order. What the index
registry (``corpus_indexes.py``) and every index's loader read; it knows no index kind, so the loaders
of the kinds above it can take it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from graphlake.common.settings import model_cache
from graphlake.retrieval.corpus_policy import SETTINGS
from graphlake.retrieval.index.kinds import read_models, read_node_order
from graphlake.retrieval.index.metadata import DocumentMetadata
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec, corpus_model
from graphlake.warehouse.encoder_specs import ModelSpec, made_before_identities, model_identity, same_weights
from graphlake.warehouse.storage import LakeStorage, StorageError


def retrieval_texts(nodes: pa.Table, documents: pa.Table) -> list[str]:
    """``title + " " + text`` per node: the input every encoder and index sees (BEIR's convention)."""
    titles = dict(zip(documents.column("doc_id").to_pylist(), documents.column("title").to_pylist(), strict=True))
    return [retrieval_text(titles[doc_id], text) for doc_id, text in zip(nodes.column("doc_id").to_pylist(), nodes.column("text").to_pylist(), strict=True)]


def retrieval_text(title: str, text: str) -> str:
    """One node's ``title + " " + text``."""
    return f"{title} {text}".strip() if title else text


def numbers(array: pa.Array) -> np.ndarray:
    """A numeric Arrow array without nulls as a numpy view of its buffer: ``Array.to_numpy`` (and
    ``np.asarray``) import pandas, a tenth of a fresh query's CPU."""
    if array.null_count:
        raise StorageError("a stored vector holds a null: materialize the vectors again")
    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def dense_matrix(vectors: pa.Table, dimension: int) -> np.ndarray:
    """The dense vectors as one ``(nodes, dimension)`` float32 matrix (``dimension``: an empty table's)."""
    column = vectors.column("dense").combine_chunks()
    if len(column) == 0:
        return np.zeros((0, dimension), dtype=np.float32)
    return np.ascontiguousarray(numbers(column.flatten()).reshape(len(column), -1), dtype=np.float32)


class CorpusTables:
    """A corpus's tables and models, each read once (``memo``: thread-safe, so the threads serving
    requests read each once too)."""

    def __init__(self, lake: LakeStorage, corpus: str, registry: CorpusRegistry | None = None) -> None:
        """``registry``: the lake's corpus declarations as the caller read them (read here when not given)."""
        self.lake, self.corpus, self._registry = lake, corpus, registry
        self._loaded: dict[Any, Any] = {}
        self._loading = threading.RLock()  # reentrant: what one computes may ask for another

    @cached_property
    def node_ids(self) -> list[str]:
        """The row order every index shares: the nodes table's (read when first asked, so that a request's
        other mistakes, an unknown method, are named before a corpus never built is)."""
        return self.nodes().column("node_id").to_pylist()

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """What ``compute`` gives, computed once per key (a table read, a structure derived from the indexes)."""
        if key not in self._loaded:
            with self._loading:
                if key not in self._loaded:
                    self._loaded[key] = compute()
        return self._loaded[key]

    def metadata(self) -> DocumentMetadata:
        """The documents' metadata as filters read it."""
        return self.memo(("metadata",), lambda: DocumentMetadata(self.corpus, self.documents()))

    def node_documents(self) -> np.ndarray:
        """Per node row, its document's row in the documents table."""

        def positions() -> np.ndarray:
            where = {doc_id: i for i, doc_id in enumerate(self.documents().column("doc_id").to_pylist())}
            return np.fromiter((where[doc_id] for doc_id in self.doc_ids()), dtype=np.int64, count=len(self.node_ids))

        return self.memo(("node documents",), positions)

    @cached_property
    def registry(self) -> CorpusRegistry:
        return self._registry or CorpusRegistry(self.lake.home)

    @cached_property
    def spec(self) -> CorpusSpec:
        return self.registry.get(self.corpus)

    def setting(self, name: str) -> Any:
        """What the retrieval methods read of this corpus by its format (``proximity``, ``corpus_graph``,
        ``skb_sources``: ``retrieval/corpus_policy.py``), resolved once."""
        return self.memo(("setting", name), lambda: SETTINGS[name](self.spec.format))

    def check_order(self, name: str, node_ids: list[str]) -> None:
        if node_ids != self.node_ids:
            raise StorageError(f"{name} of corpus {self.corpus!r} was built from other nodes; materialize it again")

    def artifact(self, name: str) -> Path:
        folder = self.lake.artifact(name, {"corpus": self.corpus})
        self.check_order(name, read_node_order(folder))
        for role, made_by in read_models(folder).items():
            self.check_model(name, role, made_by)
        return folder

    def model(self, role: str) -> ModelSpec:
        """The model this corpus uses for ``role`` (models.yaml, or its own choice in corpora.yaml)."""
        return self.memo(("model", role), lambda: corpus_model(self.lake, self.corpus, role, self.registry))

    def identity(self, role: str) -> dict:
        """The model's name and revision, as vectors and indexes record who made them."""
        return self.memo(("identity", role), lambda: model_identity(self.model(role), model_cache()))

    def check_model(self, what: str, role: str, made_by: dict[str, str]) -> None:
        """Refuse vectors or an index made by another model than the one that encodes this corpus's queries."""
        current = self.identity(role)
        if not same_weights(made_by, current):
            raise StorageError(
                f"{what} of corpus {self.corpus!r}: made by {made_by['name']} ({made_by['revision']}), but the corpus's {role} queries are encoded by "
                f"{current['name']} ({current['revision']}): materialize the corpus again"
            )

    def vectors(self, role: str) -> pa.Table:
        """The corpus's vectors of its ``role`` model, checked to be that model's and in node order."""
        name = self.model(role).name
        table = self.lake.read("vectors", {"corpus": self.corpus, "model": name})
        self.check_order(f"{name} vectors", table.column("node_id").to_pylist())
        if "revision" not in table.column_names:
            self.check_model(f"{name} vectors", role, made_before_identities(role))
        for revision in table.column("revision").unique().to_pylist() if "revision" in table.column_names else []:
            self.check_model(f"{name} vectors", role, {"name": name, "revision": revision})
        return table

    def node_rows(self, node_ids: list[str], table: str) -> np.ndarray:
        """Rows of ``node_ids`` in the nodes table; an id it lacks means ``table`` is stale."""
        position = self._positions
        missing = next((n for n in node_ids if n not in position), None)
        if missing is not None:
            raise StorageError(f"{table} of corpus {self.corpus!r} names node {missing!r}, which is not in nodes; materialize it again")
        return np.fromiter((position[n] for n in node_ids), dtype=np.int64, count=len(node_ids))

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {node_id: row for row, node_id in enumerate(self.node_ids)}

    def nodes(self) -> pa.Table:
        return self.memo(("nodes",), lambda: self.lake.read("nodes", {"corpus": self.corpus}))

    def documents(self) -> pa.Table:
        return self.memo(("documents",), lambda: self.lake.read("documents", {"corpus": self.corpus}))

    def titles(self) -> dict[str, str]:
        """Title by document id."""
        columns = ("doc_id", "title")
        return self.memo(("titles",), lambda: dict(zip(*(self.documents().column(c).to_pylist() for c in columns), strict=True)))

    def texts(self) -> list[str]:
        """``title + text`` of every node row, what the encoders and the cross-encoder read."""
        return self.memo(("texts",), lambda: retrieval_texts(self.nodes(), self.documents()))

    def doc_ids(self) -> np.ndarray:
        return self.memo(("doc_ids",), lambda: np.asarray(self.nodes().column("doc_id").to_pylist(), dtype=object))

