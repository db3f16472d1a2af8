"""GRASP's plan language (§3.1): what a planner says about a query, and its check against an SKB's schema.

A plan names *anchors* (text spans of the query, each linked to SKB nodes of one label by name or by
whole document), *hops* (typed, undirected walks between variables) and a *target* (the variable
whose bindings are the answer, the labels it may have, and ``relevance_text``: what the hops cannot
say, scored by dense similarity), plus a self-reported ``risk_level`` that Stage 2 turns into a weight.

Extension, not in the paper: ``target.vars`` names several target variables, so a 2Wiki comparison
("Which film came out first, X or Y?") can return both anchors; it defaults to ``[target.var]``.

Validation never raises on a bad plan: :func:`check` returns the problems, which are recorded with
the plan, and an invalid plan gives an empty graph branch (Stage 2 then returns the partner's ranking).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

RiskLevel = Literal["no_trade", "weak", "normal", "aggressive"]
RISK_LEVELS: tuple[str, ...] = ("no_trade", "weak", "normal", "aggressive")
MatchMode = Literal["name", "doc"]


# bounds of a plan, so that a schema-constrained decoder cannot loop until it runs out of tokens
MAX_TEXT = 400  # characters of an anchor's or the target's text
MAX_ANCHORS = 8  # anchors, and target variables
MAX_HOPS = 12


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Anchor(_Strict):
    """A span of the query bound to SKB nodes of ``label``: by their name (``name``) or their document (``doc``)."""

    var: str = Field(min_length=1, max_length=40)
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    label: str = Field(max_length=80)
    match_mode: MatchMode = "name"


class Hop(_Strict):
    """An undirected walk along ``rel`` from a bound variable to ``to_var``, a node of ``to_label``."""

    from_: str = Field(alias="from", min_length=1, max_length=40)
    rel: str = Field(max_length=80)
    to_var: str = Field(min_length=1, max_length=40)
    to_label: str = Field(max_length=80)


class Target(_Strict):
    var: str = Field("T", max_length=40)
    labels: list[str] = Field(default_factory=list, max_length=8)  # empty: any label
    relevance_text: str = Field("", max_length=MAX_TEXT)
    vars: list[str] | None = Field(None, max_length=MAX_ANCHORS)  # extension: several target variables (see the module docstring)

    def variables(self) -> list[str]:
        return list(self.vars) if self.vars else [self.var]


class Plan(_Strict):
    # bounded, so that a schema-constrained decoder cannot loop until it runs out of tokens
    anchors: list[Anchor] = Field(default_factory=list, max_length=MAX_ANCHORS)
    hops: list[Hop] = Field(default_factory=list, max_length=MAX_HOPS)
    target: Target = Field(default_factory=Target)
    risk_level: RiskLevel = "normal"


@dataclass(frozen=True)
class Schema:
    """An SKB's vocabulary: node labels, relation types, and which (label, relation, label) triples occur."""

    labels: frozenset[str]
    relations: frozenset[str]
    patterns: frozenset[tuple[str, str, str]] = frozenset()

    @classmethod
    def of(cls, rows: Iterable[tuple[str, str, str]], labels: Iterable[str] = ()) -> Schema:
        """From ``skb_schema`` rows (source label, relation, destination label) and the labels of every node."""
        rows = [tuple(row) for row in rows]
        undirected = {(a, r, b) for a, r, b in rows} | {(b, r, a) for a, r, b in rows}
        return cls(frozenset(labels) | {row[0] for row in rows} | {row[2] for row in rows}, frozenset(r for _, r, _ in rows), frozenset(undirected))


def parse_plan(value: str | Mapping) -> tuple[Plan | None, str | None]:
    """A plan from JSON text or a mapping, or None and the reason it does not parse."""
    try:
        return (Plan.model_validate_json(value) if isinstance(value, str) else Plan.model_validate(value)), None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'plan'}: {e['msg']}" for e in error.errors()[:3])
        return None, f"not a plan: {problems}"


