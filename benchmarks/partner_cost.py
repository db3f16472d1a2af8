"""What graphlake_ltr's partner signals cost a search: graphlake_ltr against ``ltr_without_partners`` (the
same declaration with ``partners: []``, as ``benchmarks/learned_fusion.py`` declares it), side by side on
the same queries in one process, warm, through the Python API.

- single: each of ``--queries`` evaluated-split queries searched alone (k 10): p50, p95, QPS;
- batch: one ``search_batch`` of those queries, wall and CPU seconds, against the same one by one.

Both methods alternate query by query, which goes first alternating too (the second finds the query's
encodings made), so load on the machine and the encoders' cache fall on both alike. Run it on lakes that
``benchmarks/learned_fusion.py`` built (one per set or one for several)::

    GRAPHLAKE_HOME=LAKE .venv/bin/python benchmarks/partner_cost.py --sets hotpotqa:dev [--queries 100]

Appends each set's rows to ``benchmarks/results/partner_cost.md``'s table (a set measured again replaces its rows).
"""

from __future__ import annotations

import re
import time

import numpy as np

from common import arguments, header, table

METHODS = ("graphlake_ltr", "ltr_without_partners")
COLUMNS = ["set", "method", "ranker keeps partner signals", "queries", "p50 ms", "p95 ms", "QPS single", "batch s (CPU s)", "batch / singles"]


def measure(corpus: str, split: str, count: int) -> list[str]:
    from graphlake.api.lake import GraphLake
    from graphlake.retrieval.methods import load_methods
    from graphlake.retrieval.models.learned_fusion import LearnedRankers
    from graphlake.warehouse.home import lake_home
    from graphlake.warehouse.storage import LakeStorage

    lake, storage = GraphLake(lake_home()), LakeStorage(lake_home())
    texts = [q["text"] for q in storage.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split]
    texts = [texts[i] for i in np.random.default_rng(0).choice(len(texts), min(count, len(texts)), replace=False)]
    rankers, methods = LearnedRankers.load(storage.artifact("learned_fusion", {"corpus": corpus})), load_methods(lake_home())
    for method in METHODS:
        lake.search(corpus, method, texts[0])  # loads the indexes and the model
    single: dict[str, list[float]] = {m: [] for m in METHODS}
    for n, text in enumerate(texts):
        for method in METHODS if n % 2 else METHODS[::-1]:  # whichever goes second finds the query's encodings made
            started = time.perf_counter()
            lake.search(corpus, method, text)
            single[method].append(time.perf_counter() - started)
    rows = []
    for method in METHODS:
        wall, cpu = time.perf_counter(), time.process_time()
        lake.search_batch(corpus, method, texts)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        ms = np.array(single[method]) * 1000
        ranker = rankers.ranker(methods[method])
        rows.append(
            f"| {corpus} | {method} | {'yes' if ranker is not None and ranker.partners else 'no'} | {len(texts)} | {np.median(ms):.1f} | {np.percentile(ms, 95):.1f} "
            f"| {len(texts) / (ms.sum() / 1000):.1f} | {wall:.2f} ({cpu:.2f}) | {wall / (ms.sum() / 1000):.2f} |"
        )
    return rows


def main() -> None:
    def options(parser) -> None:
        parser.add_argument("--sets", required=True, help="corpus:split, comma-separated")
        parser.add_argument("--queries", type=int, default=100)

    args = arguments(__doc__, "partner_cost.md", options)
    measured = [row for item in args.sets.split(",") for row in measure(*item.split(":"), args.queries)]
    output = args.output
    kept = [line for line in output.read_text(encoding="utf-8").splitlines() if re.match(r"\| [^|]+ \| (graphlake_ltr|ltr_without_partners) \|", line)] if output.exists() else []
    again = {row.split("|")[1] for row in measured}
    rows = [line for line in kept if line.split("|")[1] not in again] + measured
    lines = header("graphlake_ltr's partner signals: what they cost a search", ".venv/bin/python benchmarks/partner_cost.py --sets SETS --queries N")
    lines += ["- single: one `GraphLake.search` at a time, warm, the two methods alternating query by query; batch: one `search_batch` of the same queries", ""]
    lines += table("graphlake_ltr with and without its partner signals", COLUMNS) + rows
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(output.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
