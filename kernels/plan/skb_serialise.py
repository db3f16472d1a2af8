"""A candidate node as GRASP's Stage-3 reranker reads it (App. B.6): its type, its text fields, and its
1-hop neighbours grouped by relation (both storage directions: relations are undirected), at most
``max_neighbours`` names per relation. Fields are cut to ``max_field_tokens`` words (the paper counts
model tokens; words keep the serialisation independent of the reranker's tokenizer)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def serialise(
    label: str,
    fields: Sequence[tuple[str, str]],
    neighbours: Mapping[str, Sequence[str]],
    max_neighbours: int = 10,
    max_field_tokens: int = 300,
) -> str:
    """``[Type] label``, a ``[field] value`` line per non-empty field, then ``[relation] a; b; ...`` in relation order."""
    lines = [f"[Type] {label}"]
    for name, value in fields:
        words = " ".join(value.split()).split(" ")
        if value.strip():
            lines.append(f"[{name}] {' '.join(words[:max_field_tokens])}")
    for relation in sorted(neighbours):
        names = list(dict.fromkeys(neighbours[relation]))[:max_neighbours]
        if names:
            lines.append(f"[{relation}] {'; '.join(names)}")
    return "\n".join(lines)