def variable_labels(plan: Plan) -> dict[str, frozenset[str] | None]:
    """The labels each variable may take: the intersection of what the anchors, hops and target say (None: any)."""
    allowed: dict[str, frozenset[str] | None] = {}

    def narrow(var: str, labels: Iterable[str] | None) -> None:
        labels = None if labels is None else frozenset(labels)
        known = allowed.get(var)
        allowed[var] = labels if known is None else (known if labels is None else known & labels)

    for anchor in plan.anchors:
        narrow(anchor.var, [anchor.label])
    for hop in plan.hops:
        narrow(hop.from_, None)
        narrow(hop.to_var, [hop.to_label])
    for var in plan.target.variables():
        narrow(var, plan.target.labels or None)
    return allowed


def components(plan: Plan) -> list[set[str]]:
    """The plan's variables grouped by the hops that connect them (undirected)."""
    parent: dict[str, str] = {}

    def find(var: str) -> str:
        parent.setdefault(var, var)
        while parent[var] != var:
            parent[var] = parent[parent[var]]
            var = parent[var]
        return var

    for var in variable_labels(plan):
        find(var)
    for hop in plan.hops:
        parent[find(hop.from_)] = find(hop.to_var)
    groups: dict[str, set[str]] = {}
    for var in parent:
        groups.setdefault(find(var), set()).add(var)
    return sorted(groups.values(), key=lambda group: sorted(group))


def binding_order(variables: Sequence[str], anchors: Mapping | set, hops: Sequence[Hop]) -> list[str]:
    """Anchors first, then each variable once a hop links it to one already placed."""
    order = [var for var in variables if var in anchors]
    while len(order) < len(variables):
        placed = set(order)
        reachable = [var for var in variables if var not in placed and any((h.from_ in placed and h.to_var == var) or (h.to_var in placed and h.from_ == var) for h in hops)]
        order.append(reachable[0] if reachable else next(var for var in variables if var not in placed))
    return order


def check(plan: Plan, schema: Schema) -> list[str]:
    """What makes ``plan`` unusable on an SKB of ``schema``; empty when it is valid."""
    problems: list[str] = []
    anchors = [anchor.var for anchor in plan.anchors]
    if not anchors:
        problems.append("no anchor: nothing in the query is linked to the SKB")
    if len(set(anchors)) != len(anchors):
        problems.append(f"anchor variables repeat: {anchors}")
    for anchor in plan.anchors:
        if anchor.label not in schema.labels:
            problems.append(f"anchor {anchor.var}: label {anchor.label!r} is not an SKB node type")
    defined = set(anchors)
    for number, hop in enumerate(plan.hops, start=1):
        if hop.rel not in schema.relations:
            problems.append(f"hop {number}: relation {hop.rel!r} is not an SKB relation type")
        if hop.to_label not in schema.labels:
            problems.append(f"hop {number}: label {hop.to_label!r} is not an SKB node type")
        if hop.from_ not in defined:
            problems.append(f"hop {number}: from {hop.from_!r} is not an anchor or an earlier hop's to_var")
        defined.add(hop.to_var)
    for label in plan.target.labels:
        if label not in schema.labels:
            problems.append(f"target: label {label!r} is not an SKB node type")
    for var in plan.target.variables():
        if var not in defined:
            problems.append(f"target {var!r} is not reached: no anchor or hop binds it")
    for var, labels in variable_labels(plan).items():
        if labels is not None and not labels:
            problems.append(f"variable {var!r} is given labels that exclude each other")
    problems += _unmatched_patterns(plan, schema)
    reached = {var for group in components(plan) if group & set(anchors) for var in group}
    problems += [f"variable {var!r} is not connected to any anchor" for var in sorted(set(variable_labels(plan)) - reached)]
    return problems


def _unmatched_patterns(plan: Plan, schema: Schema) -> list[str]:
    """Hops whose (label, relation, label) no SKB edge has: they can only return nothing."""
    if not schema.patterns:
        return []
    labels = variable_labels(plan)
    problems = []
    for number, hop in enumerate(plan.hops, start=1):
        ends = labels.get(hop.from_) or schema.labels
        if not any((end, hop.rel, hop.to_label) in schema.patterns for end in ends):
            problems.append(f"hop {number}: no {hop.rel!r} edge joins {sorted(ends)} to {hop.to_label!r} in this SKB")
    return problems
