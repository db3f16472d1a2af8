"""graphlake_ltr, the learned composition of the five papers' signals, against every paper's best declared
method on five held-out sets, with paired 95 % bootstrap intervals; its signal-family ablation; and the
latency it adds over its first stages.

Sets and training pairings: SciFact test (trained on its train split), HotpotQA dev (on HippoRAG's
100-question HotpotQA train set), 2Wiki dev (on 2Wiki train), Spider dev (on BIRD), BIRD dev (on Spider). Primary metrics:
nDCG@10, R@5, R@5, PR@10, PR@10. The compared methods are each paper's declared methods that need no
cross-encoder (FastInsight's and GRASP's Stage 3 train one for up to 45 minutes per set on a CPU: not run
here). Every learned part, graphlake_ltr's ranker included, learns from the training queries only.
``--dense`` makes a declared dense model (``graphlake models``) the lake's, in its models.yaml, before
anything is built (``benchmarks/second_encoder.py`` compares two such lakes). ``--cross-validate`` adds, for the sets it names, what graphlake_ltr reaches where it learns in-domain
(5-fold on the evaluated queries): how much of a gap the training pairing explains.

    .venv/bin/python benchmarks/learned_fusion.py [--sets scifact,spider] [--ablate scifact] [--cross-validate hotpotqa] [--latency-queries 100] [--dense MODEL]

with GRAPHLAKE_HOME a lake of its own (corpora are ingested where absent and built by ``graphlake eval``).
Each set's rows are kept in ``learned_fusion.json`` beside the output, and the markdown shows every set
measured so far, so sets can be run one at a time or in separate lakes side by side.
"""

from __future__ import annotations

import json
import time

import numpy as np
import yaml

from common import HOTPOT, HOTPOT_TRAIN, WIKI_DEV, WIKI_TRAIN, arguments, graphlake, header, table
from graphlake.kernels.eval.metrics import paired_bootstrap
from graphlake.retrieval.index.index_set import new_request
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage

CORPORA = {  # corpus: format, path under the datasets folder, evaluated split (None: trains others), train_corpus
    "scifact": ("beir", "scifact", "test", None),
    "2wiki-train": ("2wiki", WIKI_TRAIN, None, None),
    "hotpotqa-train": ("hipporag", HOTPOT_TRAIN, None, None),
    "hotpotqa": ("hotpotqa-ircot", HOTPOT, "dev", "hotpotqa-train"),
    "2wiki-dev": ("2wiki", WIKI_DEV, "dev", "2wiki-train"),
    "spider": ("spider", "spider", "dev", "bird"),
    "bird": ("bird", "bird", "dev", "spider"),
}
PRIMARY = {"scifact": "ndcg@10", "hotpotqa": "recall@5", "2wiki-dev": "recall@5", "spider": "pr@10", "bird": "pr@10"}
PAPERS = {  # the declared methods compared, by paper
    "Baselines": ("bm25", "dense", "splade", "rrf"),
    "SPRIG": ("graph_rrf", "graph_hybrid"),
    "GraphER": ("grapher_ppr", "grapher_gcs"),
    "Allan-Poe": ("ap_three", "ap_three_tuned"),
    "GRASP": ("grasp_graph", "grasp_fused", "grasp_static", "grasp_dynamic"),
}
LTR = "graphlake_ltr"
SOLO = "ltr_without_partners"  # graphlake_ltr without its partner signals: the same learning, each candidate scored alone
BEFORE = "93c8744"  # the revision whose graphlake_ltr the "before" column gives (issue 89's start)
DEPTHS = (5, 10, 20, 50, 100)  # the headroom table's cut-offs
FAMILIES = {  # the ablation: graphlake_ltr without each family's inputs
    "first stages": ("bm25", "dense", "splade"),
    "Allan-Poe": ("ap_three",),
    "SPRIG": ("graph_rrf",),
    "GraphER": ("grapher_gcs",),
    "GRASP": ("grasp_graph", "grasp_fused"),
}


def ablations(inputs: list[str]) -> dict[str, dict]:
    """graphlake_ltr's declaration without each family, as the lake's methods.yaml declares them; and
    without its partner signals."""
    return {SOLO: {"op": "learned_fusion", "inputs": inputs, "depth": 100, "k": 100, "partners": []}} | {
        f"ltr_without_{family.lower().replace(' ', '_').replace('-', '_')}": {"op": "learned_fusion", "inputs": [i for i in inputs if i not in dropped], "depth": 100, "k": 100}
        for family, dropped in FAMILIES.items()
    }


