"""Index kinds: what an operator may read, each declared once.

A declaration (:class:`IndexKind`) names the kind, the assets that build it, where it is stored, how
it is loaded and, for a learned kind, its :class:`Fitting`: the corpora it learns from and what it
reads there. Asset lineage, freshness (``pipelines/freshness.py``), the learned assets' inputs and
the typed handles of ``IndexSet`` all follow from the declarations. The stored kinds are declared in
``retrieval/index/stored.py``, the learned ones in ``retrieval/learned_kinds.py``, which puts them all in
one table (:class:`IndexKinds`, ``INDEX_KINDS``) that the index registry is given.

Every index is built over the nodes in the order of the ``nodes`` table and keeps that order's node
ids beside it (:func:`write_node_order`), or is a table keyed by node id, so a row number means the
same node in every index.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphlake.retrieval.core import Indexes, MethodError, Methods, needs
from graphlake.warehouse.corpora import CorpusSpec, corpus_model, table_written_at
from graphlake.warehouse.encoder_specs import model_identity, same_weights
from graphlake.warehouse.storage import LakeStorage, StorageError

NODE_IDS_FILE = "node_ids.json"
MODELS_FILE = "models.json"  # beside an index built from vectors: the models that made them
CORPUS_GRAPH = "corpus_graph"  # what ``graph: auto`` reads: the corpus's own edge kinds, known only per corpus


@dataclass(frozen=True)
class Stored:
    """Where an index lives: a partition of a lake table, or an artefact folder (per corpus or lake-wide)."""

    table: str | None = None
    artifact: str | None = None
    partition: tuple[tuple[str, str], ...] = ()  # a value may be a model role (``@dense``): see ``CorpusRegistry.resolved``
    lake_wide: bool = False
    layout: str | None = None  # a file (a glob) an artefact of the current layout holds: one written without it is rebuilt

    def written_at(self, lake: LakeStorage, corpus: str) -> float | None:
        """When the index was written; None when it never was, when it is an artefact of an older layout,
        or when a model whose vectors it holds is no longer the one the corpus uses (the index is then
        rebuilt, as the vectors are re-encoded)."""
        partition = {} if self.lake_wide else {"corpus": corpus, **dict(self.partition)}
        if self.artifact is None:
            return table_written_at(lake, corpus, self.table, partition)
        written = lake.artifact_written_at(self.artifact, partition)
        if written is not None and self.layout is not None and not any(lake.artifact(self.artifact, partition).glob(self.layout)):
            return None
        if written is None or self.lake_wide:
            return written
        from graphlake.common.settings import model_cache

        for role, made_by in read_models(lake.artifact(self.artifact, partition)).items():
            if not same_weights(made_by, model_identity(corpus_model(lake, corpus, role), model_cache())):
                return None
        return written


@dataclass(frozen=True)
class Fitting:
    """How a learned kind learns: ``sources(home, corpus)``, the corpora it learns from, on which the
    kinds ``reads(methods)`` names must be built first; ``parts(lake, corpus)``, the optional parts a
    stored one holds (trained networks), built on request through ``part_config(parts)``, its asset's
    run config."""

    sources: Callable[[Path, str], list[str]]
    reads: Callable[[Methods], frozenset[str]]
    parts: Callable[[LakeStorage, str], set[str]] | None = None
    part_config: Callable[[set[str]], dict] | None = None


@dataclass(frozen=True)
class IndexKind:
    """An index operators may read, declared once (see the module's docstring)."""

    name: str
    assets: tuple[str, ...]  # what builds it; the last is written last
    stored: Stored | None  # None: a name resolved per corpus (``corpus_graph``)
    load: Callable[[Indexes], Any] | None  # given the corpus's index registry (``IndexSet``) that keeps what it loads
    fitting: Fitting | None = None


def learned_kind(name: str, model: Any, fitting: Fitting) -> IndexKind:
    """A learned kind as most are: built by the asset of its name into the corpus's artefact of its name,
    loaded by ``model.load(folder)``."""

    def load(indexes: Indexes) -> Any:
        return model.load(indexes.lake.artifact(name, {"corpus": indexes.corpus}))

    return IndexKind(name, (name,), Stored(artifact=name), load, fitting)


def held_parts(name: str, model: Any) -> Callable[[LakeStorage, str], set[str]]:
    """A learned kind's ``Fitting.parts`` where its stored model lists them: ``model.load(folder).held()``
    of the corpus's artefact ``name`` (or ``model.held_in(folder)``, where the model reads that without
    loading), none before it is built."""

    def parts(lake: LakeStorage, corpus: str) -> set[str]:
        try:
            folder = lake.artifact(name, {"corpus": corpus})
            return model.held_in(folder) if hasattr(model, "held_in") else model.load(folder).held()
        except (StorageError, FileNotFoundError):
            return set()

    return parts


class IndexKinds(dict[str, IndexKind]):
    """Every index kind an operator may read, by name, filled once and explicitly: the stored kinds
    (``stored.py``) and the learned ones (``retrieval/learned_kinds.py``, which makes the lake's table,
    ``INDEX_KINDS``); what follows from the declarations is asked of it."""

    def __init__(self, *kinds: IndexKind) -> None:
        super().__init__()
        for kind in kinds:
            if kind.name in self:
                raise MethodError(f"index kind {kind.name!r} is declared twice")
            self[kind.name] = kind

    def kind(self, name: str) -> IndexKind:
        """The kind of ``name`` (``kind`` or ``kind/part``); an unknown one is a declaration error."""
        kind = self.get(name.partition("/")[0])
        if kind is None:
            raise MethodError(f"unknown index {name!r}; declared: {', '.join(self)}")
        return kind

    def corpus_needs(self, found: set[str], spec: CorpusSpec) -> dict[str, set[str]]:
        """Index kinds (with the parts asked of each) read on this corpus: ``corpus_graph`` resolved to its edge kinds."""
        needed: dict[str, set[str]] = {}
        for name in found:
            kind, _, part = name.partition("/")
            for resolved in graph_indexes(spec.effective_linking.corpus_graph) if kind == CORPUS_GRAPH else (self.kind(kind).name,):
                needed.setdefault(resolved, set()).update({part} if part else set())
        return needed

    def kinds_read(self, methods: Methods) -> set[str]:
        """Every index kind the switched-on methods read, with what the learned ones among them learn from
        (on a training corpus of the same lake)."""
        found: set[str] = set()
        todo = {name.partition("/")[0] for op in methods.values() for name in needs(op)}
        while todo:
            name = todo.pop()
            if name in found:
                continue
            found.add(name)
            fitting = self.kind(name).fitting if name != CORPUS_GRAPH else None
            if fitting is not None:
                todo |= {read.partition("/")[0] for read in fitting.reads(methods)}
        return found

    def unread_index_assets(self, methods: Methods) -> list[str]:
        """The assets that build an index artefact or trained model no switched-on method reads: a lake's
        default build leaves them out. Tables (vectors, edges, mentions) are built whatever reads them."""
        read = self.kinds_read(methods)
        kept = set(self.index_assets(name for name in read if name != CORPUS_GRAPH))
        return [kind.assets[-1] for kind in self.values() if kind.name not in read and kind.stored is not None and kind.stored.artifact and kind.assets[-1] not in kept]

    def learned_kind_of(self, asset: str) -> IndexKind | None:
        """The learned index kind ``asset`` builds (its last asset), None when it builds no learned one."""
        return next((kind for kind in self.values() if kind.fitting is not None and kind.assets[-1] == asset), None)

    def asset_written_at(self, lake: LakeStorage, corpus: str, asset: str) -> float | None:
        """When an asset last wrote its output for a corpus (epoch seconds), None when it never did."""
        for kind in self.values():
            if kind.stored is not None and kind.assets[-1] == asset:
                return kind.stored.written_at(lake, corpus)
        return lake.written_at(asset, {"corpus": corpus})

    def index_assets(self, names) -> list[str]:
        """The assets that build these index kinds, in the registry's order of each kind's assets."""
        return list(dict.fromkeys(asset for name in sorted(names) for asset in self.kind(name).assets))


def graph_indexes(kinds) -> frozenset[str]:
    """The indexes a corpus graph of these edge kinds is read from (conceptual edges come from spaCy mentions)."""
    return frozenset(kinds) | ({"mentions_spacy"} if "conceptual" in kinds else frozenset())


def write_index(lake: LakeStorage, name: str, corpus: str, node_ids: list[str], fill: Callable[[Path], None], models: dict[str, dict] | None = None) -> Path:
    """Write the corpus's index artefact ``name`` with ``fill``, and beside it the node order its rows
    follow and the models whose vectors it holds (role -> ``model_identity``), which ``IndexSet``
    checks against the nodes table and the corpus's query encoders when it loads the index."""

    def filled(folder: Path) -> None:
        fill(folder)
        (folder / NODE_IDS_FILE).write_text(json.dumps(node_ids), encoding="utf-8")
        if models:
            (folder / MODELS_FILE).write_text(json.dumps(models), encoding="utf-8")

    return lake.write_artifact(name, {"corpus": corpus}, filled)


def read_models(folder: Path) -> dict[str, dict]:
    """The models whose vectors an index holds, by role (none for an index built from text alone, or before identities were recorded)."""
    path = folder / MODELS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def read_node_order(folder: Path) -> list[str]:
    """The node order written beside an index artefact by :func:`write_index`."""
    return json.loads((folder / NODE_IDS_FILE).read_text(encoding="utf-8"))
