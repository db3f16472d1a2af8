"""What a learned index stores when there was nothing to learn from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

UNTRAINED_FILE = "untrained.json"


@dataclass(frozen=True)
class Untrained:
    """A learned index its asset had no training queries for (a user's own corpus, a lake without
    any): stored in its place, so the methods that read it fall back to a documented default and say
    why, and the asset is not retried on every query."""

    reason: str

    def save(self, folder: Path) -> None:
        (folder / UNTRAINED_FILE).write_text(json.dumps({"reason": self.reason}), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> Untrained | None:
        """The marker in ``folder``, None when the folder holds a trained index."""
        path = folder / UNTRAINED_FILE
        return cls(json.loads(path.read_text(encoding="utf-8"))["reason"]) if path.is_file() else None
