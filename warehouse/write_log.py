"""The log of a lake-owned corpus's pending writes: what an application upserted and deleted since the
corpus's committed snapshot folded the log last.

A write is one file, ``writes/<corpus>/<seq>.json``, named by its sequence number and holding it, with a
SHA-256 of its body (the translog's and a WAL's record: numbered and checksummed, so that an entry
moved, swapped, truncated or edited is named, never replayed). It is written beside its final name,
synced, then linked to that name in one exclusive step (a link fails where the name exists, so two
writers, threads or processes, never take one number) and the folder synced. It is acknowledged only
then: a crash before leaves no entry, after leaves a whole one. The build folds the entries up to a
number into the corpus's tables as one snapshot, which records that number (``folded``); entries at or
below it are then removed (``trim``), and an entry left by a crash between the commit and the trim is
below the number and ignored. Numbers only grow and are never given twice: the next is one more than
the largest of the entries, the folded number and the high-water mark a repair leaves when it sets a
damaged entry aside, listed in that order (a trim follows its commit).
"""

from __future__ import annotations

import hashlib
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

from graphlake.warehouse.scopes import WRITES, room_for
from graphlake.warehouse.snapshots import fsync_directory
from graphlake.warehouse.storage import LakeStorage
from graphlake.warehouse.write_checks import WriteRefused, checked_documents, checked_ids

FOLDED = "folded_writes"  # the artefact a fold commits with the corpus's tables: the number it folded through
UNFINISHED = "an append that never finished (never acknowledged)"
UNFINISHED_AFTER_S = 60.0  # a staged file this old was left by a crash: an append takes milliseconds
DAMAGED_MARK = "the high-water mark cannot be read"
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
    """An entry of the log that cannot be trusted; the message names it in one line (by the lake's own
    path, never the machine's) and the command that sets it aside."""


