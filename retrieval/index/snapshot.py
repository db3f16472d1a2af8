"""One committed snapshot of a corpus, pinned: its tables (nodes, documents, their texts and metadata)
read once, its declaration, the models that encode it, and the checks that an index or vectors were
made by those models over the nodes in the same order. Lucene's ``IndexReader`` of one commit point:
read only, shared by every thread that serves the snapshot, and knowing no index kind, so that the
loaders of the kinds (``stored.py``) and the index set (``index_set.py``) above it can take it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from graphlake.common.once import once
from graphlake.kernels.results import Allowed
from graphlake.retrieval.filters import Filter
from graphlake.retrieval.index.config import IndexConfig
from graphlake.retrieval.index.kinds import read_models, read_node_order
from graphlake.retrieval.index.metadata import DocumentMetadata, FilterCache
from graphlake.retrieval.index.tables import retrieval_texts
from graphlake.warehouse.corpora import LAKE_OWNED, CorpusRegistry, CorpusSpec, corpus_model
from graphlake.warehouse.encoder_specs import ModelSpec, declared_models, made_before_identities, model_identity, same_weights
from graphlake.warehouse.linking import Linking
from graphlake.warehouse.storage import LakeStorage, StorageError
from graphlake.warehouse.tables import row_schema


class CorpusModels:
    """The models a corpus is encoded by, by role (models.yaml, or the corpus's own choice in
    corpora.yaml), each resolved once, and the check that what a model made is what reads it now."""

    def __init__(self, lake: LakeStorage, corpus: str, registry: CorpusRegistry, model_cache: Path) -> None:
        self._lake, self._corpus, self._registry, self.cache = lake, corpus, registry, model_cache
        self._specs: dict[str, ModelSpec] = {}
        self._identities: dict[str, dict] = {}
        self.untuned: dict[str, str] = {}  # by role: a model the lake tunes, served with its base weights until the corpus's first build tunes it

    def spec(self, role: str) -> ModelSpec:
        """The model this corpus uses for ``role`` (``dense``, ``sparse``); a model the lake tunes that
        no build has tuned for this corpus yet (a corpus the lake owns, searched before its first build)
        is served with the weights it starts from, and listed in ``untuned``."""
        if role not in self._specs:
            spec = corpus_model(self._lake, self._corpus, role, self._registry)
            if spec.tune:
                self.untuned[role] = (
                    f"model {spec.name!r} is not tuned for corpus {self._corpus!r} yet: its base weights ({spec.tune}) encode it until its first build (`graphlake materialize --corpus {self._corpus}`) tunes it"
                )
                base = declared_models(self._registry.path.parent).models[spec.tune]
                spec = base.model_copy(update={"name": spec.name, "about": f"{spec.tune}, not tuned for corpus {self._corpus} yet"})
            self._specs[role] = spec
        return self._specs[role]

    def identity(self, role: str) -> dict:
        """The model's name and revision, as vectors and indexes record who made them."""
        if role not in self._identities:
            self._identities[role] = model_identity(self.spec(role), self.cache)
        return self._identities[role]

    def check(self, what: str, role: str, made_by: dict[str, str]) -> None:
        """Refuse vectors or an index made by another model than the one that encodes this corpus's queries."""
        current = self.identity(role)
        if not same_weights(made_by, current):
            raise StorageError(
                f"{what} of corpus {self._corpus!r}: made by {made_by['name']} ({made_by['revision']}), but the corpus's {role} queries are encoded by "
                f"{current['name']} ({current['revision']}): materialize the corpus again"
            )