def per_query(lake: LakeStorage, corpus: str, method: str, split: str, metric: str) -> dict[str, float]:
    name, _, k = metric.partition("@")
    rows = lake.read("query_metrics", {"corpus": corpus, "method": method}).to_pylist()
    return {r["query_id"]: r["value"] for r in rows if r["split"] == split and r["metric"] == name and (r["k"] or 0) == (int(k) if k else 0)}


def difference(lake: LakeStorage, corpus: str, split: str, metric: str, method: str, baseline: str) -> tuple[float, float, float]:
    mine, theirs = per_query(lake, corpus, method, split, metric), per_query(lake, corpus, baseline, split, metric)
    shared = sorted(set(mine) & set(theirs))
    found = paired_bootstrap([theirs[q] for q in shared], [mine[q] for q in shared])  # method minus baseline
    return found["difference"], found["low"], found["high"]


def headroom(lake: LakeStorage, corpus: str, split: str, methods: list[str], inputs: list[str]) -> list[str]:
    """Rows of recall at each of :data:`DEPTHS` for ``methods`` and for the union of the ``inputs``' top 100
    (with its mean size): whether a set's gap is in ranking (found, ranked low) or in finding."""
    gold: dict[str, set[str]] = {}
    for row in lake.read("qrels", {"corpus": corpus}).to_pylist():
        if row["split"] == split and row["relevance"] > 0:
            gold.setdefault(row["query_id"], set()).add(row["doc_id"])
    ranked = {m: {} for m in [*methods, *inputs]}
    for method, runs in ranked.items():
        for row in lake.read("runs", {"corpus": corpus, "method": method}).select(["query_id", "rank", "doc_id"]).to_pylist():
            runs.setdefault(row["query_id"], []).append((row["rank"], row["doc_id"]))
    order = {m: {q: [d for _, d in sorted(found)] for q, found in runs.items()} for m, runs in ranked.items()}
    recall = lambda found, q: len(gold[q] & set(found)) / len(gold[q])  # noqa: E731
    rows = [f"| {corpus} | {m} | " + " | ".join(f"{np.mean([recall(order[m].get(q, [])[:k], q) for q in gold]):.3f}" for k in DEPTHS) + " | |" for m in methods]
    union = {q: {d for m in inputs for d in order[m].get(q, [])[:100]} for q in gold}
    size = np.mean([len(found) for found in union.values()])
    return [*rows, f"| {corpus} | union of the inputs' top 100 | | | | | {np.mean([recall(union[q], q) for q in gold]):.3f} | {size:.0f} |"]


def latency(corpus: str, split: str, count: int) -> dict:
    """Milliseconds graphlake_ltr adds over its inputs (features, partner signals and the model) per query,
    one at a time: the operator run again on a request that holds its inputs' candidates already. The
    query's dense encoding and its entities (spaCy) are its inputs' time: the partner signals reuse them."""
    from graphlake.retrieval.core import run_inputs_batch
    from graphlake.retrieval.learned_kinds import open_index_set
    from graphlake.retrieval.methods import load_methods
    from graphlake.retrieval.models.learned_fusion import candidate_rows

    lake, op = LakeStorage(lake_home()), load_methods(lake_home())[LTR]
    indexes = open_index_set(lake, corpus)
    texts = [q["text"] for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split]
    texts = [texts[i] for i in np.random.default_rng(0).choice(len(texts), min(count, len(texts)), replace=False)]
    op.run_batch(new_request(indexes, texts[:1]), indexes)  # loads the model and the indexes
    added, first, sizes = [], [], []
    for text in texts:
        started = time.perf_counter()
        request = new_request(indexes, [text])
        (found,) = run_inputs_batch(op, request, indexes)
        inputs_done = time.perf_counter()
        op.run_batch(request, indexes)
        added.append((time.perf_counter() - inputs_done) * 1000)
        first.append((inputs_done - started) * 1000)
        sizes.append(len(candidate_rows(found, op.depth)))
    return {"queries": len(texts), "p50": float(np.median(added)), "p95": float(np.percentile(added, 95)), "inputs_p50": float(np.median(first)), "candidates": float(np.mean(sizes))}


