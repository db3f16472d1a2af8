"""The corpus registry: which corpora exist, in which format, read from where, chunked how.

Corpora are declared in ``$GRAPHLAKE_HOME/corpora.yaml`` (by hand or by ``graphlake ingest``);
the bundled demo corpus is always declared. Each corpus is one Dagster partition.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from graphlake.common.suggest import did_you_mean
from graphlake.warehouse.config_files import ConfigFileError, key_line, load_mapping, one_line
from graphlake.warehouse.encoder_specs import ROLE_MARK, ModelSpec, Role, declared_models, made_before_identities, model_identity
from graphlake.warehouse.linking import Linking, LinkingDeclaration, format_linking
from graphlake.warehouse.locks import declarations_lock
from graphlake.warehouse.readers import FORMATS, Ingested, IngestError, ReadRequest
from graphlake.warehouse.readers.base import NoDocuments
from graphlake.warehouse.scopes import WRITES, room_for

if TYPE_CHECKING:
    from graphlake.warehouse.storage import LakeStorage

REGISTRY_FILE = "corpora.yaml"
DEMO_CORPUS = "demo"
DEMO_PATH = Path(__file__).resolve().parent / "demo"
DEMO_CONFIG = DEMO_PATH / "run.yaml"  # the demo's run config: training budgets sized for its few queries
DEMO_SPLIT = "test"  # what `graphlake demo` runs and reports


class Chunking(BaseModel):
    """Chunk window in spaCy tokens; ``size=None`` keeps each document as one node."""

    model_config = ConfigDict(extra="forbid")

    size: int | None = Field(default=None, gt=0)
    overlap: int = Field(default=0, ge=0)

    def model_post_init(self, _context: object) -> None:
        if self.size is not None and self.overlap >= self.size:
            raise ValueError(f"chunk overlap {self.overlap} must be smaller than chunk size {self.size}")


# Benchmark corpora are already passages (their gold is defined per passage), so they are not
# re-chunked; free text is.
FORMAT_CHUNKING: dict[str, Chunking] = {
    "jsonl": Chunking(size=256, overlap=32),
    "api": Chunking(size=256, overlap=32),
    "files": Chunking(size=256, overlap=32),
    "demo": Chunking(size=64, overlap=12),
}


# the formats that read a separate query file (``--queries``) or gold file (``--qrels``)
READS = {"queries": {"hipporag", "jsonl", "spider", "bird", "files"}, "qrels": {"jsonl", "files"}}


class NameTaken(ValueError):
    """A corpus name another corpus has, or one kept for the bundled demo."""


CORPUS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


class CorpusSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    format: str
    path: str
    queries: str | None = None
    qrels: str | None = None
    split: str | None = None
    chunking: Chunking | None = None
    # how its passages relate, what the graph methods read (warehouse/linking.py); unset: its format's
    linking: LinkingDeclaration | None = None
    # how a folder of files is read (format ``files``): its decoding (default UTF-8, or what a
    # byte-order mark says), whether files that cannot be read are skipped and listed instead of
    # stopping the ingest, and the suffixes read besides the text ones
    encoding: str | None = None
    skip_bad: bool = False
    extensions: list[str] = []
    # the corpus whose queries tune and train the rankers used here (GraphER's alpha and GAT);
    # unset: this corpus's own "train" split
    train_corpus: str | None = None
    # the corpus whose queries pick GraphER's alpha (GraphER A.3 tunes it once, on BIRD, and fixes it
    # for every data set); unset: the training queries above
    alpha_corpus: str | None = None
    # the models this corpus uses where the lake's choice (models.yaml) does not suit it, by role:
    # ``{dense: my-bge}``; ``graphlake models`` lists the declared ones
    models: dict[Role, str] = {}

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        """A name that is a folder, a partition key and a SQL string alike."""
        if not CORPUS_NAME.fullmatch(name):
            raise ValueError(f"corpus name {name!r}: letters, digits, '_', '.' and '-', starting with a letter or digit")
        return name

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, encoding: str | None) -> str | None:
        """An encoding Python has, named before any file is read."""
        if encoding is not None:
            try:
                codecs.lookup(encoding)
            except LookupError:
                raise ValueError(f"unknown encoding {encoding!r} (latin-1, cp1252, utf-16, ...)") from None
        return encoding

    @field_validator("extensions")
    @classmethod
    def _suffixes(cls, extensions: list[str]) -> list[str]:
        """``html``, ``.HTML`` and ``.html`` alike: a lower-case suffix with its dot."""
        return sorted({"." + extension.strip().lower().lstrip(".") for extension in extensions if extension.strip(" .")})

    def model_post_init(self, _context: object) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"corpus {self.name!r}: unknown format {self.format!r}; one of {', '.join(FORMATS)}")
        for option, given in (("queries", self.queries), ("qrels", self.qrels)):
            if given is not None and self.format not in READS[option]:
                raise ValueError(f"corpus {self.name!r}: format {self.format!r} reads no separate {option} file (formats that do: {', '.join(sorted(READS[option]))})")
        if (self.encoding or self.skip_bad or self.extensions) and self.format != "files":
            raise ValueError(f"corpus {self.name!r}: encoding, skip_bad and extensions are options of format 'files', not {self.format!r}")
        for role, other in (("train_corpus", self.train_corpus), ("alpha_corpus", self.alpha_corpus)):
            if other == self.name:
                raise ValueError(f"corpus {self.name!r}: {role} must be another corpus, never the one evaluated")

    def read(self) -> Ingested:
        """The raw corpus as its format's reader reads it; an IngestError names the file, line and id."""
        try:
            return FORMATS[self.format](
                ReadRequest(
                    Path(self.path),
                    Path(self.queries) if self.queries else None,
                    self.split,
                    Path(self.qrels) if self.qrels else None,
                    self.encoding,
                    self.skip_bad,
                    tuple(self.extensions),
                )
            )
        except NoDocuments:
            raise IngestError(Path(self.path), f"no documents found: is it a {self.format} corpus (a list of its records)?") from None

    @property
    def effective_chunking(self) -> Chunking:
        return self.chunking if self.chunking is not None else FORMAT_CHUNKING.get(self.format, Chunking())

    @property
    def effective_linking(self) -> Linking:
        return self.linking.over(format_linking(self.format)) if self.linking is not None else format_linking(self.format)


