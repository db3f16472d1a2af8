"""The searcher manager: the one place that decides what a search of a corpus reads (Lucene's
``SearcherManager``). A search acquires a ``Generation``: the index set of the corpus's current snapshot
(loaded once per snapshot and kept warm, with the methods as declared then) and, for a corpus the lake
owns, the fresh segment of every write in its log at that moment. The log is listed at every
acquisition (one directory listing), so a write acknowledged before a search starts, by this process
or another, upsert or delete, is in that search; the segment of the writes seen before is reused, and
grown with their encodings kept, when the log moved on.

A snapshot is current until a build commits a newer one of the corpus, of the lake-wide models, of
the corpus a learned index of it trains on, or methods.yaml changes; a few stat calls tell. Searches
already running finish on the generation they hold. A newer snapshot of a corpus already served (a
build committed; its declaration and methods.yaml as they were) is warmed in the background (the methods searched on the old one run once on it) while searches go on
reading the old one, and swapped in when warm, as Lucene warms a new reader before it serves: a fold
does not stall the searches. The old one answers exactly meanwhile: the writes the new one folded
(and its build may have trimmed from the log) are read from the entries this process holds; when it
does not hold every one of them, a search waits for the warm-up instead."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphlake.api.citations import Citable
from graphlake.api.relevance import Calibration, fitted
from graphlake.api.results import DamagedLog, IndexNotBuilt, RequestError, UnknownName
from graphlake.common.once import once
from graphlake.common.suggest import did_you_mean
from graphlake.retrieval.core import Methods
from graphlake.retrieval.evaluation import first_stage_gap
from graphlake.retrieval.index.config import IndexConfig
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.warehouse.corpora import LAKE_OWNED, CorpusRegistry, CorpusSpec
from graphlake.warehouse.object_store import remote_of
from graphlake.warehouse.scopes import LAKE_SCOPE
from graphlake.warehouse.snapshots import SNAPSHOTS
from graphlake.warehouse.storage import LakeStorage, NotBuilt, StorageError

logger = logging.getLogger(__name__)

if TYPE_CHECKING:  # a lake-owned corpus's writes: imported where one is searched, not by every query
    from graphlake.api.backlog import Backlog
    from graphlake.retrieval.filters import Filter
    from graphlake.retrieval.index.metadata import DocumentMetadata
    from graphlake.retrieval.pending.segment import FreshSegment
    from graphlake.warehouse.write_log import Stamp, Write


@dataclass
class Served:
    """A corpus's snapshot as the API serves it: its index set and the methods, as of one version of
    the lake, and what the API derives once per snapshot (each method's relevance calibration and its
    note where it loses to its first stage, the tables hits are made from)."""

    version: tuple  # the corpus's snapshot, the lake-wide one, its training corpus's, methods.yaml's mtime, the corpus's declaration
    indexes: LakeIndexSet
    methods: Methods
    train: str  # the corpus its learned indexes train on (itself, unless it names a train_corpus)
    folded: int = 0  # a lake-owned corpus: the last write its snapshot folded
    searched: set[str] = field(default_factory=set)  # the methods searched on it: what its successor is warmed with
    _gaps: dict[str, str | None] = field(default_factory=dict)
    _calibrations: dict[str, Calibration | str] = field(default_factory=dict)

    @property
    def corpus(self) -> str:
        return self.indexes.corpus

    def gap(self, method: str) -> str | None:
        """The method's note when it loses to its first stage on this corpus (None: it does not)."""
        if method not in self._gaps:
            self._gaps[method] = first_stage_gap(self.indexes.lake, self.corpus, method, self.methods)
        return self._gaps[method]

    def calibration(self, method: str) -> Calibration | str:
        """The method's relevance calibration here (``api/relevance.py``), or why it has none."""
        if method not in self._calibrations:
            lake = self.indexes.lake
            if _judged(lake, self.corpus, method):
                found: Calibration | str = _fitted_on(lake, self.corpus, method)
            else:
                found = self._borrowed(method) or f"no stored run of {method!r} on {self.corpus!r} with gold to fit it on (`graphlake eval --corpus {self.corpus} --methods {method}` makes one)"
            self._calibrations[method] = found
        return self._calibrations[method]

    def _borrowed(self, method: str) -> Calibration | None:
        """The calibration of ``method`` fitted on another corpus of the lake with the same dense and
        sparse models (the one with the most judged queries), for a corpus with none judged."""
        from graphlake.warehouse.corpora import CorpusRegistry

        lake = LakeStorage(self.indexes.lake.home)  # the other corpora as committed now
        registry = CorpusRegistry(lake.home)
        models = _models(registry, self.corpus)
        fits = []
        for other in sorted(registry.all()):
            if other != self.corpus and _judged(lake, other, method) and _models(registry, other) == models:
                fit = _fitted_on(lake, other, method)
                if isinstance(fit, Calibration):
                    fits.append(replace(fit, borrowed_from=other))
        return max(fits, key=lambda fit: fit.queries, default=None)

    @once
    def citable(self) -> Citable:
        return Citable(self.indexes.snapshot)

    @once
    def text_bytes(self) -> int:
        """The nodes' mean text length in bytes, which a search's memory is estimated by."""
        return max(1, int(pc.mean(pc.binary_length(self.indexes.snapshot.nodes().column("text"))).as_py() or 1))


