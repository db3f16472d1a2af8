"""Stage 5, the report: a metrics table and recall@k curves per method, stored in the lake and shown in the UI."""

import base64
import io
import json
from pathlib import Path

from dagster import AssetExecutionContext, AssetKey, MetadataValue, asset

from graphlake.retrieval.core import method_asset_names
from graphlake.retrieval.evaluation import CUTOFFS
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.storage import LakeStorage, StorageError

TABLE, PLOT, PLOTTED = "report.md", "recall_at_k.png", "recall_at_k.json"  # the table, the plot, and the values it draws
TABLE_METRICS = ("recall@2", "recall@5", "recall@10", "ndcg@10", "hit@10", "mrr")


def report_asset(home: Path):
    methods = load_methods(home)

    @asset(
        partitions_def=corpus_partitions,
        group_name="evaluation",
        deps=[AssetKey(method_asset_names(name)[1]) for name in methods],
        description="Markdown table and recall@k plot of every evaluated method, per split.",
    )
    def report(context: AssetExecutionContext, lake: LakeResource) -> None:
        corpus = context.partition_key
        results: dict[str, dict[str, dict[str, float]]] = {}  # split -> method -> metric -> value
        for name in methods:
            partition = {"corpus": corpus, "method": name}
            if not lake.storage.has("metrics", partition):
                continue
            for row in lake.storage.read("metrics", partition).to_pylist():
                metric = row["metric"] if row["k"] is None else f"{row['metric']}@{row['k']}"
                results.setdefault(row["split"], {}).setdefault(name, {})[metric] = row["value"]
        markdown, curves = render_markdown(corpus, results), json.dumps(plotted(results), sort_keys=True)
        folder = _current(lake.storage, corpus)
        if folder is not None and _read(folder / TABLE) == markdown and _read(folder / PLOTTED) == curves:
            png = (folder / PLOT).read_bytes()  # an edit that moved no metric: no new version, and no matplotlib (1 s)
        else:
            png = render_plot(corpus, results)

            def fill(folder: Path) -> None:
                (folder / TABLE).write_text(markdown, encoding="utf-8")
                (folder / PLOTTED).write_text(curves, encoding="utf-8")
                (folder / PLOT).write_bytes(png)

            folder = lake.storage.write_artifact("report", {"corpus": corpus}, fill)
        image = base64.b64encode(png).decode()
        context.add_output_metadata(
            {
                "report": MetadataValue.md(markdown + f"\n\n![recall@k](data:image/png;base64,{image})"),
                "path": MetadataValue.path(str(folder)),
                "methods": sum(len(by_method) for by_method in results.values()),
            }
        )

    return report


def _current(lake: LakeStorage, corpus: str) -> Path | None:
    try:
        return lake.artifact("report", {"corpus": corpus})
    except StorageError:
        return None


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def plotted(results: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, list[float | None]]]:
    """What the plot draws: per split and method, recall at each cutoff."""
    return {split: {name: [values.get(f"recall@{k}") for k in CUTOFFS] for name, values in by_method.items()} for split, by_method in results.items()}


def render_markdown(corpus: str, results: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [f"# Retrieval on `{corpus}`"]
    for split, by_method in sorted(results.items()):
        lines += ["", f"## split `{split}`", "", "| method | " + " | ".join(TABLE_METRICS) + " |", "|---|" + "---:|" * len(TABLE_METRICS)]
        for name, values in by_method.items():
            lines.append(f"| {name} | " + " | ".join(f"{values.get(m, float('nan')):.4f}" for m in TABLE_METRICS) + " |")
    if not results:
        lines += ["", "No method has been evaluated on this corpus yet (`graphlake eval`)."]
    return "\n".join(lines) + "\n"


def line_styles(names: list[str]) -> dict[str, dict]:
    """A distinct look per method: 60 colours, then the next line style (the project's methods fit the colours alone)."""
    from matplotlib import colormaps

    colours = colormaps["tab20"].colors + colormaps["tab20b"].colors + colormaps["tab20c"].colors
    dashes, markers = ("-", "--", ":", "-."), "osD^v<>p*h"
    return {name: {"color": colours[i % len(colours)], "linestyle": dashes[(i // len(colours)) % len(dashes)], "marker": markers[i % len(markers)]} for i, name in enumerate(names)}


def render_plot(corpus: str, results: dict[str, dict[str, dict[str, float]]]) -> bytes:
    from matplotlib.figure import Figure  # no pyplot: no global state, no display backend

    splits = sorted(results) or ["-"]
    styles = line_styles(list(dict.fromkeys(name for by_method in results.values() for name in by_method)))
    figure = Figure(figsize=(5 * len(splits) + 1.6, 4.5))
    axes = figure.subplots(1, len(splits), squeeze=False)
    for axis, split in zip(axes[0], splits, strict=True):
        for name, values in results.get(split, {}).items():
            axis.plot(CUTOFFS, [values.get(f"recall@{k}", float("nan")) for k in CUTOFFS], label=name, markersize=4, **styles[name])
        axis.set(xscale="log", xlabel="k", ylabel="recall@k", title=f"{corpus} / {split}", ylim=(0, 1.02))
        axis.set_xticks(CUTOFFS, [str(k) for k in CUTOFFS])
        axis.grid(alpha=0.3)
    handles = {label: handle for axis in axes[0] for handle, label in zip(*axis.get_legend_handles_labels(), strict=True)}
    if handles:  # one legend for every split's methods, beside the plots, never over the curves
        figure.legend(list(handles.values()), list(handles), loc="center right", fontsize=7, frameon=False)
    figure.tight_layout(rect=(0, 0, 1 - 1.5 / figure.get_figwidth(), 1))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()