DEMO = CorpusSpec(name=DEMO_CORPUS, format="demo", path=str(DEMO_PATH))
LAKE_OWNED = "api"  # the format of a corpus whose source is the lake itself: what the application writes


class UnknownCorpus(KeyError):
    """A corpus the registry does not declare; its message reads without the quotes a KeyError adds."""

    def __str__(self) -> str:
        return str(self.args[0])


def table_written_at(lake: LakeStorage, corpus: str, table: str, partition: Mapping[str, str]) -> float | None:
    """When the output in ``partition`` was written, None if it has none; for the vectors of a model
    role (``@dense``), None too when another revision of the model made them: new weights are a rebuild."""
    roles = [value[1:] for value in partition.values() if value.startswith(ROLE_MARK)]
    if not roles:  # no role to resolve: the registry (on an object store, a download) is not read
        return lake.written_at(table, partition)
    registry = CorpusRegistry(lake.home)
    resolved = registry.resolved(corpus, partition)
    written = lake.written_at(table, resolved)
    if written is None or not lake.rows(table, resolved):
        return written  # nothing encoded: nothing to encode again
    from graphlake.common.settings import model_cache

    current = model_identity(corpus_model(lake, corpus, roles[0]), model_cache())["revision"]
    return written if stored_revision(lake, table, resolved, roles[0]) == current else None


TUNED_ARTIFACT = "tuned_dense"  # per corpus: decision.json, and model/ where the tuned encoder was kept
TUNING_DECISION = "decision.json"