@dataclass
class _Swap:
    """A newer served snapshot of a corpus being warmed in the background, and when it was seen (its stamp)."""

    served: Served
    stamp: tuple[int, ...] | None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Generation:
    """What one search reads: a served snapshot and, for a corpus the lake owns, the fresh segment of
    the writes its snapshot has not folded (None: none pending), with the tables its hits cite."""

    served: Served
    fresh: FreshSegment | None
    citable: Citable

    @property
    def indexes(self) -> LakeIndexSet:
        return self.served.indexes

    @property
    def methods(self) -> Methods:
        return self.served.methods

    @property
    def snapshot(self) -> int:
        return self.served.version[0]

    def metadata(self) -> DocumentMetadata:
        """The metadata of every document the search reads, committed and pending: what a filter names."""
        return self.citable.snapshot.metadata()

    def document_ids(self, expression: Filter | None) -> list[str]:
        """The ids of the documents a search reads that ``expression`` allows (all without one): the
        committed ones no pending write replaced or deleted, then the pending ones."""
        return self.documents(expression).column("doc_id").to_pylist()

    def documents(self, expression: Filter | None = None) -> pa.Table:
        """The rows (doc_id, title, text, metadata) of the documents a search reads that ``expression``
        allows, in ``document_ids``' order."""
        tables = self.citable.snapshot
        documents = tables.documents()
        keep = np.ones(documents.num_rows, bool) if expression is None else tables.metadata().select(expression)
        if self.fresh is not None:
            committed, touched = documents.num_rows - len(self.fresh.present), set(self.fresh.touched)
            ids = documents.column("doc_id").to_pylist()[:committed]
            keep[:committed] &= np.fromiter((doc_id not in touched for doc_id in ids), bool, count=committed)
        return documents.select(["doc_id", "title", "text", "metadata"]).filter(pa.array(keep))


