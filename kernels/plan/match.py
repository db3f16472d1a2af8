"""GRASP's Stage-1 matching as array kernels over the SKB's adjacency: what ``compile_sql`` states in SQL,
computed on CSR neighbour lists the ``skb`` asset stores at build time, for a batch of queries at once.

*Adjacency.* Per relation, each SKB node's neighbours in both directions (a hop is undirected), sorted
and distinct, over node positions: the rows of ``skb_nodes``, which the builders write sorted by id, so
a position orders as its id does (the SQL's ``ORDER BY`` on ids is an order on positions).

*Shapes.* A plan's connected group of variables, renamed in the order they are bound (anchors first,
then each variable once a hop reaches it), is its *shape*: the entity planner's "entity of label L,
then the passages that mention it" is one shape however the entity is named. Every (query, group)
of a batch with one shape is one *job* of one kernel call: the matches of all its jobs grow together,
a column of positions per bound variable and a job number per match, hop by hop, each hop a gather
from the CSR lists of the positions bound so far. A match keeps distinct nodes, every hop it closes
is an edge (a sorted key lookup), and each variable's labels; its score is the sum of its anchors'
cosines, added in the variables' name order as the SQL adds them, so both give the same doubles.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphlake.kernels.plan.plans import Plan, binding_order, components, variable_labels

MAX_PARTIAL_MATCHES = 20_000_000  # partial matches one step may hold (about 1 GB of columns): beyond it a plan is refused, as past its time


class PlanTooCostly(Exception):
    """A plan's matching ran past its time or its bound on partial matches."""