def corpus_model(lake: LakeStorage, corpus: str, role: str, registry: CorpusRegistry | None = None) -> ModelSpec:
    """The model ``corpus`` uses for ``role``; a model the lake tunes, as the weights it kept for this
    corpus (its tuned folder, or the model it started from), named as declared. Unresolved (its
    ``problem`` says so) until the corpus's first dense build tunes it. ``registry``: the declarations
    as the caller read them (read here when not given)."""
    registry = registry or CorpusRegistry(lake.home)
    spec = registry.model(corpus, role)
    decision = tuning_decision(lake, corpus) if spec.tune else None
    if decision is None:
        return spec
    if decision["kept"] == "tuned":
        folder = lake.artifact(TUNED_ARTIFACT, {"corpus": corpus}) / "model"
        return ModelSpec(name=spec.name, kind="dense", folder=str(folder), about=f"{spec.tune}, tuned for corpus {corpus}")
    # the base weights as declared (its revision too), so that the vectors it made before are reused, not encoded again
    base = declared_models(registry.path.parent).models[spec.tune]
    return base.model_copy(update={"name": spec.name, "about": f"{spec.tune}, untuned for corpus {corpus}: tuning did not beat it"})


def tuning_decision(lake: LakeStorage, corpus: str) -> dict | None:
    """The corpus's dense tuning decision (``kept``: ``tuned`` or ``base``, with the held-out scores), None before any."""
    if lake.artifact_written_at(TUNED_ARTIFACT, {"corpus": corpus}) is None:
        return None
    return json.loads((lake.artifact(TUNED_ARTIFACT, {"corpus": corpus}) / TUNING_DECISION).read_text(encoding="utf-8"))


def stored_revision(lake: LakeStorage, table: str, partition: Mapping[str, str], role: str) -> str:
    """The revision of the model that made stored vectors; for vectors written before revisions were
    recorded, the role's packaged model's (the only one there was)."""
    return lake.first_value(table, partition, "revision") or made_before_identities(role)["revision"]


