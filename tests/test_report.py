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


def test_a_report_whose_numbers_did_not_move_is_not_drawn_again(demo_copy):
    """A rebuild that moved no metric (an edit far from every query) keeps the report's version and
    skips matplotlib; one whose drawn values are unknown (a report of an older lake) draws anew."""
    import io

    from rich.console import Console

    from graphlake.pipelines.runner import materialize_corpus
    from graphlake.warehouse.storage import LakeStorage

    def current():
        return LakeStorage(demo_copy).artifact("report", {"corpus": "demo"})

    built = current()
    materialize_corpus(demo_copy, "demo", "report", Console(file=io.StringIO()))
    assert current() == built
    (built / "recall_at_k.json").unlink()
    materialize_corpus(demo_copy, "demo", "report", Console(file=io.StringIO()))
    drawn = current()
    assert drawn != built and (drawn / "recall_at_k.png").read_bytes().startswith(b"\x89PNG")
    assert (drawn / "report.md").read_text(encoding="utf-8") == (built / "report.md").read_text(encoding="utf-8")