def cross_validated(lake: LakeStorage, corpus: str, split: str, metric: str, folds: int = 5) -> float:
    """graphlake_ltr's primary metric where it learns in-domain: the evaluated queries in ``folds`` seeded
    folds, each ranked by a ranker trained (with every feature, as on a corpus's own train split) on the
    other folds only. Not the acceptance protocol, which never trains on an evaluated query: an estimate of
    what the training pairing costs."""
    from graphlake.assets.retrieval.learned_fusion import LearnedFusionConfig
    from graphlake.kernels.eval.metrics import evaluate, mean
    from graphlake.retrieval.learned_kinds import open_index_set
    from graphlake.retrieval.methods import load_methods
    from graphlake.retrieval.queries import gold_by_query
    from graphlake.retrieval.training.learned_fusion import declared_partners, fit, input_runs, partner_runs, ranked_docs

    op = load_methods(lake.home)[LTR]
    gold = gold_by_query(lake.read("qrels", {"corpus": corpus}))
    queries = [q for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split and q["query_id"] in gold]
    indexes = open_index_set(lake, corpus)
    runs, failed = input_runs([op], [q["text"] for q in queries], indexes)
    if failed:
        raise SystemExit(f"{corpus}: graphlake_ltr's inputs cannot run: {failed}")
    found = [[runs[id(item)][i] for item in op.inputs] for i in range(len(queries))]
    partners = declared_partners(partner_runs([q["text"] for q in queries], indexes, op.partners), op)
    doc_ids, rankings = indexes.snapshot.doc_ids(), {}
    for fold in np.array_split(np.random.default_rng(0).permutation(len(queries)), folds):
        held = set(fold.tolist())
        learning = [i for i in range(len(queries)) if i not in held]
        ranker, _ = fit(op, [queries[i] for i in learning], [found[i] for i in learning], [partners[i] for i in learning], gold, doc_ids, LearnedFusionConfig(), across_corpora=False)
        for i in fold.tolist():
            rankings[queries[i]["query_id"]] = ranked_docs(ranker, queries[i]["text"], found[i], partners[i], op.depth, doc_ids)
    return mean(evaluate(rankings, {q["query_id"]: gold[q["query_id"]] for q in queries}, [metric]), metric)


