"""Configuration in one place (``common/settings.py``): no other module names a ``GRAPHLAKE_`` variable
or reads one from the environment, every declared variable is documented in ``docs/configuration.md``
(and every one the docs name is declared), and ``graphlake config`` shows each value with where it
came from, a key only as set."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.common import settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "assets", "cli", "common", "kernels", "pipelines", "retrieval", "warehouse")
SETTINGS = ROOT / "common" / "settings.py"
NAME = re.compile(r"GRAPHLAKE_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_])")  # a prefix (GRAPHLAKE_LLM_*) names no variable


def _environment_reads(tree: ast.AST) -> list[ast.expr]:
    """The keys of ``os.environ.get(...)``, ``os.getenv(...)``, ``os.environ[...]`` (read) and ``... in os.environ``."""
    keys = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in ("os.environ.get", "os.getenv", "environ.get"):
            keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and ast.unparse(node.value) in ("os.environ", "environ"):
            keys.append(node.slice)
        elif isinstance(node, ast.Compare) and any(ast.unparse(c) in ("os.environ", "environ") for c in node.comparators):
            keys.append(node.left)
    return keys


def test_only_the_settings_module_names_or_reads_a_graphlake_variable():
    declared = {variable.name for variable in settings.VARIABLES}
    offenders = []
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        if path == SETTINGS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} names {node.value}")
        for key in _environment_reads(tree):
            text = ast.unparse(key)
            if NAME.search(text) or text.endswith(".name") or text.endswith("_ENV") or text in ("ENV", "ENV_VAR"):
                offenders.append(f"{path.relative_to(ROOT)}:{key.lineno} reads {text} from the environment")
    assert offenders == [], "\n".join(offenders)
    assert len(declared) == len(settings.VARIABLES)  # no name declared twice


def test_every_declared_variable_is_documented_and_every_documented_one_declared():
    declared = {variable.name for variable in settings.VARIABLES}
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert declared - set(NAME.findall(page)) == set()
    named = set()
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        named |= set(NAME.findall(doc.read_text(encoding="utf-8")))
    assert named - declared == set()
    for variable in settings.VARIABLES:
        assert variable.help.strip() and variable.kind in (str, int, float)


def test_config_shows_each_value_with_its_source_and_a_key_only_as_set(tmp_path, monkeypatch):
    monkeypatch.setenv(settings.HOME.name, str(tmp_path / "lake"))
    monkeypatch.setenv(settings.LOCK_WAIT.name, "5")
    monkeypatch.setenv(settings.API_KEY.name, "s3cret-key-value")
    monkeypatch.delenv(settings.SQL_TIMEOUT.name, raising=False)
    done = CliRunner().invoke(app, ["config", "--json"])
    assert done.exit_code == 0, done.output
    found = json.loads(done.stdout)
    variables = {v["name"]: v for v in found["variables"]}
    assert variables[settings.LOCK_WAIT.name] == {"name": settings.LOCK_WAIT.name, "value": "5", "source": "environment"}
    assert variables[settings.SQL_TIMEOUT.name]["source"] == "default" and variables[settings.SQL_TIMEOUT.name]["value"] == "60.0"
    assert variables[settings.API_KEY.name]["value"] == "(set)" and "s3cret" not in done.stdout
    files = {f["name"]: f for f in found["files"]}
    assert files["corpora.yaml"]["source"] == "absent" and files["methods.yaml"]["source"] == "packaged"
    monkeypatch.setenv(settings.LOCK_WAIT.name, "soon")
    done = CliRunner().invoke(app, ["config"])
    assert done.exit_code == 1 and f"{settings.LOCK_WAIT.name}='soon' is not a number" in done.output


@pytest.mark.fast
def test_the_device_is_configuration_resolved_once_and_checked(monkeypatch, tmp_path):
    """``GRAPHLAKE_DEVICE``: a wrong value is refused naming the variable; ``cpu`` never probes; ``cuda``
    where numba sees no device is an error saying what to set (this machine has none: CI's neither)."""
    from graphlake.kernels.hybrid.cuda_probe import cuda_possible
    from graphlake.retrieval.index.config import DeviceError, IndexConfig

    monkeypatch.setenv("GRAPHLAKE_MODEL_CACHE", str(tmp_path))
    monkeypatch.setenv("GRAPHLAKE_DEVICE", "gpu")
    with pytest.raises(ValueError, match="GRAPHLAKE_DEVICE='gpu': write one of auto, cpu, cuda"):
        IndexConfig.resolve()
    monkeypatch.setenv("GRAPHLAKE_DEVICE", "CPU")
    assert IndexConfig.resolve() == IndexConfig(tmp_path, "cpu", "cpu")
    if cuda_possible(settings.cuda_simulated()):
        pytest.skip("a CUDA device may be here: the no-device answers are this machine's to check")
    monkeypatch.setenv("GRAPHLAKE_DEVICE", "auto")
    assert IndexConfig.resolve() == IndexConfig(tmp_path, "cpu", "auto", "no CUDA device here")
    monkeypatch.setenv("GRAPHLAKE_DEVICE", "cuda")
    with pytest.raises(DeviceError, match="GRAPHLAKE_DEVICE=cuda, but numba sees no CUDA device here; set it to auto or cpu"):
        IndexConfig.resolve()
