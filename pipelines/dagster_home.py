"""Where the lake's Dagster instance lives, and the ``dagster`` command that serves or switches it."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from graphlake.warehouse.home import project_root

DEFINITIONS_MODULE = "graphlake.pipelines.definitions"


def dagster_command() -> str:
    """The ``dagster`` command of this interpreter's environment."""
    return shutil.which("dagster", path=str(Path(sys.executable).parent)) or "dagster"


def dagster_home_of(home: Path) -> Path:
    """Where the lake's Dagster instance lives: ``$DAGSTER_HOME`` if set, else ``<lake>/dagster``."""
    return Path(os.environ.get("DAGSTER_HOME") or home / "dagster")


def prepare_dagster_home(home: Path) -> Path:
    """``dagster_home_of(home)``, made and seeded with the project's dagster.yaml."""
    dagster_home = dagster_home_of(home)
    dagster_home.mkdir(parents=True, exist_ok=True)
    settings = project_root() / "dagster.yaml"
    if settings.is_file() and not (dagster_home / "dagster.yaml").exists():
        shutil.copyfile(settings, dagster_home / "dagster.yaml")
    return dagster_home
