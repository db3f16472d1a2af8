"""The report's recall@k plot: a look of its own for every declared method."""

from __future__ import annotations

from graphlake.assets.report import line_styles, render_plot
from graphlake.retrieval.methods import load_methods


def test_every_declared_method_gets_its_own_colour_and_line():
    names = [*load_methods(), *(f"extra_{i}" for i in range(30))]  # more methods than colours
    styles = line_styles(names)
    looks = {(style["color"], style["linestyle"]) for style in styles.values()}
    assert len(looks) == len(names)
    declared = [style["color"] for name, style in styles.items() if not name.startswith("extra_")]
    assert len(set(declared)) == len(declared)  # the project's methods differ by colour alone


def test_the_plot_renders_every_split_with_one_legend():
    results = {split: {name: {f"recall@{k}": k / 100 for k in (1, 2, 5, 10, 20, 100)} for name in load_methods()} for split in ("dev", "test")}
    png = render_plot("demo", results)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
