"""The log of a lake-owned corpus's pending writes: what an application upserted and deleted since the
corpus's committed snapshot folded the log last.

A write is one file, ``writes/<corpus>/<seq>.json``, named by its sequence number: written beside its
final name, synced, then linked to that name in one exclusive step (a link fails where the name exists,
so two writers, threads or processes, never take one number) and the folder synced. It is
acknowledged only then: a crash before leaves no entry, after leaves a whole one. The build folds the
entries up to a number into the corpus's tables as one snapshot, which records that number
(``folded``); entries at or below it are then removed (``trim``), and an entry left by a crash between
the commit and the trim is below the number and ignored. Numbers only grow: the next is one more than
the largest of the entries and the folded number, listed in that order (a trim follows its commit).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from graphlake.warehouse.scopes import WRITES
from graphlake.warehouse.snapshots import fsync_directory
from graphlake.warehouse.storage import LakeStorage
from graphlake.warehouse.tables import CITED_BY

FOLDED = "folded_writes"  # the artefact a fold commits with the corpus's tables: the number it folded through
UNFINISHED = "an append that never finished (never acknowledged)"
_ENTRY = re.compile(r"^(\d{12})\.json$")
Op = Literal["upsert", "delete"]


def folded_through(lake: LakeStorage, corpus: str) -> int:
    """The number of the last write ``corpus``'s snapshot (as ``lake`` reads it) folded; 0 before any fold."""
    if lake.artifact_written_at(FOLDED, {"corpus": corpus}) is None:
        return 0
    return int((lake.artifact(FOLDED, {"corpus": corpus}) / "through").read_text(encoding="utf-8"))


def record_folded(lake: LakeStorage, corpus: str, through: int) -> None:
    """Stage the number a fold read the log through, committed with the run's tables."""
    lake.write_artifact(FOLDED, {"corpus": corpus}, lambda folder: (folder / "through").write_text(str(through), encoding="utf-8"))


def trim_folded(home: Path, corpus: str) -> int:
    """Remove the log entries ``corpus``'s current snapshot folded (after a commit); how many."""
    if not (Path(home) / WRITES / corpus).is_dir():
        return 0
    folded = folded_through(LakeStorage(home), corpus)
    return WriteLog(home, corpus, lambda: folded).trim(folded) if folded else 0


def pending_writes(home: Path, corpus: str) -> list[int]:
    """The numbers of ``corpus``'s writes its current snapshot has not folded."""
    if not (Path(home) / WRITES / corpus).is_dir():
        return []
    log = corpus_log(home, corpus)
    folded = log.folded()
    return [seq for seq in log.numbers() if seq > folded]


def corpus_log(home: Path, corpus: str) -> WriteLog:
    """``corpus``'s log in the lake at ``home``, its folded number read from the current snapshot each time it is asked."""
    return WriteLog(home, corpus, lambda: folded_through(LakeStorage(home), corpus))


class WriteLogError(ValueError):
    """An entry of the log that cannot be read; the message names its file."""


@dataclass(frozen=True)
class Write:
    """One acknowledged write: upserted documents (``{"id", "title", "text", "metadata"}``) or deleted ids."""

    seq: int
    op: Op
    at: float  # when it was acknowledged (epoch seconds)
    documents: tuple[dict[str, Any], ...] = ()
    ids: tuple[str, ...] = ()

    @property
    def doc_ids(self) -> tuple[str, ...]:
        return tuple(d["id"] for d in self.documents) if self.op == "upsert" else self.ids


