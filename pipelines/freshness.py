"""What must be materialized before methods can be evaluated (or queried) on a corpus.

Missing indexes, outdated runs and stale metrics on the corpus itself, and, for learned indexes
(the reranker, GraphER's rankers), the indexes they read on the corpora they learn from: those come
first, each corpus in a run of its own. Everything follows from the index registry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from graphlake.kernels.eval.metrics import GRAPH_METRICS
from graphlake.retrieval.core import MethodError, Methods, method_asset_names, needs
from graphlake.retrieval.evaluation import corpus_graph_built
from graphlake.retrieval.index.kinds import IndexKind
from graphlake.retrieval.learned_kinds import INDEX_KINDS
from graphlake.retrieval.methods import load_methods, unknown_method
from graphlake.retrieval.queries import SAMPLE_PARAM, SPLIT_PARAM
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.storage import LakeStorage

BASE_TABLES = ["documents", "queries", "qrels", "foreign_keys", "nodes"]


@dataclass
class Refresh:
    """The assets to materialize as stages, each one corpus's assets in a run of its own, in the order to
    run them; and the run config (``ops``) of assets asked to build particular parts.

    Stages follow what learned indexes read across corpora: when corpus A's ranker learns from B and
    B's learns from A (Spider and BIRD train each other), A's vectors come first, then B's ranker, then
    A's. Where no other corpus reads the evaluated one's (``read_back``), its assets run last, in one run."""

    corpus: str
    stages: list[tuple[str, list[str]]] = field(default_factory=list)
    ops: dict[str, dict] = field(default_factory=dict)
    parts: dict[str, set[str]] = field(default_factory=dict)  # asset -> the parts it is asked to build
    read_back: bool = False  # a learned index of another corpus learns from the evaluated one

    def add(self, corpus: str, assets) -> None:
        scheduled = self.scheduled(corpus)
        new = [asset for asset in dict.fromkeys(assets) if asset not in scheduled]
        if not new:
            return
        if self.stages and self.stages[-1][0] == corpus:
            self.stages[-1][1].extend(new)
        else:
            self.stages.append((corpus, new))

    def scheduled(self, corpus: str) -> list[str]:
        """Every asset of ``corpus`` in some stage."""
        return [asset for name, assets in self.stages if name == corpus for asset in assets]

    @property
    def assets(self) -> list[str]:
        """The evaluated corpus's own assets."""
        return self.scheduled(self.corpus)

    def order(self) -> list[tuple[str, list[str]]]:
        """(corpus, assets) stages in the order to run them."""
        if self.read_back:
            return [(corpus, assets) for corpus, assets in self.stages if assets]
        others = [(corpus, assets) for corpus, assets in self.stages if corpus != self.corpus and assets]
        return [*others, *([(self.corpus, self.assets)] if self.assets else [])]


def plan_refresh(lake: LakeStorage, corpus: str, names: list[str], home: Path, split: str | None = None, runs: bool = True, sample: int | None = None) -> Refresh:
    """What a fresh evaluation of ``names`` on ``split`` (None: every query; ``sample``: a seeded sample of them) needs; with ``runs``
    False, what querying them needs (their indexes, not their runs).

    A run is outdated when its method's declaration changed, when it ran other queries (another split, a sample),
    or when anything it read (nodes, queries, an index, a trained model) was written after it, so
    retraining ``graph_rankers`` or rebuilding an index re-runs the methods that use it. A learned
    index is rebuilt when what it reads on the corpora it learns from was written after it, or when
    it lacks a part a method asks for (a trained network). Metrics are stale when they belong to
    another run, or when they lack Topological Recall though the corpus graph is now complete (a
    BM25 run evaluated before FastInsight built the graph gets its TR then).
    """
    methods = load_methods(home)
    for name in names:
        if name not in methods:
            raise unknown_method(name, methods)
    spec = CorpusRegistry(home).get(corpus)
    refresh = Refresh(corpus)
    partition = {"corpus": corpus}
    rebuilding = not all(lake.has(table, partition) for table in BASE_TABLES)
    refresh.add(corpus, BASE_TABLES if rebuilding else [])
    graph_complete = corpus_graph_built(lake, corpus)
    for name in names:
        run_partition = {**partition, "method": name}
        inputs = [lake.written_at(table, partition) for table in ("nodes", "queries")]
        needed = INDEX_KINDS.corpus_needs(needs(methods[name]), spec)
        for index in _learned_last(needed):
            inputs.append(_index_written(refresh, lake, corpus, index, needed[index], methods, rebuilding))
        if not runs:
            continue
        run, metrics, query_metrics = method_asset_names(name)
        run_written = lake.written_at("runs", run_partition)
        ran = _first(lake, "runs", run_partition, "params")
        if ran is None and run_written is not None and lake.rows("queries", partition) == 0:
            continue  # a corpus without queries: its empty run stays empty whatever changes, until queries come
        outdated = run_written is None or any(when is None or when > run_written for when in inputs)
        if outdated or not _covers(ran, methods.params(name), split, sample):
            refresh.add(corpus, [run, metrics, query_metrics])
        elif _first(lake, "metrics", run_partition, "run_id") != _first(lake, "runs", run_partition, "run_id") or (graph_complete and not _has_topological_recall(lake, run_partition)):
            refresh.add(corpus, [metrics, query_metrics])
    return refresh