class Snapshot:
    """A corpus's tables as of one lake (a lake pinned to a snapshot, when the API serves it), each read
    once; ``models`` resolves and checks its models. Every index of the snapshot is read through an
    ``IndexSet`` over it."""

    def __init__(self, lake: LakeStorage, corpus: str, config: IndexConfig, registry: CorpusRegistry | None = None) -> None:
        """``registry``: the lake's corpus declarations as the caller read them (read here when not given);
        ``config``: the model cache and the device, resolved by the caller once for the lake."""
        self.lake, self.corpus, self.config, self.registry = lake, corpus, config, registry or CorpusRegistry(lake.home)
        self.spec: CorpusSpec = self.registry.get(corpus)
        self.models = CorpusModels(lake, corpus, self.registry, config.model_cache)
        self._filters = FilterCache()

    @property
    @once
    def node_ids(self) -> list[str]:
        """The row order every index shares: the nodes table's (read when first asked, so that a request's
        other mistakes, an unknown method, are named before a corpus never built is)."""
        return self.nodes().column("node_id").to_pylist()

    @property
    @once
    def built(self) -> bool:
        """Whether a build committed the corpus's nodes. A corpus the lake owns that was never built has
        no committed documents, and its tables are empty (its pending writes are the whole corpus); any
        other corpus must be built to be read."""
        return self.spec.format != LAKE_OWNED or self.lake.has("nodes", {"corpus": self.corpus})

    @once
    def nodes(self) -> pa.Table:
        return self.lake.read("nodes", {"corpus": self.corpus}) if self.built else row_schema("nodes").empty_table()

    @once
    def documents(self) -> pa.Table:
        return self.lake.read("documents", {"corpus": self.corpus}) if self.built else row_schema("documents").empty_table()

    @once
    def metadata(self) -> DocumentMetadata:
        """The documents' metadata as filters read it."""
        return DocumentMetadata(self.corpus, self.documents())

    @once
    def node_documents(self) -> np.ndarray:
        """Per node row, its document's row in the documents table."""
        where = {doc_id: i for i, doc_id in enumerate(self.documents().column("doc_id").to_pylist())}
        return np.fromiter((where[doc_id] for doc_id in self.doc_ids()), dtype=np.int64, count=len(self.node_ids))

    @once
    def titles(self) -> dict[str, str]:
        """Title by document id."""
        return dict(zip(*(self.documents().column(c).to_pylist() for c in ("doc_id", "title")), strict=True))

    @once
    def texts(self) -> list[str]:
        """``title + text`` of every node row, what the encoders and the cross-encoder read."""
        return retrieval_texts(self.nodes(), self.documents())

    @once
    def doc_ids(self) -> np.ndarray:
        return np.asarray(self.nodes().column("doc_id").to_pylist(), dtype=object)

    def node_rows(self, node_ids: list[str], table: str) -> np.ndarray:
        """Rows of ``node_ids`` in the nodes table; an id it lacks means ``table`` is stale."""
        position = self._positions()
        missing = next((n for n in node_ids if n not in position), None)
        if missing is not None:
            raise StorageError(f"{table} of corpus {self.corpus!r} names node {missing!r}, which is not in nodes; materialize it again")
        return np.fromiter((position[n] for n in node_ids), dtype=np.int64, count=len(node_ids))

    def allowed(self, expression: Filter, check: bool = True) -> Allowed:
        """The node rows ``expression`` allows; ``check``: refuse a field no document has (``FilterError``)."""
        return self._filters.allowed(expression, self.metadata(), self.node_documents(), check)

    @property
    @once
    def linking(self) -> Linking:
        """How the corpus's passages relate, as it declares (``warehouse/linking.py``), resolved once."""
        return self.spec.effective_linking

    def check_order(self, name: str, node_ids: list[str]) -> None:
        if node_ids != self.node_ids:
            raise StorageError(f"{name} of corpus {self.corpus!r} was built from other nodes; materialize it again")

    def artifact(self, name: str) -> Path:
        """The folder of the corpus's index artefact ``name``, checked to follow the nodes' order and to
        hold the vectors of the models that encode the corpus now."""
        folder = self.lake.artifact(name, {"corpus": self.corpus})
        self.check_order(name, read_node_order(folder))
        for role, made_by in read_models(folder).items():
            self.models.check(name, role, made_by)
        return folder

    def vectors(self, role: str) -> pa.Table:
        """The corpus's vectors of its ``role`` model, checked to be that model's and in node order."""
        name = self.models.spec(role).name
        table = self.lake.read("vectors", {"corpus": self.corpus, "model": name})
        self.check_order(f"{name} vectors", table.column("node_id").to_pylist())
        if "revision" not in table.column_names:
            self.models.check(f"{name} vectors", role, made_before_identities(role))
        for revision in table.column("revision").unique().to_pylist() if "revision" in table.column_names else []:
            self.models.check(f"{name} vectors", role, {"name": name, "revision": revision})
        return table

    @once
    def _positions(self) -> dict[str, int]:
        return {node_id: row for row, node_id in enumerate(self.node_ids)}