class WriteLog:
    """One corpus's log in ``home``; ``folded`` says, each time it is asked, the number the corpus's
    committed snapshot folded through."""

    _appending = threading.Lock()  # within a process, one append at a time: the exclusive link decides between processes

    def __init__(self, home: Path, corpus: str, folded: Callable[[], int]) -> None:
        self.folder = Path(home) / WRITES / corpus
        self.corpus, self._folded = corpus, folded

    def append(self, op: Op, documents: list[dict[str, Any]] | None = None, ids: list[str] | None = None) -> Write:
        """Make the write durable and return it with its number."""
        self.folder.mkdir(parents=True, exist_ok=True)
        at = time.time()
        body = {"op": op, "at": at, **({"documents": documents} if op == "upsert" else {"ids": ids})}
        staged = self.folder / f".{uuid.uuid4().hex}.tmp"
        with open(staged, "w", encoding="utf-8") as handle:
            json.dump(body, handle, ensure_ascii=False)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            with self._appending:
                seq = self.last() + 1
                while True:
                    try:
                        os.link(staged, self.path(seq))
                        break
                    except FileExistsError:  # another process took it
                        seq += 1
        finally:
            staged.unlink(missing_ok=True)
        fsync_directory(self.folder)
        return Write(seq, op, at, tuple(documents or ()), tuple(ids or ()))

    def folded(self) -> int:
        """The number the corpus's committed snapshot folded through."""
        return self._folded()

    def last(self) -> int:
        """The largest number given so far: the entries', else the folded one's."""
        listed = self.numbers()  # listed before the folded number is read: an entry trimmed meanwhile was folded by then
        return max([*listed, self._folded()], default=0)

    def numbers(self) -> list[int]:
        """The numbers of the entries on disk, ascending (folded ones not yet trimmed among them)."""
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for name in names if (m := _ENTRY.match(name)))

    def pending(self, after: int | None = None, through: int | None = None) -> list[Write]:
        """The writes numbered above ``after`` (default: the folded number) up to ``through``, in order."""
        after = self._folded() if after is None else after
        return [self.read(seq) for seq in self.numbers() if seq > after and (through is None or seq <= through)]

    def read(self, seq: int) -> Write:
        path = self.path(seq)
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            if body["op"] == "upsert":
                return Write(seq, "upsert", float(body["at"]), documents=tuple(body["documents"]))
            if body["op"] == "delete":
                return Write(seq, "delete", float(body["at"]), ids=tuple(body["ids"]))
            raise ValueError(f"op {body['op']!r}")
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise WriteLogError(f"{path}: not a readable write ({error}); `graphlake doctor` lists the log's problems") from None

    def trim(self, through: int) -> int:
        """Remove the entries a committed snapshot folded (numbered ``through`` and below); how many."""
        removed = 0
        for seq in self.numbers():
            if seq <= through:
                self.path(seq).unlink(missing_ok=True)
                removed += 1
        if removed:
            fsync_directory(self.folder)
        return removed

    def problems(self) -> list[tuple[Path, str]]:
        """What ``graphlake doctor`` reports: entries that cannot be read, and files an append that
        never finished left (never acknowledged: ``repair`` removes them)."""
        found = []
        for seq in self.numbers():
            try:
                self.read(seq)
            except WriteLogError as error:
                found.append((self.path(seq), str(error).split(": ", 1)[1]))
        if self.folder.is_dir():
            found += [(self.folder / name, UNFINISHED) for name in sorted(os.listdir(self.folder)) if name.endswith(".tmp")]
        return found

    def repair(self) -> list[str]:
        """Remove what unfinished appends left; set an unreadable entry aside (``.damaged-`` before its
        name: an acknowledged write lost to the disk, named so that it can be recovered by hand)."""
        done = []
        for path, problem in self.problems():
            if problem == UNFINISHED:
                path.unlink(missing_ok=True)
                done.append(f"removed {path.name}: {problem}")
            else:
                os.replace(path, path.with_name(f".damaged-{path.name}"))
                done.append(f"set {path.name} aside as .damaged-{path.name}: {problem}")
        if done:
            fsync_directory(self.folder)
        return done

    def path(self, seq: int) -> Path:
        return self.folder / f"{seq:012d}.json"


def apply(documents: dict[str, dict], write: Write, corpus: str) -> None:
    """One write replayed on ``documents`` (by id, rows of the documents table): what the fold
    (``readers/lake_owned.py``) and the fresh segment (``retrieval/pending/segment.py``) both do."""
    if write.op == "delete":
        for doc_id in write.ids:
            documents.pop(doc_id, None)
        return
    for document in write.documents:
        documents[document["id"]] = {
            "doc_id": document["id"],
            "title": document.get("title") or "",
            "text": document["text"],
            "metadata": json.dumps(document_metadata(corpus, document), ensure_ascii=False, sort_keys=True),
        }


def document_metadata(corpus: str, document: dict) -> dict:
    """The metadata stored with an upserted document: the application's, and what a hit cites it by
    (``source``: the lake itself, unless the application named a url, source or path)."""
    given = dict(document.get("metadata") or {})
    if not any(key in given for key in CITED_BY):
        given["source"] = f"lake://{corpus}/{document['id']}"
    return given
