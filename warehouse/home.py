"""Where the lake lives: ``$GRAPHLAKE_HOME``, else ``lake/`` in the project folder.

``GRAPHLAKE_HOME=s3://bucket/prefix`` keeps the lake on S3-compatible object storage: its home is
then a local cache of it (``$GRAPHLAKE_CACHE``, else ``~/.cache/graphlake/<bucket>/<prefix>``), which
names its remote in ``remote.json`` (``warehouse/object_store.py``)."""

from __future__ import annotations

import os
from pathlib import Path

from graphlake.common.settings import HOME

ENV_VAR = HOME.name


class HomeError(ValueError):
    """The lake's folder cannot be used as asked: it cannot be made, or it cannot be written where writing is needed."""


def project_root() -> Path:
    """The source checkout when running from one (editable install), else the working folder."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


def lake_home() -> Path:
    return home_of(HOME.text() or "")


def home_of(location: str | Path) -> Path:
    """The lake at ``location`` (a folder, ``s3://bucket/prefix``, or '' for the project's ``lake/``), as a local folder."""
    configured = str(location)
    if configured.startswith("s3://"):
        from graphlake.warehouse.object_store import cache_for

        return cache_for(configured)
    home = Path(configured).expanduser() if configured else project_root() / "lake"
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise HomeError(f"{ENV_VAR}={configured or str(home)!r}: cannot make the lake's folder {home}: {error.strerror}") from None
    if not home.is_dir():
        raise HomeError(f"{ENV_VAR}={configured or str(home)!r}: {home} is not a folder")
    return home.resolve()


def require_writable(home: Path, doing: str) -> None:
    """Refuse ``doing`` at once on a lake this process cannot write (a read-only mount, another
    user's folder): reading it needs no write, building does."""
    if not os.access(home, os.W_OK):
        raise HomeError(
            f"the lake at {home} cannot be written by this process (read-only, or not its folder): {doing} writes to it; reading it (sql, query, eval of what is built, the API) needs no write"
        )