def _index_written(refresh: Refresh, lake: LakeStorage, corpus: str, index: str, parts: set[str], methods: Methods, rebuilding: bool) -> float | None:
    """When the index was written, None when it is (to be) rebuilt; adds what it needs to ``refresh``."""
    kind = INDEX_KINDS.kind(index)
    last = kind.assets[-1]
    written = None if rebuilding or last in refresh.assets else INDEX_KINDS.asset_written_at(lake, corpus, last)
    fitting = kind.fitting
    if fitting is not None:
        for source in fitting.sources(lake.home, corpus):
            read = _bring_up(refresh, lake, source, fitting.reads(methods), methods, rebuilding and source == corpus, {(corpus, kind.name)})
            if written is not None and (read is None or read > written):
                written = None
    held = fitting.parts(lake, corpus) if fitting is not None and fitting.parts is not None and written is not None else set()
    if parts - held:
        written = None
    if written is None:
        if fitting is not None and fitting.part_config is not None:  # only the parts asked for, and those it has: nothing trained for nothing
            asked = refresh.parts.setdefault(last, set())
            asked |= parts | held
            refresh.ops[last] = {"config": fitting.part_config(asked)}
        refresh.add(corpus, kind.assets if rebuilding else builders(kind))
    return written


def _bring_up(refresh: Refresh, lake: LakeStorage, corpus: str, kinds: frozenset[str], methods: Methods, rebuilding: bool, learning: set[tuple[str, str]]) -> float | None:
    """Add the missing ``kinds`` of another corpus the index learns from; when the last of them was
    written, None when one is (to be) rebuilt. A learned one among them first brings up what it reads on
    the corpora it learns from in turn (``learning``: the (corpus, kind) pairs waiting on this one; one
    met again is a cycle no order can build)."""
    base_missing = rebuilding or not all(lake.has(table, {"corpus": corpus}) for table in BASE_TABLES)
    if base_missing:
        refresh.add(corpus, BASE_TABLES)
    latest: float | None = 0.0
    for name in _learned_last(INDEX_KINDS.corpus_needs(set(kinds), CorpusRegistry(lake.home).get(corpus))):  # corpus_graph: that corpus's edge kinds
        kind = INDEX_KINDS.kind(name)
        written = None if base_missing or kind.assets[-1] in refresh.scheduled(corpus) else kind.stored.written_at(lake, corpus)
        if written is None:
            if kind.fitting is not None:
                if (corpus, name) in learning:
                    waiting = ", ".join(f"{k} of {c!r}" for c, k in sorted(learning))
                    raise MethodError(f"{name} of corpus {corpus!r} learns from what itself needs ({waiting}): check train_corpus in corpora.yaml")
                for source in kind.fitting.sources(lake.home, corpus):
                    refresh.read_back |= source == refresh.corpus
                    _bring_up(refresh, lake, source, kind.fitting.reads(methods), methods, False, learning | {(corpus, name)})
            refresh.add(corpus, kind.assets if base_missing else builders(kind))
            latest = None
        elif latest is not None:
            latest = max(latest, written)
    return latest


def builders(kind: IndexKind) -> list[str]:
    """The asset that rebuilds a stale index, without the mentions or triples its declaration names before it:
    a new dense model rebuilds the hybrid graph without running spaCy again. Those the corpus lacks join the
    run (``pipelines/runner.py``: a plan's missing upstream, a build's never-written assets), and a
    multi-asset's other outputs with them."""
    return [kind.assets[-1]]


def _learned_last(kinds) -> list[str]:
    """Index kinds in build order: the built ones first, so that what learned ones need on other corpora
    runs in as few stages as it can."""
    return sorted(kinds, key=lambda name: (INDEX_KINDS.kind(name).fitting is not None, name))


def _covers(stored: str | None, declaration: dict, split: str | None, sample: int | None) -> bool:
    """Whether a run with these stored params is the declared method over the queries asked for: all of
    them (or all of the split), or the same seeded sample of the same split."""
    if stored is None:
        return False
    params = json.loads(stored)
    ran, ran_sample = params.pop(SPLIT_PARAM, None), params.pop(SAMPLE_PARAM, None)
    if params != declaration:
        return False
    return ran in (None, split) if ran_sample is None else (ran, ran_sample) == (split, sample)


def _has_topological_recall(lake: LakeStorage, partition: dict[str, str]) -> bool:
    """Whether the stored metrics hold Topological Recall, or hold nothing at all (no queries with gold)."""
    if not lake.has("metrics", partition):
        return False
    stored = lake.read("metrics", partition).column("metric").to_pylist()
    return not stored or GRAPH_METRICS[0] in stored


def _first(lake: LakeStorage, table: str, partition: dict[str, str], column: str) -> str | None:
    """A value every row of a run shares (its id, its params), or None when there is no such run."""
    if not lake.has(table, partition):
        return None
    values = lake.read(table, partition).column(column)
    return values[0].as_py() if len(values) else None