def measure(lake: LakeStorage, corpus: str, compared: list[str], inputs: list[str], latency_queries: int, ablate: bool, cross_validate: bool) -> dict:
    """One set: every compared method's primary metric, graphlake_ltr's paired differences, the ablation,
    the latency it adds, its ranker's report and (``cross_validate``) its in-domain estimate, as the rows
    of the results file."""
    from graphlake.retrieval.methods import load_methods
    from graphlake.retrieval.models.learned_fusion import LearnedRankers, key

    split, metric = CORPORA[corpus][2], PRIMARY[corpus]
    ablated = list(ablations(inputs)) if ablate else [SOLO]
    started = time.perf_counter()
    report = json.loads(graphlake("eval", "--corpus", corpus, "--methods", ",".join([*compared, LTR, *ablated]), "--split", split, "--json"))
    print(f"{corpus}: evaluated in {time.perf_counter() - started:.0f} s", flush=True)
    scores = {r["method"]: r["metrics"][metric] for r in report}
    best = max((m for m in compared if m in scores), key=lambda m: scores[m])
    interval = lambda d: f"{d[0]:+.4f} [{d[1]:+.4f}, {d[2]:+.4f}]"  # noqa: E731
    d_best, d_rrf = difference(lake, corpus, split, metric, LTR, best), difference(lake, corpus, split, metric, LTR, "rrf")
    d_solo = difference(lake, corpus, split, metric, LTR, SOLO)
    timed = latency(corpus, split, latency_queries)
    stored = LearnedRankers.load(lake.artifact("learned_fusion", {"corpus": corpus}))
    trained = stored.report.get("fusions", {}).get(key(load_methods(lake.home)[LTR]))
    if trained:
        top = ", ".join(f"{name} {gain:.0f}" for name, gain in list(trained["importance"].items())[:6])
        signals = trained["partner_signals"]
        ranker = (
            f"- {corpus} (trained on {CORPORA[corpus][3] or corpus}: {len(trained['training_queries'])} queries in {trained['folds']} folds, {trained['rounds']} rounds, "
            f"{'scale-free features' if trained['across_corpora'] else 'all features'}; out-of-fold nDCG@10 {trained['out_of_fold_ndcg']:.3f} (optimistic: the same folds chose the rounds), rrf's {trained['ndcg_rrf']:.3f}; "
            f"partner signals {'kept' if signals['kept'] else 'not kept'}, {signals['gain'][0]:+.4f} [{signals['gain'][1]:+.4f}, {signals['gain'][2]:+.4f}] ({signals['ndcg_without']:.3f} without): {top}"
        )
    else:
        ranker = f"- {corpus}: no ranker ({stored.untrained})"
    return {
        "set": corpus,
        "summary": (
            f"| {corpus} | {metric} | {scores[LTR]:.4f} | {{before}} | {scores[SOLO]:.4f} | {interval(d_solo)} | {scores[best]:.4f} ({best}) | {interval(d_best)} "
            f"| {scores['rrf']:.4f} | {interval(d_rrf)} |"
        ),
        "headroom": headroom(lake, corpus, split, [LTR, SOLO], inputs),
        "detail": f"| {corpus} | " + " | ".join(f"{scores[m]:.4f}" if m in scores else "–" for m in [*compared, LTR]) + " |",
        "ablation": [f"| {corpus} | {name} | {scores[name]:.4f} | {interval(difference(lake, corpus, split, metric, name, LTR))} |" for name in ablated if name != SOLO],
        "latency": f"| {corpus} | {timed['queries']} | {timed['candidates']:.0f} | {timed['p50']:.2f} | {timed['p95']:.2f} | {timed['inputs_p50']:.1f} |",
        "ranker": ranker,
        "in_domain": (
            f"| {corpus} | {CORPORA[corpus][3] or corpus} | {metric} | {scores[LTR]:.4f} | {cross_validated(lake, corpus, split, metric):.4f} | {scores[best]:.4f} ({best}) |"
            if cross_validate
            else None
        ),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def render(measured: list[dict], compared: list[str], inputs: list[str]) -> list[str]:
    lines = header("graphlake_ltr: one learned composition of the five papers' signals", ".venv/bin/python benchmarks/learned_fusion.py --sets SETS")
    lines += [
        "- measured: " + ", ".join(f"{m['set']} {m['date']}" for m in measured),
        "- graphlake_ltr: LightGBM lambdarank over the union of its inputs' top 100 "
        f"({', '.join(inputs)}); each input's rank and score scaled to its list (and the raw score and its gap to the best where the ranker "
        "learns on the corpus's own train split: raw scales do not carry across corpora), how many inputs found the candidate and "
        "ranked it in their top 3 and top 10, its best rank, the query's length and GRASP's plan signals (valid, candidates, risk); "
        "and the partner signals, each candidate read beside the three the inputs' rrf puts first (dense, title and entity links, the "
        "question's entities it covers: kernels/partners.py); rounds chosen by 5-fold cross-validation on the training queries, "
        "the partner signals kept only where their out-of-fold gain in nDCG@10 is beyond noise",
        f"- without partner signals: `{SOLO}`, the same declaration with `partners: []` (learned the same way); graphlake_ltr at {BEFORE}: "
        "the value this file gave before (early-stopped on 20 % of the training queries, no partner signals; unpaired)",
        "- Δ: paired difference of the per-query primary metric, 95 % bootstrap interval (10,000 resamples, seed 0)",
        "- compared: each paper's declared methods that need no cross-encoder (FastInsight's and GRASP's Stage 3 are not run here)",
    ]
    lines += table(
        "graphlake_ltr against itself without partner signals and each paper's best (primary metric)",
        ["set", "metric", "graphlake_ltr", f"graphlake_ltr at {BEFORE}", "without partner signals", "Δ vs without [95% CI]", "best other (method)", "Δ vs best [95% CI]", "rrf", "Δ vs rrf [95% CI]"],
    )
    lines += [m["summary"].replace("{before}", f"{m['before']:.4f}" if m.get("before") is not None else "–") for m in measured]
    lines += table("Headroom: recall at k, and the union of graphlake_ltr's inputs' top 100", ["set", "ranking", *(f"R@{k}" for k in DEPTHS), "candidates (mean)"])
    lines += [row for m in measured for row in m.get("headroom", [])]
    lines += table("Every compared method (primary metric)", ["set", *compared, LTR])[:-1]
    lines.append("|---|" + "---:|" * (len(compared) + 1))
    lines += [m["detail"] for m in measured]
    lines += table("Ablation: graphlake_ltr without one signal family (Δ against graphlake_ltr)", ["set", "method", "value", "Δ [95% CI]"])
    lines += [row for m in measured for row in m["ablation"]] or ["| (not run with the current features: `--ablate SETS`) | | | |"]
    lines += table(
        "graphlake_ltr learning in-domain: 5-fold cross-validation on the evaluated queries (an estimate of what the pairing costs, not the protocol)",
        ["set", "trained on", "metric", "graphlake_ltr (as paired)", "in-domain, 5-fold", "best other (method)"],
    )
    lines += [m["in_domain"] for m in measured if m.get("in_domain")] or ["| (not run: `--cross-validate SETS`) | | | | | |"]
    lines += table("Latency graphlake_ltr adds over its inputs (features + model), one query at a time, 2-core CPU", ["set", "queries", "candidates (mean)", "p50 ms", "p95 ms", "inputs p50 ms"])
    lines += [m["latency"] for m in measured]
    return lines + ["", "## The rankers (largest total gains)", "", *(m["ranker"] for m in measured)]


def main() -> None:
    def options(parser) -> None:
        parser.add_argument("--sets", default=",".join(PRIMARY))
        parser.add_argument("--ablate", default=None, help="the sets to run the ablation on (default: every set run)")
        parser.add_argument("--latency-queries", type=int, default=100)
        parser.add_argument("--cross-validate", default="", help="the sets whose in-domain estimate to compute (5-fold on the evaluated queries)")
        parser.add_argument("--dense", default=None, help="the lake's dense model (a name `graphlake models` lists); default: the lake's own choice")

    args = arguments(__doc__, "learned_fusion.md", options)
    sets = [s for s in args.sets.split(",") if s]
    ablate = sets if args.ablate is None else args.ablate.split(",")
    home = lake_home()
    from graphlake.retrieval.methods import load_methods

    inputs = list(load_methods(home).declared[LTR]["inputs"])
    home.mkdir(parents=True, exist_ok=True)
    if args.dense:
        (home / "models.yaml").write_text(yaml.safe_dump({"use": {"dense": args.dense}}), encoding="utf-8")
        graphlake("models")  # an unknown model stops here, saying why
    compared = [m for methods in PAPERS.values() for m in methods]
    (home / "methods.yaml").write_text(yaml.safe_dump({"use": [*compared, LTR], **ablations(inputs)}, sort_keys=False))
    load_methods(home)  # a declaration error stops here, before anything is built
    needed = {c for s in sets for c in (s, CORPORA[s][3]) if c}
    for corpus in (c for c in CORPORA if c in needed):
        fmt, relative, _, train = CORPORA[corpus]
        if not (home / "tables" / "documents" / f"corpus={corpus}").exists():
            graphlake("ingest", fmt, str(args.datasets / relative), "--corpus", corpus, *(["--train-corpus", train] if train else []))
    lake = LakeStorage(home)
    for corpus in (c for c in CORPORA if c in needed):  # the corpus graph, for Topological Recall, though no compared method reads it all
        kinds = [k for k in CorpusRegistry(home).get(corpus).effective_linking.corpus_graph if not lake.has("edges", {"corpus": corpus, "kind": k})]
        if kinds:  # --select runs what it names: only what is missing
            graphlake("materialize", "--corpus", corpus, "--select", " or ".join(f"+key:{kind}_edges" for kind in kinds))
    store = args.output.with_suffix(".json")  # every set measured so far: sets can run one at a time, or in lakes side by side
    for corpus in sets:
        measured = measure(lake, corpus, compared, inputs, args.latency_queries, corpus in ablate, corpus in args.cross_validate.split(","))
        saved = json.loads(store.read_text(encoding="utf-8")) if store.exists() else {}
        previous = saved.get(corpus, {})
        measured["before"] = previous.get("before", float(previous["summary"].split("|")[3]) if "{before}" not in previous.get("summary", "{before}") else None)
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(saved | {corpus: measured}, indent=1), encoding="utf-8")
    saved = json.loads(store.read_text(encoding="utf-8"))
    lines = render([saved[c] for c in PRIMARY if c in saved], compared, inputs)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(args.output.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
