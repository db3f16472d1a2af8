"""Where the lake lives: ``$GRAPHLAKE_HOME``, else ``lake/`` in the project folder."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "GRAPHLAKE_HOME"


def project_root() -> Path:
    """The source checkout when running from one (editable install), else the working folder."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


def lake_home() -> Path:
    configured = os.environ.get(ENV_VAR)
    home = Path(configured).expanduser() if configured else project_root() / "lake"
    home.mkdir(parents=True, exist_ok=True)
    return home.resolve()
