"""The method catalogue a person chooses from: the default methods switched on, every packaged variant
listed and switchable by name, pattern or catalogue, and a mistyped name answered with the closest
ones, in real ``graphlake`` processes on a fresh lake (nothing is built)."""

from __future__ import annotations

import yaml
from test_bad_input import cli, one_line_error

from graphlake.retrieval.methods import available_methods, catalogues, load_methods

DEFAULTS = ["bm25", "dense", "dense_hnsw", "splade", "rrf", "graph_rrf", "grapher_gcs", "ap_three", "grasp_fused", "graphlake_ltr"]


def listed(stdout: str) -> dict[str, bool]:
    """``graphlake methods`` as method -> switched on, from its one line a method."""
    found = {}
    for line in stdout.splitlines():
        mark, _, rest = line.partition(" ")
        if mark in ("*", "") and rest.strip() and line[:2] in ("* ", "  "):
            found[rest.split()[0]] = mark == "*"
    return found


def test_the_defaults_are_ten_and_every_variant_is_listed_and_switchable(tmp_path):
    packaged = {name for catalogue in catalogues().values() for name in catalogue}
    assert len(packaged) == 45 and list(load_methods(tmp_path)) == DEFAULTS
    assert "grapher_base" not in load_methods(tmp_path) and load_methods(tmp_path)["grapher_base"].op == "weighted_sum"  # an input, not run

    shown = cli(tmp_path, "methods", COLUMNS="80")
    assert shown.returncode == 0, shown.stderr
    lines = listed(shown.stdout)
    assert set(lines) == packaged and {name for name, on in lines.items() if on} == set(DEFAULTS), shown.stdout
    declared, _ = available_methods(tmp_path)  # piped, whatever the width: every description whole, on its method's line
    assert all(any((line.split()[:2] == ["*", name] or line.split()[:1] == [name]) and item.about in line for line in shown.stdout.splitlines()) for name, item in declared.items()), shown.stdout
    assert next(line for line in shown.stdout.splitlines() if " fastinsight " in line).endswith("[reranker]")
    assert shown.stdout.splitlines()[-1].startswith("The hybrid graph methods search ")  # which searcher ap_three loads here

    switched = cli(tmp_path, "methods", "--use", "grapher/*", "--use", "ap_*_kg", COLUMNS="80")
    assert switched.returncode == 0, switched.stderr
    on = {name for name, flag in listed(switched.stdout).items() if flag}
    assert on == set(DEFAULTS) | {"grapher_base", "grapher_ppr", "grapher_gat", "grapher_mlp", "ap_three_kg", "ap_dense_kg", "ap_sparse_kg", "ap_full_kg"}
    assert yaml.safe_load((tmp_path / "methods.yaml").read_text()) == {"use": ["grapher/*", "ap_*_kg"]}

    before = (tmp_path / "methods.yaml").read_text()
    one_line_error(cli(tmp_path, "methods", "--use", "grapher_gsc"), "'grapher_gsc'", "did you mean grapher_gcs")
    one_line_error(cli(tmp_path, "methods", "--use", "grapehr/*"), "catalogue 'grapehr'", "did you mean grapher")
    assert (tmp_path / "methods.yaml").read_text() == before  # a refused name changes nothing
    one_line_error(cli(tmp_path, "query", "--corpus", "demo", "--method", "grapher_gsc", "sled"), "unknown method 'grapher_gsc'", "did you mean grapher_gcs")
    one_line_error(cli(tmp_path, "query", "--corpus", "demo", "--method", "grasp_static", "sled"), "not switched on", "graphlake methods --use grasp_static")
    one_line_error(cli(tmp_path, "query", "--corpus", "dmeo", "--method", "bm25", "sled"), "corpus 'dmeo' is not declared", "did you mean demo")
    one_line_error(cli(tmp_path, "materialize", "--corpus", "demo", "--select", "key:nodez+"), "no asset 'nodez'; did you mean nodes?")

    (tmp_path / "methods.yaml").write_text("use: [grasp/nope*]\n")
    one_line_error(cli(tmp_path, "eval", "--corpus", "demo"), f"{tmp_path / 'methods.yaml'}:1: `use` names 'grasp/nope*'")


def test_switching_on_keeps_a_block_list_and_the_methods_after_it(tmp_path):
    from graphlake.retrieval.methods import switch_on

    (tmp_path / "methods.yaml").write_text("use:\n- bm25\n- dense\nmine: {op: rrf, inputs: [bm25, dense]}  # my fusion\n")
    assert switch_on(tmp_path, "graph_dense") == ["graph_dense"]
    assert yaml.safe_load((tmp_path / "methods.yaml").read_text()) == {"use": ["bm25", "dense", "graph_dense"], "mine": {"op": "rrf", "inputs": ["bm25", "dense"]}}
    assert (tmp_path / "methods.yaml").read_text().endswith("  # my fusion\n")
    assert switch_on(tmp_path, "grasp_static") == ["grasp_static"]  # and the flow list it became
    assert yaml.safe_load((tmp_path / "methods.yaml").read_text())["use"] == ["bm25", "dense", "graph_dense", "grasp_static"]
