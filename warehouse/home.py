"""Where the lake lives: ``$GRAPHLAKE_HOME``, else ``lake/`` in the project folder.

``GRAPHLAKE_HOME=s3://bucket/prefix`` keeps the lake on S3-compatible object storage: its home is
then a local cache of it (``$GRAPHLAKE_CACHE``, else ``~/.cache/graphlake/<bucket>/<prefix>``), which
names its remote in ``remote.json`` (``warehouse/object_store.py``)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "GRAPHLAKE_HOME"


def project_root() -> Path:
    """The source checkout when running from one (editable install), else the working folder."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


def lake_home() -> Path:
    return home_of(os.environ.get(ENV_VAR, ""))


def home_of(location: str | Path) -> Path:
    """The lake at ``location`` (a folder, ``s3://bucket/prefix``, or '' for the project's ``lake/``), as a local folder."""
    configured = str(location)
    if configured.startswith("s3://"):
        from graphlake.warehouse.object_store import cache_for

        return cache_for(configured)
    home = Path(configured).expanduser() if configured else project_root() / "lake"
    home.mkdir(parents=True, exist_ok=True)
    return home.resolve()