class SearcherManager:
    """Per corpus, its served snapshot and its fresh segment; safe to share between threads."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self._remote = remote_of(self.home) is not None
        self._config = IndexConfig.resolve()  # the model cache and the device, resolved once for the lake
        self._served: dict[str, Served] = {}
        self._stamps: dict[str, tuple[int, ...] | None] = {}
        self._fresh: dict[str, dict[int, tuple[tuple, FreshSegment, Citable]]] = {}  # per lake-owned corpus, per served index set: its entries' segment
        self._read: dict[str, dict[int, tuple[Stamp, Write]]] = {}  # per lake-owned corpus: the log entries read so far, as they were on disk then
        self._swaps: dict[str, _Swap] = {}  # per corpus: its newer snapshot being warmed
        self._loading = threading.Lock()
        self._freshening = threading.Lock()

    @cached_property
    def backlog(self) -> Backlog:
        """The documents being encoded for writes (made at the first write: a process that only reads never imports it)."""
        from graphlake.api.backlog import Backlog

        return Backlog()

    def encoded_write(self, corpus: str, documents: list[dict]) -> Callable[[int], None]:
        """Encode an upsert's checked ``documents`` by ``corpus``'s models before it is acknowledged
        (within the backlog's bound: ``Overloaded`` past it), so that no search encodes them; what keeps
        their vectors beside the log once the write has its number."""
        from graphlake.common.memory import release_freed
        from graphlake.retrieval.pending.encodings import encode, store
        from graphlake.warehouse.write_log import Write, WriteLog, apply

        rows: dict[str, dict] = {}
        apply(rows, Write(0, "upsert", 0.0, tuple(documents)))
        with self.backlog.holding(len(documents)), built(corpus):
            indexes = self.served(corpus).indexes
            encoded = encode(indexes, list(rows.values()))
        release_freed()  # the activations' pages: the budget counts the segment, not the encoder's peak
        folder = WriteLog(self.home, corpus, lambda: 0).folder

        def keep(seq: int) -> None:
            try:
                store(folder, seq, indexes, encoded)
            except OSError as error:  # the write is durable already: a search encodes it again, nothing is lost
                logger.warning("corpus %r: the vectors of write %d were not kept (%s); a search encodes it again", corpus, seq, error)

        return keep

    def acquire(self, corpus: str, after: int | None = None) -> Generation:
        """The generation a search of ``corpus`` starting now reads; ``after``: a write's number the
        search must include (an error when the log has no such write)."""
        for attempt in range(3):
            known = self._served.get(corpus)  # a corpus read from its source has no log to list
            owned = known is None or known.indexes.snapshot.spec.format == LAKE_OWNED
            listed = _listed(self.home, corpus) if owned else {}  # before the snapshot is chosen: a write a fold trims meanwhile is in the snapshot served then
            served, swap = self._current(corpus)
            try:
                return self._generation(served, listed, after, swap)
            except _Trimmed:  # a build committed and trimmed the log meanwhile: read its snapshot
                if attempt == 2:
                    raise
                if swap is not None:
                    swap.done.wait()
        raise AssertionError("unreachable")

    def forget(self, corpus: str) -> None:
        """Let go of everything read of a dropped corpus (the next search of its name finds it undeclared)."""
        with self._loading, self._freshening:
            for held in (self._served, self._stamps, self._fresh, self._read, self._swaps):
                held.pop(corpus, None)

    def loading(self, corpus: str) -> str | None:
        """The index of ``corpus`` being loaded now (a warm-up, a first search), None when none is."""
        served = self._served.get(corpus)
        return None if served is None else served.indexes.loading

    def served(self, corpus: str) -> Served:
        """The corpus's served snapshot: the lake's current one, or while that is warmed, the one before."""
        return self._current(corpus)[0]

    def _current(self, corpus: str) -> tuple[Served, _Swap | None]:
        """The served snapshot a search reads now and, when it is not the lake's current one, the swap
        warming that one. A corpus never served is loaded here; a newer snapshot of one served is
        warmed in the background."""
        stamp = self._stamp(corpus)
        served = self._served.get(corpus)
        if served is not None and stamp is not None and self._stamps.get(corpus) == stamp:
            return served, None  # nothing was committed or declared since: a few stat calls decide it
        swap = self._swaps.get(corpus)
        if served is not None and swap is not None and stamp is not None and swap.stamp == stamp and not swap.done.is_set():
            return served, swap
        registry = CorpusRegistry(self.home)  # read once for the request: the index set resolves the corpus's models through it
        declared = registry.all()
        if corpus not in declared:
            raise UnknownName(f"corpus {corpus!r} is not declared{did_you_mean(corpus, declared)} (the lake has: {', '.join(sorted(declared)) or 'none'})")
        lake, train = LakeStorage(self.home), declared[corpus].train_corpus or corpus
        version = self._version(lake, corpus, train, declared[corpus])
        if served is not None and served.version == version:
            self._stamps[corpus] = stamp
            return served, None
        with self._loading:
            served, swap = self._served.get(corpus), self._swaps.get(corpus)
            if served is not None and served.version == version:
                self._stamps[corpus] = stamp
                return served, None
            if swap is not None and swap.served.version == version and not swap.done.is_set():
                swap.stamp = stamp
                return served, swap  # type: ignore[return-value]
            pinned = lake.pinned(*dict.fromkeys((corpus, LAKE_SCOPE, train)))
            version = (pinned.pins[corpus].number, pinned.pins[LAKE_SCOPE].number, pinned.pins[train].number, *version[3:])
            folded = _folded(pinned, corpus) if declared[corpus].format == LAKE_OWNED else 0
            newer = Served(version, open_index_set(pinned, corpus, registry=registry, config=self._config), load_methods(self.home), train, folded)
            if served is None or not served.searched or served.version[3:] != version[3:]:  # nothing to answer from or to warm, or a declaration changed: served at once
                self._served[corpus], self._stamps[corpus] = newer, stamp
                return newer, None
            self._swaps[corpus] = swap = _Swap(newer, stamp)
        threading.Thread(target=self._warm, args=(corpus, served, swap), name=f"warm {corpus}", daemon=True).start()
        return served, swap

    def _warm(self, corpus: str, old: Served, swap: _Swap) -> None:
        """Load what searches of ``old`` read on its successor (each method searched, once; the tables
        hits are made from; the fresh segment of the writes it has not folded), then serve it."""
        newer = swap.served
        try:
            for method in sorted(old.searched):
                if method in newer.methods:
                    newer.methods[method].run("warm up", newer.indexes)
                    newer.searched.add(method)
            newer.citable(), newer.text_bytes(), newer.indexes.snapshot.node_ids
            if newer.indexes.snapshot.spec.format == LAKE_OWNED:
                self._generation(newer, _listed(self.home, corpus), None)
        except Exception as error:  # what it could not load, a search loads (and reports) itself
            logger.warning("corpus %r: warming snapshot %s failed (%s); searches load it", corpus, newer.version[0], error)
        finally:
            with self._loading:
                if self._swaps.get(corpus) is swap:
                    self._served[corpus] = newer
                    self._stamps[corpus] = swap.stamp
                    del self._swaps[corpus]
            swap.done.set()

    def _generation(self, served: Served, listed: dict[int, Stamp], after: int | None, swap: _Swap | None = None) -> Generation:
        corpus = served.corpus
        if served.indexes.snapshot.spec.format != LAKE_OWNED:
            if after is not None:
                raise RequestError(f"after_write: corpus {corpus!r} takes no writes (it is read from its {served.indexes.snapshot.spec.format} source)")
            return Generation(served, None, served.citable())
        from graphlake.warehouse.write_log import WriteLog

        log = WriteLog(self.home, corpus, lambda: served.folded)
        entries = {seq: stamp for seq, stamp in listed.items() if seq > served.folded}  # every write acknowledged before the search started
        if swap is not None and swap.served.folded > served.folded:
            entries |= self._remembered(corpus, served.folded, swap.served.folded, listed)
        entries = dict(sorted(entries.items()))
        last = max(entries, default=served.folded)
        if after is not None and after > last:
            raise UnknownName(f"after_write: write {after} is not in corpus {corpus!r}'s log (its last is {last})")
        if not entries:
            return Generation(served, None, served.citable())
        segment, citable = self._segment(served, log, entries)
        return Generation(served, segment, citable)

    def _remembered(self, corpus: str, folded: int, newer: int, listed: dict[int, Stamp]) -> dict[int, Stamp]:
        """The entries numbered ``folded``+1 to ``newer`` (what a newer snapshot folded, which its build
        may have trimmed already) that the log no longer lists, as this process read them; ``_Trimmed``
        when it did not read every one: the old snapshot cannot answer without them."""
        with self._freshening:
            read = self._read.get(corpus, {})
            kept = {seq: read[seq][0] for seq in range(folded + 1, newer + 1) if seq not in listed and seq in read}
        if any(seq not in listed and seq not in kept for seq in range(folded + 1, newer + 1)):
            raise _Trimmed
        return kept

    def _segment(self, served: Served, log, entries: dict[int, Stamp]) -> tuple[FreshSegment, Citable]:
        """The fresh segment of exactly the log's ``entries`` as they are on disk now: the one made last
        when it holds them, else a new one that reuses its encodings. An entry changed on disk since it
        was read (a repair, a hand) is read again; one that cannot be trusted refuses the search, naming it."""
        from graphlake.retrieval.pending.segment import FreshSegment
        from graphlake.warehouse.write_log import WriteLogError

        corpus, key = served.corpus, tuple(entries.items())
        with self._freshening:
            segments = self._fresh.setdefault(corpus, {})
            kept = segments.get(id(served.indexes))
            if kept is not None and kept[1].indexes is served.indexes and kept[0] == key:
                return kept[1], kept[2]
            before = kept or next(reversed(segments.values()), None)  # the last made: the encodings it reuses
            read = self._read.setdefault(corpus, {})
            for seq in [seq for seq in read if seq not in entries]:
                del read[seq]
            for seq, stamp in entries.items():
                if seq not in read or read[seq][0] != stamp:
                    try:
                        read[seq] = (stamp, log.read(seq))
                    except WriteLogError as error:
                        if not log.path(seq).exists():
                            raise _Trimmed from None
                        raise DamagedLog(str(error)) from None
            with built(corpus):
                segment = FreshSegment(served.indexes, [read[seq][1] for seq in entries], max(entries), before=before[1] if before else None, log=log.folder)
            live = {id(candidate.indexes) for candidate in (self._served.get(corpus), getattr(self._swaps.get(corpus), "served", None)) if candidate is not None}
            made = (key, segment, Citable(segment.tables))
            self._fresh[corpus] = {at: old for at, old in segments.items() if at in live and at != id(served.indexes)} | {id(served.indexes): made}
        return made[1], made[2]

    def _version(self, lake: LakeStorage, corpus: str, train: str, spec: CorpusSpec) -> tuple:
        """What a served snapshot is made of: the snapshots it reads, methods.yaml as of its last change, and
        the corpus's declaration (an edited ``linking:`` is served at once, as a new process would serve it;
        another corpus declared leaves it warm)."""
        numbers = (lake.snapshots.number(corpus), lake.snapshots.number(LAKE_SCOPE), lake.snapshots.number(train))
        return (*numbers, _mtime(self.home / "methods.yaml"), spec.model_dump_json())

    def _stamp(self, corpus: str) -> tuple[int, ...] | None:
        """When the snapshot folders a corpus is served from and methods.yaml last changed (a commit adds
        a file to its folder); None on object storage, where a commit shows only in the store."""
        if self._remote:
            return None
        folders, served = self.home / SNAPSHOTS, self._served.get(corpus)
        train = served.train if served is not None else corpus
        paths = (folders / corpus, folders / LAKE_SCOPE, folders / train, self.home / "methods.yaml", self.home / "corpora.yaml")
        return tuple(map(_mtime, paths))


def _judged(lake: LakeStorage, corpus: str, method: str) -> bool:
    """Whether ``corpus`` has a stored run of ``method`` and gold to fit its relevance on."""
    return lake.has("runs", {"corpus": corpus, "method": method}) and lake.has("qrels", {"corpus": corpus})


def _fitted_on(lake: LakeStorage, corpus: str, method: str) -> Calibration | str:
    partition = {"corpus": corpus}
    return fitted(lake.read("runs", {**partition, "method": method}), lake.read("queries", partition), lake.read("qrels", partition))


def _models(registry, corpus: str) -> tuple[str, str]:
    """The dense and sparse models ``corpus`` is encoded with: a calibration carries over only between corpora they encode alike."""
    return registry.model(corpus, "dense").name, registry.model(corpus, "sparse").name


def _listed(home: Path, corpus: str) -> dict[int, Stamp]:
    """The entries in ``corpus``'s log now, by number (none for a corpus that takes no writes)."""
    from graphlake.warehouse.write_log import WriteLog

    return WriteLog(home, corpus, lambda: 0).listing()


def _folded(lake: LakeStorage, corpus: str) -> int:
    from graphlake.warehouse.write_log import folded_through

    return folded_through(lake, corpus)


class _Trimmed(Exception):
    """A log entry a newer snapshot folded was trimmed while an older one was read."""


@contextmanager
def built(corpus: str) -> Iterator[None]:
    """A table or artefact a search reads that is missing or stale, as ``IndexNotBuilt`` naming what and
    the command that builds it, without the lake's paths (a server's answer must not show them)."""
    try:
        yield
    except StorageError as error:
        what = error.what if isinstance(error, NotBuilt) else str(error).splitlines()[0]
        hint = f"`graphlake materialize --corpus {corpus}` or `graphlake query --build ...` builds it"
        raise IndexNotBuilt(f"corpus {corpus!r}: {what} ({hint})") from None


def _mtime(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return -1
