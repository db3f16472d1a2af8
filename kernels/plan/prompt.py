"""The LLM planner's prompt, built on the structure of GRASP's App. B in the project's own words: a system
message of role, SKB schema, plan structure, per-SKB guidance, verified worked examples and the
fusion-control block, then a per-query message ending in the risk-level addendum."""

from __future__ import annotations

import json
from collections.abc import Sequence

from graphlake.kernels.plan.plans import Plan, Schema

ROLE = "## Role\nYou turn a search question into a graph traversal plan over a typed knowledge base. You parse the question's structure only: never answer it, never add facts it does not state."

PLAN_STRUCTURE = (
    "## Plan structure\n"
    "Reply with one JSON object with these keys:\n"
    '- "anchors": the things the question names. Each has "var" (a short id such as A1), "text" (the words '
    'from the question), "label" (one node type from the schema) and "match_mode": "name" for a short name, '
    '"doc" for a description to match against whole documents.\n'
    '- "hops": walks from a variable along one relation to a new variable. Each has "from" (a variable already '
    'bound), "rel" (one relation type), "to_var" and "to_label" (the node type reached). Relations can be walked '
    "either way.\n"
    '- "target": "var" (the variable that answers the question), "labels" (the node types it may have) and '
    '"relevance_text" (whatever the question asks of the answer that no hop can express; "" when the hops say it all).\n'
    "Use only node types and relation types listed in the schema."
)

FUSION_CONTROL = (
    "## Fusion control\n"
    'Also give a top-level "risk_level": one of "no_trade", "weak", "normal", "aggressive". It says how much '
    "the graph result should count when it is merged with a text retriever's ranking; it does not change the traversal."
)

RISK_ADDENDUM = (
    'Add a top-level "risk_level": "no_trade" when the text retriever is likely right or your plan is a guess, '
    '"weak" for a light touch, "normal" or "aggressive" when the question hinges on relations that text '
    "matching misses and the graph should weigh more."
)

GUIDANCE = {
    "wiki": (
        "## Guidance for this knowledge base\n"
        "Nodes are Wikipedia passages typed film, person, song, album, place, organization or other, and values "
        "(dates, countries, places without a passage). Anchor the titles the question names by name. Follow a "
        'relation chain from each anchor ("the director of film X": X -director-> person; "X\'s paternal '
        'grandfather": X -father-> person -father-> person). For a comparison of two named things, anchor both '
        'and list both variables in target "vars".'
    ),
    "sql": (
        "## Guidance for this knowledge base\n"
        "Nodes are databases, tables and columns; HAS_TABLE joins a database to its tables, HAS_COLUMN a table to "
        "its columns, FOREIGN_KEY two columns. The answer is the tables a SQL query for the question would read: "
        "anchor the question against table documents (match_mode doc), and walk HAS_COLUMN / FOREIGN_KEY to tables "
        "it must be joined with."
    ),
    "entities": (
        "## Guidance for this knowledge base\n"
        "Nodes are passages and the named entities they mention (labelled by entity type); MENTIONS joins a passage "
        "to an entity, CITES one passage to another. Anchor the entities the question names by name and hop "
        "MENTIONS to passages; with no entity, anchor the whole question as a passage document (match_mode doc)."
    ),
}


def schema_block(schema: Schema) -> str:
    """Node types, relation types and the (type, relation, type) patterns the SKB holds."""
    patterns = sorted({(a, r, b) for a, r, b in schema.patterns if (b, r, a) not in schema.patterns or a <= b})
    lines = ["## Knowledge base schema", "Node types: " + ", ".join(sorted(schema.labels)), "Relation types: " + ", ".join(sorted(schema.relations))]
    lines += ["Edges that exist (either direction):"] + [f"- {a} -{r}- {b}" for a, r, b in patterns[:60]]
    return "\n".join(lines)


def system_prompt(schema: Schema, kind: str, examples: Sequence[tuple[str, Plan]]) -> str:
    blocks = [ROLE, schema_block(schema), PLAN_STRUCTURE, GUIDANCE[kind]]
    if examples:
        shown = "\n".join(f"Question: {q}\nPlan: {plan.model_dump_json(by_alias=True, exclude_none=True)}" for q, plan in examples)
        blocks.append("## Worked examples (each one found its answer)\n" + shown)
    blocks.append(FUSION_CONTROL)
    return "\n\n".join(blocks)


def user_prompt(question: str) -> str:
    return f"Write the traversal plan for this question. Parse it; do not answer it.\n\nQuestion: {json.dumps(question)}\n\n{RISK_ADDENDUM}"
