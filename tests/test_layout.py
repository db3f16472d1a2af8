"""The layout holds: imports run one way (import-linter's contracts in pyproject.toml) and in no circle,
every asset dependency names a defined asset, every index an operator reads is declared, and a wheel
carries every module and every data file the code opens by path."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from dagster import AssetKey, Definitions, asset

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "assets", "cli", "common", "kernels", "pipelines", "retrieval", "warehouse")  # folders that are graphlake.<name>


def tracked(*folders: str) -> list[str]:
    return subprocess.run(["git", "ls-files", *folders], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()


def test_the_import_contracts_hold(tmp_path):
    """lint-imports over a copy of the sources laid out as the installed package (the editable install
    maps its folders through a path hook, which import-linter cannot walk)."""
    package = tmp_path / "graphlake"
    for name in tracked(*PACKAGES):
        if name.endswith(".py"):
            (package / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, package / name)
    (package / "__init__.py").touch()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 6 kept, 0 broken." in done.stdout
    cycle = subprocess.run([sys.executable, "-c", CYCLE_CHECK], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True)
    assert cycle.returncode == 0 and cycle.stdout == "no module cycle\nno package cycle\n", cycle.stdout + cycle.stderr


# every module's imports, those under ``if TYPE_CHECKING:`` too (a circle a type checker walks is still
# one a reader walks), sorted topologically, then the same between packages (a module's package is
# itself where it is one, else its parent; a package importing its own ancestor or descendant is no
# circle): graphlib names a cycle where there is one
CYCLE_CHECK = """
import graphlib, grimp
graph = grimp.build_graph("graphlake", exclude_type_checking_imports=False, cache_dir=None)
imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
package = lambda m: m if graph.find_children(m) else m.rpartition(".")[0]
related = lambda a, b: a == b or a.startswith(b + ".") or b.startswith(a + ".")
packages = {}
for m, found in imports.items():
    packages.setdefault(package(m), set()).update(package(d) for d in found if not related(package(m), package(d)))
for name, edges in (("module", imports), ("package", packages)):
    try:
        graphlib.TopologicalSorter(edges).prepare()
        print(f"no {name} cycle")
    except graphlib.CycleError as error:
        print(f"{name} cycle:", " -> ".join(error.args[1]))
"""


def unresolved(definitions: Definitions) -> set[tuple[str, str]]:
    """(asset, dependency) pairs whose dependency no asset of the Definitions produces: a misspelt
    ``deps=AssetKey(...)`` that Dagster would silently take for an external asset."""
    produced = {key for definition in definitions.assets for key in definition.keys}
    return {
        (key.to_user_string(), dependency.to_user_string()) for definition in definitions.assets for key in definition.keys for dependency in definition.asset_deps[key] if dependency not in produced
    }


def test_every_asset_dependency_is_a_defined_asset(tmp_path, monkeypatch):
    from graphlake.pipelines.definitions import build_definitions
    from graphlake.retrieval.learned_kinds import INDEX_KINDS

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    definitions = build_definitions(tmp_path / "lake")
    assert unresolved(definitions) == set()
    defined = {key.to_user_string() for definition in definitions.assets for key in definition.keys}
    assert {asset for kind in INDEX_KINDS.values() for asset in kind.assets} <= defined  # what each declared kind names

    @asset(deps=[AssetKey("nodse")])
    def misspelt() -> None: ...

    assert unresolved(Definitions(assets=[misspelt])) == {("misspelt", "nodse")}  # the check can fail


def test_every_index_an_operator_reads_is_declared():
    from graphlake.retrieval.core import OPERATORS
    from graphlake.retrieval.learned_kinds import INDEX_KINDS
    from graphlake.retrieval.methods import load_methods  # noqa: F401  (registers the operators)

    read = {name.partition("/")[0] for cls in OPERATORS.values() for name in cls.INDEXES}
    assert read and read <= set(INDEX_KINDS)
    for kind in INDEX_KINDS.values():
        assert kind.assets, kind.name
        assert (kind.fitting is None) == (kind.name not in {"graph_rankers", "reranker", "hybrid_weights", "grasp_fusion", "grasp_reranker", "learned_fusion"})
    assert INDEX_KINDS.index_assets({"bm25", "reranker"}) == ["bm25_index", "reranker"]


def test_a_wheel_holds_every_module_and_data_file(tmp_path):
    source = tmp_path / "source"  # a copy of what git tracks: the build leaves nothing in the checkout
    for name in tracked():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("graphlake-*.whl")
    held = set(zipfile.ZipFile(wheel).namelist())
    wanted = {f"graphlake/{name}" for name in tracked(*PACKAGES)}  # modules, methods.yaml, the demo corpus
    assert {name for name in wanted if not name.endswith(".py")} >= {"graphlake/retrieval/methods.yaml", "graphlake/warehouse/demo/corpus.jsonl"}
    assert wanted - held == set()


def test_the_serving_core_keeps_its_seams():
    """No class of ``retrieval/`` has more than 15 public methods; no open cache (``.memo(``) is left;
    ``GraphLake`` keeps no serving state of its own: its searcher manager (``api/searchers.py``) does."""
    import ast

    crowded = {}
    for name in tracked("retrieval"):
        if name.endswith(".py"):
            for node in ast.walk(ast.parse((ROOT / name).read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    public = [f.name for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and not f.name.startswith("_")]
                    if len(public) > 15:
                        crowded[f"{name}:{node.name}"] = len(public)
    assert crowded == {}
    sources = [name for name in tracked(*PACKAGES) if name.endswith(".py")]
    assert [name for name in sources if ".memo(" in (ROOT / name).read_text(encoding="utf-8") or "CorpusIndexes" in (ROOT / name).read_text(encoding="utf-8")] == []
    lake = next(node for node in ast.walk(ast.parse((ROOT / "api/lake.py").read_text(encoding="utf-8"))) if isinstance(node, ast.ClassDef) and node.name == "GraphLake")
    init = next(f for f in lake.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    assigned = {target.attr for stmt in ast.walk(init) if isinstance(stmt, ast.Assign) for target in stmt.targets if isinstance(target, ast.Attribute)}
    assert assigned == {"home", "searchers", "_worker"}, assigned  # the lake's folder, its searcher manager, the thread awaited searches run in


def test_no_function_is_longer_than_80_lines():
    """A function a reader takes in at once: none of the package's over 80 lines (a kernel's too: its
    stages are device functions of their own)."""
    import ast

    long = {}
    for name in (n for n in tracked(*PACKAGES) if n.endswith(".py")):
        for node in ast.walk(ast.parse((ROOT / name).read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80:
                long[f"{name}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    assert long == {}