class CorpusRegistry:
    def __init__(self, home: Path) -> None:
        from graphlake.warehouse.object_store import remote_of

        self.path = Path(home) / REGISTRY_FILE
        self.remote = remote_of(Path(home))
        if self.remote is not None:  # the declarations are the store's: this cache's copy may be behind
            self.remote.mirror(REGISTRY_FILE, self.path)

    def all(self) -> dict[str, CorpusSpec]:
        declared = {DEMO.name: DEMO}
        for name, entry in self._declared().items():
            if not isinstance(entry, dict):
                raise ConfigFileError(f"{key_line(self.path, 'corpora', name)}: corpus {name!r}: expected a mapping of settings, found {type(entry).__name__}")
            if entry.get("format") == LAKE_OWNED:  # its log is in this lake, wherever the lake is now (a copy's is the copy's)
                entry = {**entry, "path": str(self.path.parent / WRITES / name)}
            try:
                declared[name] = CorpusSpec(name=name, **entry)
            except (ValidationError, TypeError, ValueError) as error:
                detail = one_line(error).removeprefix(f"corpus {name!r}: ")
                raise ConfigFileError(f"{key_line(self.path, 'corpora', name)}: corpus {name!r}: {detail}") from None
        return declared

    def _declared(self) -> dict:
        """The raw ``corpora`` mapping of the file (empty when there is no file)."""
        if not self.path.is_file():
            return {}
        corpora = load_mapping(self.path).get("corpora") or {}
        if not isinstance(corpora, dict):
            raise ConfigFileError(f"{key_line(self.path, 'corpora')}: 'corpora' should map corpus names to their settings")
        return corpora

    @contextmanager
    def declaring(self, spec: CorpusSpec) -> Iterator[None]:
        """Declare ``spec`` for a run that must succeed for it to stay: if the body fails, the file is put
        back byte for byte (or, if another corpus was declared meanwhile, this corpus's entry is)."""
        with declarations_lock(self.path.parent):
            before = self.path.read_bytes() if self.path.is_file() else None
            previous = self._declared().get(spec.name)
            self.add(spec)
            written = self.path.read_bytes()
        try:
            yield
        except BaseException:
            with declarations_lock(self.path.parent):
                if (self.path.read_bytes() if self.path.is_file() else None) != written:
                    self._rewrite(lambda corpora: corpora.__setitem__(spec.name, previous) if previous is not None else corpora.pop(spec.name, None))
                elif before is None:
                    self.path.unlink()
                    if self.remote is not None:
                        self.remote.remove(REGISTRY_FILE)
                else:
                    self._replace(before)
            raise

    def get(self, name: str) -> CorpusSpec:
        corpora = self.all()
        if name not in corpora:
            raise UnknownCorpus(f"corpus {name!r} is not declared in {self.path}; declared: {', '.join(sorted(corpora))}{did_you_mean(name, corpora)}")
        return corpora[name]

    def model(self, corpus: str, role: str) -> ModelSpec:
        """The model ``corpus`` uses for ``role``: its own choice in this file, else the lake's (models.yaml)."""
        return declared_models(self.path.parent).choice(role, self.get(corpus).models, where=key_line(self.path, "corpora", corpus))

    def resolved(self, corpus: str, partition: Mapping[str, str]) -> dict[str, str]:
        """A table partition in which a value may name a model role (``@dense``), with the name of the
        model the corpus uses for that role in its place: the vectors of each model keep a partition of their own."""
        return {key: self.model(corpus, value[1:]).name if value.startswith(ROLE_MARK) else value for key, value in partition.items()}

    def declare_owned(self, name: str, replace: bool = True, **settings) -> CorpusSpec:
        """Declare a corpus the lake owns: its documents are the application's writes
        (``warehouse/write_log.py``), its source its log folder; ``settings``: chunking, models,
        train_corpus, alpha_corpus. One that exists is declared again (``replace``) or kept; a name a
        corpus read from its source has is refused (``ValueError``)."""
        with declarations_lock(self.path.parent):  # the check and the declaration, one step for every client
            declared = self.all().get(name)
            if declared is not None and declared.format != LAKE_OWNED:
                raise NameTaken(f"corpus {name!r} exists, read from its {declared.format} source; a corpus the lake owns needs a name of its own")
            if declared is None or replace:
                self.add(CorpusSpec(name=name, format=LAKE_OWNED, path=f"{WRITES}/{name}", **settings))  # relative: a copied or moved lake keeps its own log
            return self.get(name)

    def add(self, spec: CorpusSpec) -> None:
        """Declare or redeclare a corpus; the file is replaced atomically."""
        if spec.name == DEMO_CORPUS:
            raise NameTaken(f"corpus name {DEMO_CORPUS!r} is reserved for the bundled demo")
        self._rewrite(lambda corpora: corpora.__setitem__(spec.name, spec.model_dump(mode="json", exclude={"name"}, exclude_defaults=True)))

    def remove(self, name: str) -> bool:
        """Withdraw a declaration (atomically); whether there was one to withdraw."""
        with declarations_lock(self.path.parent):
            declared = name in self.all() and name != DEMO_CORPUS
            if declared:
                self._rewrite(lambda corpora: corpora.pop(name))
            return declared

    def _rewrite(self, change) -> None:
        """Read the file, ``change`` its declarations and write it, as one step under the declarations' lock."""
        with declarations_lock(self.path.parent):
            raw = load_mapping(self.path) if self.path.is_file() else {}
            corpora = self._declared()
            change(corpora)
            raw["corpora"] = corpora
            self._replace(yaml.safe_dump(raw, sort_keys=True).encode())

    def _replace(self, content: bytes) -> None:
        """The file replaced whole (a full disk refuses it with ``DiskFull`` and leaves the old one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{REGISTRY_FILE}.{uuid.uuid4().hex}.tmp")
        try:
            with room_for(f"declaring corpora in {REGISTRY_FILE}"):
                with open(temporary, "wb") as handle:
                    handle.write(content)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temporary, self.path)
        finally:
            temporary.unlink(missing_ok=True)
        if self.remote is not None:
            self.remote.upload(self.path, REGISTRY_FILE)
