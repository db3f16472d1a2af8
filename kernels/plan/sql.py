"""GRASP's Stage 1 (§3.1) stated: anchors linked to SKB nodes, the plan as one SQL query over the lake's
``skb_nodes`` and ``skb_edges`` (what the ``skb_plans`` table records, for a user to read and run), and
a plain-Python reference executor that defines the answer. Queries are answered by the array kernels
of ``match.py``, which the tests hold equal to both.

*Linking.* An anchor's text is compared (cosine of unit vectors) with the name vector (``name`` mode)
or the document vector (``doc`` mode) of every SKB node of its label; its bindings are the top ``K``
whose cosine is at least ``tau`` times the best one (App. A: (5, 0.95) by name, (10, 0.90) by
document). A best cosine at or below 0 binds nothing.

*Matching.* Each connected group of plan variables is matched as one pattern: every hop an undirected
edge of its relation, every variable a node of its allowed labels, and the variables of one match
bound to distinct nodes (Cypher keeps a match from reusing an edge; distinct nodes is the simpler
rule that likewise stops a walk from coming straight back). A match's score is the sum of its anchors'
cosines; a node's score is the best over the matches that bind it to an emitted variable: the target
variables (``emit="target"``, the paper) or every variable of the group (``emit="path"``, for gold
that is evidence along the path). At most ``max_rows`` matches are kept per group, the best-scoring
ones (ties: by the variables' ids in name order).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from graphlake.kernels.plan.plans import Plan, binding_order, components, variable_labels

Emit = Literal["target", "path"]


@dataclass
class Linked:
    """One anchor's bindings: SKB ids and their cosines, best first."""

    ids: list[str]
    scores: list[float]


def link(cosines: np.ndarray, k: int, tau: float) -> np.ndarray:
    """Positions of the top ``k`` ``cosines`` (ties: the earlier), best first, keeping those at least
    ``tau`` times the best; none when the best is at or below 0. A partition, not a sort: a document-mode
    anchor is compared with every passage."""
    if len(cosines) == 0:
        return np.zeros(0, np.int64)
    if len(cosines) > k:
        kth = np.partition(cosines, len(cosines) - k)[len(cosines) - k]
        candidates = np.flatnonzero(cosines >= kth)  # the top k, and every node tied with the last
    else:
        candidates = np.arange(len(cosines))
    order = candidates[np.lexsort((candidates, -cosines[candidates]))][:k]
    best = float(cosines[order[0]])
    if best <= 0:
        return np.zeros(0, np.int64)
    return order[cosines[order] >= tau * best]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def compile_sql(plan: Plan, bindings: Mapping[str, Linked], corpus: str, source: str, emit: Emit = "target", max_rows: int = 100_000) -> str:
    """One DuckDB query over the ``skb_nodes`` / ``skb_edges`` tables: a row (skb_id, score) per emitted node."""
    partition = f"corpus = {_quote(corpus)} AND source = {_quote(source)}"
    ctes = [
        f"hop AS (SELECT src, relation, dst FROM skb_edges WHERE {partition} UNION SELECT dst, relation, src FROM skb_edges WHERE {partition})",
        f"node AS (SELECT skb_id, label FROM skb_nodes WHERE {partition})",
    ]
    anchors = {anchor.var: anchor for anchor in plan.anchors}
    for number, var in enumerate(anchors):
        linked = bindings[var]
        rows = ", ".join(f"({_quote(i)}, {s!r}::DOUBLE)" for i, s in zip(linked.ids, linked.scores, strict=True)) or "(NULL, NULL)"
        ctes.append(f"anchor{number}(id, s) AS (SELECT * FROM (VALUES {rows}) v(id, s) WHERE id IS NOT NULL)")
    labels = variable_labels(plan)
    targets = set(plan.target.variables())
    parts = []
    for group in components(plan):
        if not group & set(anchors):
            continue
        variables = sorted(group)
        alias = {var: f"x{i}" for i, var in enumerate(variables)}
        sources, conditions = [], []
        for var in variables:
            allowed = labels.get(var)
            where = f" WHERE n.label IN ({', '.join(map(_quote, sorted(allowed)))})" if allowed is not None else ""
            if var in anchors:
                anchor = f"anchor{list(anchors).index(var)}"
                sources.append(f"(SELECT a.id, a.s FROM {anchor} a JOIN node n ON n.skb_id = a.id{where}) {alias[var]}")
            else:
                sources.append(f"(SELECT n.skb_id AS id FROM node n{where}) {alias[var]}")
        for number, hop in enumerate(plan.hops):
            if hop.from_ in group:
                sources.append(f"hop h{number}")
                conditions.append(f"h{number}.src = {alias[hop.from_]}.id AND h{number}.relation = {_quote(hop.rel)} AND h{number}.dst = {alias[hop.to_var]}.id")
        conditions += [f"{alias[a]}.id <> {alias[b]}.id" for i, a in enumerate(variables) for b in variables[i + 1 :]]
        score = " + ".join(f"{alias[var]}.s" for var in variables if var in anchors)
        emitted = [var for var in variables if emit == "path" or var in targets]
        if not emitted:
            continue
        columns = ", ".join(f"{alias[var]}.id AS {alias[var]}" for var in variables)
        order = ", ".join(alias[var] for var in variables)
        matches = (
            f"SELECT {columns}, {score} AS score FROM {', '.join(sources)}" + (f" WHERE {' AND '.join(conditions)}" if conditions else "") + f" ORDER BY score DESC, {order} LIMIT {int(max_rows)}"
        )
        parts.append(" UNION ALL ".join(f"SELECT {alias[var]} AS skb_id, score FROM ({matches})" for var in emitted))
    body = " UNION ALL ".join(f"({part})" for part in parts) or "SELECT NULL::VARCHAR AS skb_id, NULL::DOUBLE AS score WHERE false"
    return f"WITH {', '.join(ctes)} SELECT skb_id, max(score) AS score FROM ({body}) GROUP BY skb_id ORDER BY score DESC, skb_id"


