"""What a deterministic step said about a text (spaCy's NER and parse of a node, the chunks of a
document), kept by the text's hash, so that a rebuild runs it only on new or changed texts, as the
encoders do.

Layout: ``<lake>/node_cache/<name>/<version>.parquet`` with ``content_hash`` and ``value`` (JSON
text). The version names the model and its options, so an upgraded model starts a cache of its own. A cache only
saves work: an entry is read back only for the same text under the same model, a lost or damaged
file costs a re-run, never a wrong row. Files are replaced atomically; two runs storing at once
lose at most the other's new entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

FOLDER = "node_cache"


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class NodeCache:
    def __init__(self, home: Path, name: str, version: str) -> None:
        self.path = Path(home) / FOLDER / name / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', version)}.parquet"

    def _load(self) -> dict[str, str]:
        try:
            table = pq.read_table(self.path)
        except (OSError, pa.ArrowInvalid):  # absent or damaged: nothing saved
            return {}
        return dict(zip(table.column("content_hash").to_pylist(), table.column("value").to_pylist()))

    def lookup(self, texts: Sequence[str]) -> tuple[list[str], dict[int, Any]]:
        """The texts' hashes, and the stored value of each text the cache has, by position."""
        hashes = [text_hash(text) for text in texts]
        stored = self._load()
        return hashes, {i: json.loads(stored[h]) for i, h in enumerate(hashes) if h in stored}

    def store(self, values: dict[str, Any]) -> None:
        """Add ``{content_hash: value}`` to the cache (values JSON-serialisable)."""
        if not values:
            return
        merged = self._load() | {h: json.dumps(value, ensure_ascii=False) for h, value in values.items()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        pq.write_table(pa.table({"content_hash": list(merged), "value": list(merged.values())}), temporary)
        os.replace(temporary, self.path)

    def apply(self, texts: Sequence[str], compute: Callable[[list[str]], list], dump: Callable[[Any], Any], load: Callable[[Any], Any]) -> tuple[list, int]:
        """``compute`` over the texts the cache lacks (only those, in order), the rest read back: every
        text's result and how many were computed. ``dump``/``load`` turn a result into JSON-ready data and back."""
        hashes, known = self.lookup(texts)
        missing = [i for i in range(len(texts)) if i not in known]
        computed = dict(zip(missing, compute([texts[i] for i in missing]), strict=True))
        self.store({hashes[i]: dump(result) for i, result in computed.items()})
        return [computed[i] if i in computed else load(known[i]) for i in range(len(texts))], len(missing)