@dataclass(frozen=True)
class Adjacency:
    """The SKB's relations as CSR neighbour lists over node positions, both directions, and each node's label."""

    relations: Mapping[str, tuple[np.ndarray, np.ndarray]]  # relation -> (indptr, sorted distinct neighbours)
    label_code: np.ndarray  # per position, an index into ``label_names``
    label_names: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.label_code)

    @classmethod
    def of(cls, nodes: pa.Table, edges: pa.Table) -> Adjacency:
        """From ``skb_nodes`` (sorted by ``skb_id``) and ``skb_edges`` rows; an edge naming no node is an error."""
        ids = nodes.column("skb_id")
        if len(ids) > 1 and not pc.all(pc.less(ids.slice(0, len(ids) - 1), ids.slice(1))).as_py():
            raise ValueError("skb_nodes must be sorted by skb_id, each id once")
        src, dst = (pc.index_in(edges.column(end), value_set=ids) for end in ("src", "dst"))
        missing = pc.or_(pc.is_null(src), pc.is_null(dst))
        if pc.any(missing).as_py():
            bad = edges.filter(missing).slice(0, 1).to_pylist()[0]
            raise ValueError(f"skb_edges: edge {bad['src']!r} -{bad['relation']}- {bad['dst']!r} names a node skb_nodes does not hold")
        src, dst = src.to_numpy().astype(np.int64), dst.to_numpy().astype(np.int64)
        relation = edges.column("relation").to_numpy(zero_copy_only=False)
        size = len(ids)
        relations = {}
        for name in sorted(set(relation.tolist())):
            chosen = relation == name
            a, b = src[chosen], dst[chosen]
            keys = np.unique(np.concatenate([a * size + b, b * size + a]))  # both directions, each pair once
            rows, neighbours = np.divmod(keys, size)
            relations[name] = (np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=size))]), neighbours.astype(np.int32))
        labels = nodes.column("label").to_numpy(zero_copy_only=False)
        names, codes = np.unique(labels.astype(str), return_inverse=True)
        return cls(relations, codes.astype(np.int32), tuple(names.tolist()))

    def save(self, path: Path) -> None:
        names = sorted(self.relations)
        arrays = {f"indptr{i}": self.relations[name][0] for i, name in enumerate(names)}
        arrays |= {f"neighbours{i}": self.relations[name][1] for i, name in enumerate(names)}
        np.savez(path, relation_names=np.array(names, dtype=str), label_names=np.array(self.label_names, dtype=str), label_code=self.label_code, **arrays)

    @classmethod
    def load(cls, path: Path) -> Adjacency:
        with np.load(path, allow_pickle=False) as stored:
            names = stored["relation_names"].tolist()
            relations = {name: (stored[f"indptr{i}"], stored[f"neighbours{i}"]) for i, name in enumerate(names)}
            return cls(relations, stored["label_code"], tuple(stored["label_names"].tolist()))

    def patterns(self) -> list[tuple[str, str, str]]:
        """(label, relation, label) of every pair the relations join, each once: the SKB's schema."""
        found = []
        for relation, keys in self._keys.items():
            rows, neighbours = np.divmod(keys, self.size)
            pairs = np.unique(self.label_code[rows].astype(np.int64) * len(self.label_names) + self.label_code[neighbours])
            found += [(self.label_names[a], relation, self.label_names[b]) for a, b in zip(*np.divmod(pairs, len(self.label_names)), strict=True)]
        return found

    def neighbours(self, relation: str, position: int) -> np.ndarray:
        indptr, neighbours = self.relations[relation]
        return neighbours[indptr[position] : indptr[position + 1]]

    def expand(self, relation: str, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each neighbour of each of ``positions`` along ``relation``: the index into ``positions`` it
        came from, and the neighbour."""
        if relation not in self.relations:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        indptr, neighbours = self.relations[relation]
        starts, counts = indptr[positions], indptr[positions + 1] - indptr[positions]
        return _spread(starts, counts, neighbours)

    def joined(self, relation: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether each ``a[i]`` and ``b[i]`` are joined by ``relation`` (either direction)."""
        keys = self._keys.get(relation)
        if keys is None or not len(keys):
            return np.zeros(len(a), bool)
        wanted = a.astype(np.int64) * self.size + b
        at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        return keys[at] == wanted

    @cached_property
    def _keys(self) -> dict[str, np.ndarray]:
        """Per relation, ``node * size + neighbour`` of every pair, sorted (the CSR's order)."""
        return {name: np.repeat(np.arange(self.size, dtype=np.int64), np.diff(indptr)) * self.size + neighbours for name, (indptr, neighbours) in self.relations.items()}

    def allowed(self, labels: frozenset[str] | None) -> np.ndarray | None:
        """Per label code, whether a variable allowed ``labels`` may take it (None: any label)."""
        if labels is None:
            return None
        return np.array([name in labels for name in self.label_names], dtype=bool)


def _spread(starts: np.ndarray, counts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges ``values[starts[i] : starts[i] + counts[i]]`` laid end to end: each element's ``i``, and the element."""
    total = int(counts.sum())
    if total > MAX_PARTIAL_MATCHES:
        raise PlanTooCostly(f"the plan's matches grew past {MAX_PARTIAL_MATCHES:,} partial paths")
    parent = np.repeat(np.arange(len(counts)), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(starts, counts)
    return parent, values[offsets].astype(np.int64, copy=False)


@dataclass(frozen=True)
class Shape:
    """A connected group of plan variables, indexed in binding order: what one kernel call matches for many jobs."""

    anchor: tuple[bool, ...]
    labels: tuple[frozenset[str] | None, ...]
    emitted: tuple[bool, ...]
    by_name: tuple[int, ...]  # the variables in name order: the SQL's order of sum and of ORDER BY
    hops: tuple[tuple[int, str, int], ...]


def shapes(plan: Plan, emit: str) -> list[tuple[Shape, list[str]]]:
    """The plan's groups that hold an anchor and emit a variable: each one's shape, and its variables in binding order."""
    anchors = {anchor.var for anchor in plan.anchors}
    labels = variable_labels(plan)
    targets = set(plan.target.variables())
    found = []
    for group in components(plan):
        variables = sorted(group)
        if not group & anchors or not any(emit == "path" or var in targets for var in variables):
            continue
        hops = [hop for hop in plan.hops if hop.from_ in group]
        order = binding_order(variables, anchors, hops)
        index = {var: i for i, var in enumerate(order)}
        shape = Shape(
            anchor=tuple(var in anchors for var in order),
            labels=tuple(labels.get(var) for var in order),
            emitted=tuple(emit == "path" or var in targets for var in order),
            by_name=tuple(index[var] for var in variables),
            hops=tuple((index[hop.from_], hop.rel, index[hop.to_var]) for hop in hops),
        )
        found.append((shape, order))
    return found


Bound = tuple[np.ndarray, np.ndarray]  # an anchor's bound positions (int64) and their cosines (float64)


def match(adjacency: Adjacency, shape: Shape, jobs: Sequence[Sequence[Bound | None]], max_rows: int, deadline: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every job's matches of ``shape`` (a job: a bound pair per anchor variable, None for the others),
    at most ``max_rows`` per job (the best by score, then by the variables' positions in name order), as
    (job, position, score) per emitted variable of each kept match."""
    columns: list[np.ndarray] = []
    job = np.zeros(0, np.int64)
    cosines: dict[int, np.ndarray] = {}
    for i in range(len(shape.anchor)):
        if shape.anchor[i]:
            positions = [found[i][0] for found in jobs]
            counts = np.array([len(p) for p in positions], np.int64)
            flat, scores = np.concatenate(positions).astype(np.int64), np.concatenate([found[i][1] for found in jobs]).astype(np.float64)
            starts = np.cumsum(counts) - counts
            if i == 0:
                parent, new = np.repeat(np.arange(len(jobs)), counts), flat
                job = parent
                picked = np.arange(len(flat))
            else:
                parent, picked = _spread(starts[job], counts[job], np.arange(len(flat)))
                new = flat[picked]
            used = None
        else:
            used = next(((a, rel, b) for a, rel, b in shape.hops if (a == i) != (b == i) and max(a, b) == i), None)
            if used is not None:
                other = used[0] if used[2] == i else used[2]
                parent, new = adjacency.expand(used[1], columns[other])
            else:  # reached by no hop from what is bound: every node it may be (a plan's group is connected, so rarely)
                every = np.arange(adjacency.size)
                parent, new = _spread(np.zeros(len(job), np.int64), np.full(len(job), adjacency.size), every)
        columns = [column[parent] for column in columns]
        job = job[parent] if i else job
        cosines = {var: values[parent] for var, values in cosines.items()}
        keep = np.ones(len(new), bool)
        allowed = adjacency.allowed(shape.labels[i])
        if allowed is not None:
            keep &= allowed[adjacency.label_code[new]]
        for column in columns:
            keep &= column != new
        for a, rel, b in shape.hops:
            if (a, rel, b) != used and i in (a, b) and max(a, b) == i:
                keep &= adjacency.joined(rel, new if a == i else columns[a], new if b == i else columns[b])
        columns = [column[keep] for column in columns] + [new[keep]]
        job = job[keep]
        cosines = {var: values[keep] for var, values in cosines.items()}
        if shape.anchor[i]:
            cosines[i] = scores[picked[keep]]
        if time.perf_counter() > deadline:
            raise PlanTooCostly("the plan's matching ran past its time")
    score = np.zeros(len(job))
    for var in shape.by_name:
        if shape.anchor[var]:
            score = score + cosines[var]
    counts = np.bincount(job, minlength=len(jobs))
    if len(job) and counts.max() > max_rows:
        order = np.lexsort((*(columns[var] for var in reversed(shape.by_name)), -score, job))
        rank = np.arange(len(order)) - (np.cumsum(counts) - counts)[job[order]]
        kept = order[rank < max_rows]
        columns, job, score = [column[kept] for column in columns], job[kept], score[kept]
    emitted = [var for var, flag in enumerate(shape.emitted) if flag]
    return (
        np.concatenate([job for _ in emitted]) if emitted else np.zeros(0, np.int64),
        np.concatenate([columns[var] for var in emitted]) if emitted else np.zeros(0, np.int64),
        np.concatenate([score for _ in emitted]) if emitted else np.zeros(0),
    )


def best_per_node(owner: np.ndarray, positions: np.ndarray, scores: np.ndarray, owners: int, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per owner (a query), each node's best score over the matches that emitted it: (positions, scores)."""
    key = owner * size + positions
    order = np.lexsort((-scores, key))
    first = np.ones(len(order), bool)
    first[1:] = key[order][1:] != key[order][:-1]
    chosen = order[first]
    bounds = np.searchsorted(owner[chosen], np.arange(owners + 1))
    return [(positions[chosen[bounds[q] : bounds[q + 1]]], scores[chosen[bounds[q] : bounds[q + 1]]]) for q in range(owners)]


def execute(adjacency: Adjacency, planned: Sequence[tuple[Plan, Mapping[str, Bound]]], emit: str, max_rows: int, timeout_s: float) -> list[tuple[np.ndarray, np.ndarray] | str]:
    """Each (plan, anchor bindings)'s best score per node as (positions, scores), or why it has none (its
    matching ran past ``timeout_s`` or its bound): one kernel call per shape for the whole batch. A call
    that fails is run again job by job, so that one query's explosion costs no other query its answer."""
    by_shape: dict[Shape, list[tuple[int, list[Bound | None]]]] = {}
    for query, (plan, bindings) in enumerate(planned):
        for shape, order in shapes(plan, emit):
            by_shape.setdefault(shape, []).append((query, [bindings.get(var) if flag else None for var, flag in zip(order, shape.anchor, strict=True)]))
    owners, positions, scores, failed = [], [], [], {}
    for shape, jobs in by_shape.items():
        batches = [jobs]
        while batches:
            batch = batches.pop()
            try:
                job, found, score = match(adjacency, shape, [bound for _, bound in batch], max_rows, time.perf_counter() + timeout_s)
            except PlanTooCostly as error:
                if len(batch) == 1:
                    failed.setdefault(batch[0][0], str(error))
                else:
                    batches += [[one] for one in batch]
                continue
            owners.append(np.array([query for query, _ in batch], np.int64)[job])
            positions.append(found)
            scores.append(score)
    answered = best_per_node(
        np.concatenate(owners) if owners else np.zeros(0, np.int64),
        np.concatenate(positions) if positions else np.zeros(0, np.int64),
        np.concatenate(scores) if scores else np.zeros(0),
        len(planned),
        adjacency.size,
    )
    return [failed.get(query, answer) for query, answer in enumerate(answered)]