class Graph:
    """The SKB as Python dicts, for the reference executor: labels, and neighbours per (node, relation) both ways."""

    def __init__(self, ids: list[str], labels: list[str], edges: list[tuple[str, str, str]]) -> None:
        self.label = dict(zip(ids, labels, strict=True))
        self.neighbours: dict[tuple[str, str], set[str]] = {}
        for src, relation, dst in edges:
            self.neighbours.setdefault((src, relation), set()).add(dst)
            self.neighbours.setdefault((dst, relation), set()).add(src)


def reference(plan: Plan, bindings: Mapping[str, Linked], graph: Graph, emit: Emit = "target") -> dict[str, float]:
    """The executor's answer by enumerating matches in Python: the definition :func:`compile_sql` must equal."""
    anchors = {anchor.var: anchor for anchor in plan.anchors}
    labels = variable_labels(plan)
    targets = set(plan.target.variables())
    best: dict[str, float] = {}
    for group in components(plan):
        if not group & set(anchors):
            continue
        hops = [hop for hop in plan.hops if hop.from_ in group]
        for match in _matches(sorted(group), anchors, bindings, hops, labels, graph):
            score = 0.0
            for var in sorted(group):
                if var in anchors:
                    score += dict(zip(bindings[var].ids, bindings[var].scores, strict=True))[match[var]]
            for var in group:
                if emit == "path" or var in targets:
                    best[match[var]] = max(best.get(match[var], -np.inf), score)
    return best


def _matches(variables, anchors, bindings, hops, labels, graph: Graph) -> Iterator[dict[str, str]]:
    order = binding_order(variables, anchors, hops)

    def domain(var: str, bound: dict[str, str]) -> list[str]:
        if var in anchors:
            return list(bindings[var].ids)
        for hop in hops:  # reached through a hop from a bound variable (the order guarantees one)
            for near, far in ((hop.from_, hop.to_var), (hop.to_var, hop.from_)):
                if far == var and near in bound:
                    return sorted(graph.neighbours.get((bound[near], hop.rel), ()))
        return [node for node in graph.label if labels.get(var) is None or graph.label[node] in labels[var]]

    def consistent(bound: dict[str, str]) -> bool:
        if len(set(bound.values())) != len(bound):
            return False
        for var, node in bound.items():
            if labels.get(var) is not None and graph.label.get(node) not in labels[var]:
                return False
        return all(bound[h.to_var] in graph.neighbours.get((bound[h.from_], h.rel), ()) for h in hops if h.from_ in bound and h.to_var in bound)

    def extend(position: int, bound: dict[str, str]) -> Iterator[dict[str, str]]:
        if position == len(order):
            yield dict(bound)
            return
        var = order[position]
        for node in domain(var, bound):
            bound[var] = node
            if consistent(bound):
                yield from extend(position + 1, bound)
            del bound[var]

    yield from extend(0, {})
