"""Shared fixtures: where the staged benchmark data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def datasets_dir() -> Path:
    """``$GRAPHLAKE_DATASETS`` or ``../shared/datasets``; tests that need real data skip when it is absent."""
    path = Path(os.environ.get("GRAPHLAKE_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    if not path.is_dir():
        pytest.skip(f"benchmark datasets not found at {path} (set GRAPHLAKE_DATASETS)")
    return path


@pytest.fixture
def lake(tmp_path, monkeypatch) -> Path:
    """A fresh lake (and Dagster home inside it) that the CLI and Definitions will use."""
    home = tmp_path / "lake"
    monkeypatch.setenv("GRAPHLAKE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    return home