VECTORS, VECTORS_SUFFIX = "vectors", ".arrow"  # the pending writes' vectors, <seq>.arrow, kept by the process that encoded them (retrieval/pending/encodings.py)
_VECTORS = re.compile(r"^(\d{12})\.arrow$")
HIGH_WATER = "high-water"  # the largest number a repair saw: the next write takes a larger one
Stamp = tuple[int, int, int]  # an entry file's inode, size and modification time: an entry changed on disk has another


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

    _appending: dict[Path, threading.Lock] = {}  # within a process, one append a log at a time: the exclusive link decides between processes

    def __init__(self, home: Path, corpus: str, folded: Callable[[], int]) -> None:
        self.folder = Path(home) / WRITES / corpus
        self.corpus, self._folded = corpus, folded

    def append(self, op: Op, documents: list[dict[str, Any]] | None = None, ids: list[str] | None = None) -> Write:
        """Make the write (checked by the caller: ``write_checks.py``) durable and return it with its
        number; ``DiskFull`` when the disk has no room, leaving nothing behind; ``FileNotFoundError``
        when the log's folder is gone (its corpus dropped meanwhile)."""
        staged = self.folder / f".{uuid.uuid4().hex}.tmp"
        lock = self._appending.setdefault(self.folder, threading.Lock())
        try:
            with room_for(f"write to corpus {self.corpus!r}"), lock:
                seq = self.last() + 1  # the folder is the caller's to make (``api/writes.py``): one gone was dropped
                while True:  # the number and the time are written in the body, so each attempt stages its own
                    at = time.time()
                    _stage(staged, _sealed({"seq": seq, "op": op, "at": at, **({"documents": documents} if op == "upsert" else {"ids": ids})}))
                    try:
                        os.link(staged, self.path(seq))
                        break
                    except FileExistsError:  # another process took it
                        seq += 1
                fsync_directory(self.folder)
        finally:
            staged.unlink(missing_ok=True)
        return Write(seq, op, at, tuple(documents or ()), tuple(ids or ()))

    def folded(self) -> int:
        """The number the corpus's committed snapshot folded through."""
        return self._folded()

    def last(self) -> int:
        """The largest number given so far: the entries', else the folded one's or the high-water mark's."""
        listed = self.numbers()  # listed before the folded number is read: an entry trimmed meanwhile was folded by then
        return max([*listed, self._folded(), self.high_water()], default=0)

    def high_water(self) -> int:
        """The mark a repair left (0: none); one that cannot be read refuses, as a damaged entry does:
        read as 0 it would give numbers again."""
        path = self.folder / HIGH_WATER
        try:
            return int(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return 0
        except (OSError, ValueError):
            raise WriteLogError(f"corpus {self.corpus!r}: the log's high-water mark ({WRITES}/{self.corpus}/{HIGH_WATER}) is damaged; `graphlake doctor --repair` writes it again") from None

    def numbers(self) -> list[int]:
        """The numbers of the entries on disk, ascending (folded ones not yet trimmed among them)."""
        return sorted(self.listing())

    def listing(self) -> dict[int, Stamp]:
        """The entries on disk by number, each with its ``Stamp``: a reader that kept an entry reads it
        again when its stamp changed (one directory scan and a stat an entry)."""
        found: dict[int, Stamp] = {}
        try:
            with os.scandir(self.folder) as entries:
                for entry in entries:
                    if m := _ENTRY.match(entry.name):
                        try:
                            stat = entry.stat()
                        except FileNotFoundError:  # trimmed meanwhile
                            continue
                        found[int(m.group(1))] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        except FileNotFoundError:
            return {}
        return found

    def pending(self, after: int | None = None, through: int | None = None) -> list[Write]:
        """The writes numbered above ``after`` (default: the folded number) up to ``through``, in order."""
        after = self._folded() if after is None else after
        return [self.read(seq) for seq in self.numbers() if seq > after and (through is None or seq <= through)]

    def read(self, seq: int) -> Write:
        """The entry numbered ``seq``, checked as a write is checked before it is written, and against
        its own number and checksum; ``WriteLogError`` naming it when it is not whole."""
        name = f"{WRITES}/{self.corpus}/{self.path(seq).name}"
        try:
            write = _opened(self.path(seq).read_bytes(), seq)
        except FileNotFoundError:
            raise WriteLogError(f"corpus {self.corpus!r}: write {seq} ({name}) is gone from the log") from None
        except (OSError, ValueError) as error:
            problem = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
            raise WriteLogError(f"corpus {self.corpus!r}: write {seq} ({name}) is damaged: {problem}; `graphlake doctor --repair` sets it aside") from None
        return write

    def trim(self, through: int) -> int:
        """Remove the entries a committed snapshot folded (numbered ``through`` and below); how many."""
        removed = 0
        for seq in self.numbers():
            if seq <= through:
                self.path(seq).unlink(missing_ok=True)
                removed += 1
        vectors = self.folder / VECTORS
        old = time.time() - UNFINISHED_AFTER_S
        for name in os.listdir(vectors) if vectors.is_dir() else []:  # the vectors of folded writes, and what a crash left while keeping some
            if (m := _VECTORS.match(name)) is not None and int(m.group(1)) <= through or m is None and _mtime(vectors / name) < old:
                (vectors / name).unlink(missing_ok=True)
        if vectors.is_dir() and not any(vectors.iterdir()):
            vectors.rmdir()
        if removed:
            fsync_directory(self.folder)
        return removed

    def problems(self) -> list[tuple[Path, str]]:
        """What ``graphlake doctor`` reports: entries that cannot be trusted (unreadable, of another
        shape than a write, numbered otherwise than their name, or failing their checksum), and files an
        append that never finished left (never acknowledged: ``repair`` removes them)."""
        found = []
        for seq in self.numbers():
            try:
                self.read(seq)
            except WriteLogError as error:
                found.append((self.path(seq), str(error).split(": ", 1)[1].split("; `graphlake doctor")[0]))
        try:
            self.high_water()
        except WriteLogError:
            found.append((self.folder / HIGH_WATER, DAMAGED_MARK))
        if self.folder.is_dir():
            old = time.time() - UNFINISHED_AFTER_S  # younger: an append (or a repair) at work now, not one a crash cut short
            found += [
                (self.folder / name, UNFINISHED) for name in sorted(os.listdir(self.folder)) if (name.endswith(".tmp") or name.startswith(f".{HIGH_WATER}.")) and _mtime(self.folder / name) < old
            ]
        return found

    def repair(self) -> list[str]:
        """Remove what unfinished appends left; set a damaged entry aside (``.damaged-`` before its name:
        an acknowledged write lost to the disk, named so that it can be recovered by hand), first raising
        the high-water mark past it, so that its number is never given to another write."""
        done, problems = [], self.problems()
        if any(problem != UNFINISHED for _, problem in problems):
            damaged = [int(m.group(1)) for name in os.listdir(self.folder) if (m := re.match(r"^\.damaged-(\d{12})\.json$", name))]
            staged = self.folder / f".{HIGH_WATER}.{uuid.uuid4().hex}"
            _stage(staged, str(max([*self.numbers(), *damaged, self._folded(), _readable_mark(self)])).encode())
            os.replace(staged, self.folder / HIGH_WATER)
        for path, problem in problems:
            if problem == DAMAGED_MARK:
                done.append(f"wrote {HIGH_WATER} again: {problem}")
            elif problem == UNFINISHED:
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


def _readable_mark(log: WriteLog) -> int:
    try:
        return log.high_water()
    except WriteLogError:
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def _sealed(body: dict[str, Any]) -> bytes:
    """An entry's bytes: its body and the SHA-256 of the body's canonical form."""
    return json.dumps({**body, "sha256": _digest(body)}, ensure_ascii=False).encode("utf-8")


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _opened(raw: bytes, seq: int) -> Write:
    """An entry's bytes as the write they hold, or ``ValueError`` saying what is wrong with them."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(body, dict) or body.get("op") not in ("upsert", "delete"):
        raise ValueError("not a write (no op upsert or delete)")
    given = {"seq", "op", "at", "sha256", "documents" if body["op"] == "upsert" else "ids"}
    if set(body) != given:
        raise ValueError(f"a write of another shape (fields {', '.join(sorted(body))}; a {body['op']} has {', '.join(sorted(given))})")
    if body["seq"] != seq:
        raise ValueError(f"it says it is write {body['seq']!r}: moved or swapped")
    checksum = body.pop("sha256")
    if checksum != _digest(body):
        raise ValueError("its checksum does not match its body: edited or torn")
    if not isinstance(body["at"], int | float) or isinstance(body["at"], bool):
        raise ValueError("its time is not a number")
    try:
        if body["op"] == "upsert":
            return Write(seq, "upsert", float(body["at"]), documents=tuple(checked_documents(body["documents"])))
        return Write(seq, "delete", float(body["at"]), ids=tuple(checked_ids(body["ids"])))
    except WriteRefused as error:
        raise ValueError(f"not a write the lake takes ({error})") from None


def _stage(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` and sync it (the caller links or renames it into place)."""
    with open(path, "wb") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())


def apply(documents: dict[str, dict], write: Write) -> None:
    """One write replayed on ``documents`` (by id, rows of the documents table): what the fold
    (``readers/lake_owned.py``) and the fresh segment (``retrieval/pending/segment.py``) both do. The
    metadata are stored as the application gave them."""
    if write.op == "delete":
        for doc_id in write.ids:
            documents.pop(doc_id, None)
        return
    for document in write.documents:
        documents[document["id"]] = {
            "doc_id": document["id"],
            "title": document.get("title") or "",
            "text": document["text"],
            "metadata": json.dumps(document.get("metadata") or {}, ensure_ascii=False, sort_keys=True),
        }
