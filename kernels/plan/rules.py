"""GRASP's planner without an LLM (the paper's is Qwen3-27B): schema-driven rules per kind of SKB, the
analogue of the paper's dataset-specific prompt blocks. Developed on 2Wiki *train* questions and
on BIRD for Spider (never on an evaluated set's questions).

* **2Wiki relations** (``wiki_rules`` / ``wiki_evidence``). Anchors are the title-cased spans of the
  question (split at "X or Y" / "X and Y"); relation cues come from a lexicon of surface forms ("director
  of film X", "X's father", "maternal grandfather" = mother then father, "born first" = date of birth,
  "where ... die" = place of death...). The chain from each anchor takes the cues before it nearest
  first ("the place of birth of the director of X": director, then place of birth), then the cues after
  it in order ("X's father ... die": father, then place of death). Hops into value labels (dates,
  countries, places without a passage, awards, causes) are left out: they add no retrievable node,
  and the extractor's misses would cut true paths. The target is the chain's last variable, or both
  anchors of a comparison (``target.vars``).
* **SQL schemas** (``sql_schema``): a table found by its document (the question in ``doc`` mode), and
  the tables one foreign key away from such a table, as GraphER links tables.
* **Entities** (any other corpus): the question's spaCy entities by name, then the passages that mention
  them; with none, the question against the passages' documents (the paper's ``doc_search``).

``relevance_text`` is the question without its anchor spans and cue words ("" when nothing is left).
``risk_level`` is set after execution from the best anchor cosine and ``n_cand`` (:func:`risk_level`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from graphlake.kernels.plan.plans import MAX_ANCHORS, MAX_HOPS, MAX_TEXT, Anchor, Hop, Plan, Schema, Target

VALUE_LABELS = frozenset({"date", "country", "place", "award", "cause"})

# surface form -> relation chain (outwards from the entity the phrase attaches to); longest forms first
_CUES: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    sorted(
        {
            "paternal grandfather": ("father", "father"),
            "paternal grandmother": ("father", "mother"),
            "maternal grandfather": ("mother", "father"),
            "maternal grandmother": ("mother", "mother"),
            "father-in-law": ("spouse", "father"),
            "mother-in-law": ("spouse", "mother"),
            "child-in-law": ("child", "spouse"),
            "son-in-law": ("child", "spouse"),
            "daughter-in-law": ("child", "spouse"),
            "stepfather": ("mother", "spouse"),
            "stepmother": ("father", "spouse"),
            "stepchild": ("spouse", "child"),
            "grandchild": ("child", "child"),
            "uncle": ("father", "sibling"),
            "aunt": ("father", "sibling"),
            "sibling": ("sibling",),
            "brother": ("sibling",),
            "sister": ("sibling",),
            "father": ("father",),
            "mother": ("mother",),
            "husband": ("spouse",),
            "wife": ("spouse",),
            "spouse": ("spouse",),
            "child": ("child",),
            "son": ("child",),
            "daughter": ("child",),
            "director": ("director",),
            "directors": ("director",),
            "directed": ("director",),
            "producer": ("producer",),
            "composer": ("composer",),
            "performer": ("performer",),
            "published": ("publisher",),
            "publisher": ("publisher",),
            "founded by": ("founded by",),
            "founder": ("founded by",),
            "keyboardist": ("has part",),
            "member": ("has part",),
        }.items(),
        key=lambda item: -len(item[0]),
    )
)
_PARTICLE = r"(?:of|the|in|on|a|an|and|or|to|for|de|la|le|les|du|da|di|van|von|der|del|y|at|with|from|et|el|al)"
_CAPITAL_WORD = r"(?:[A-Z0-9][\w'’.\-&!?:,;]*|\([^)]*\))"
_RUN = re.compile(rf"(?<![\w'])(?:{_CAPITAL_WORD})(?:\s+(?:{_CAPITAL_WORD}|{_PARTICLE}\b))*")
_KIND = re.compile(r"\b(film|movie|song|album|magazine|band|company)s?\b", re.I)
_KIND_LABEL = {"film": "film", "movie": "film", "song": "song", "album": "album", "magazine": "organization", "band": "organization", "company": "organization"}


def wiki_plan(question: str, schema: Schema, label_of: Callable[[str], str | None]) -> Plan:
    """A plan for a 2Wiki question; ``label_of(span)`` is the label of the SKB node whose name the span is, if any."""
    spans = _spans(question)[:MAX_ANCHORS]  # a plan's bounds: a passage-long question names dozens
    cues = _cue_positions(question)
    kind = _KIND.search(question)
    anchors, hops, targets = [], [], []
    bounds = [0, *(end for _, _, end in spans)]
    for number, (span, start, end) in enumerate(spans, start=1):
        var = f"A{number}"
        named = re.search(r"\b(film|movie|song|album|magazine|band|company)s?\s*$", question[:start], re.I)  # "of film X" says what X is
        label = _KIND_LABEL[named.group(1).lower()] if named else label_of(span) or (_KIND_LABEL[kind.group(1).lower()] if kind else "person")
        # cues since the previous anchor (else the question's opening ones), then those up to the next anchor and after the last
        # a cue followed by "of" ("director of film X") belongs to the anchor after it, any other to the
        # anchor before it ("X's father"); the question's opening cues belong to every anchor without its own
        before = [(p, r) for p, r, prefix in cues if bounds[number - 1] <= p < start and (prefix or number == 1)]
        before = before or [(p, r) for p, r, _ in cues if p < spans[0][1]]
        following = spans[number][1] if number < len(spans) else len(question)
        after = [(p, r) for p, r, prefix in cues if end <= p < following and not prefix]
        after += [(p, r) for p, r, _ in cues if p >= spans[-1][2]] if number < len(spans) else []
        chain = [rel for _, rels in sorted(before, reverse=True) for rel in rels] + [rel for _, rels in sorted(after) for rel in rels]
        domain = sorted({a for a, r, _ in schema.patterns if chain and r == chain[0]})
        if domain and label not in domain:  # the first hop says what the anchor must be ("X's father": a person)
            label = "person" if "person" in domain else domain[0]
        if label not in schema.labels:
            label = sorted(schema.labels)[0]
        anchors.append(Anchor(var=var, text=clipped(span), label=label, match_mode="name"))
        current = var
        for step, rel in enumerate(chain, start=1):
            if rel not in schema.relations or len(hops) == MAX_HOPS:
                break
            to_label = _range(rel, schema)
            if to_label is None or to_label in VALUE_LABELS:
                break
            to_var = f"{var}_{step}"
            hops.append(Hop(**{"from": current, "rel": rel, "to_var": to_var, "to_label": to_label}))
            current = to_var
        targets.append(current if len(spans) == 1 else var)
    comparison = len(spans) > 1
    residue = clipped(_residue(question, [s for s, _, _ in spans]))
    target = Target(var=targets[0] if targets else "T", labels=[], relevance_text=residue, vars=targets if comparison else None)
    return Plan(anchors=anchors, hops=hops, target=target, risk_level="normal")


def _range(relation: str, schema: Schema) -> str | None:
    """The label a relation's hop should reach: of the labels it reaches in this SKB, a passage type before a value type."""
    ends = sorted({b for a, r, b in schema.patterns if r == relation})
    for preferred in ("person", "film", "organization", "song", "album", "other"):
        if preferred in ends:
            return preferred
    return ends[0] if ends else None


def _cue_positions(question: str) -> list[tuple[int, tuple[str, ...], bool]]:
    """(offset, relation chain, whether "of" follows) of every cue phrase, longest phrases first, never overlapping."""
    found, taken = [], []
    lowered = question.lower()
    for phrase, chain in _CUES:
        for match in re.finditer(rf"\b{re.escape(phrase)}\b", lowered):
            if any(match.start() < e and s < match.end() for s, e in taken):
                continue
            taken.append((match.start(), match.end()))
            found.append((match.start(), chain, bool(re.match(r"\s+of\b", lowered[match.end() :]))))
    return found


def _spans(question: str) -> list[tuple[str, int, int]]:
    """The question's entity spans with their offsets: title-cased runs (parentheticals kept), split at
    " or " / " and " outside parentheses, without the question's first word or trailing lowercase words."""
    text = question.rstrip(" ?")
    spans = []
    for match in _RUN.finditer(text):
        run, start = match.group(0), match.start()
        if start == 0:  # "Who", "Which film": the question's first word is not an entity
            first = re.match(r"\S+\s*", run)
            run, start = run[first.end() :], start + first.end()
        for part in re.split(r"\s+(?:or|and)\s+(?![^(]*\))", run):
            part = re.sub(rf"(?:\s+{_PARTICLE})+$", "", part)
            part = re.sub(r"(?:'s|’s)$", "", part).strip(" ,;:-–")
            if part and part[0].isupper() and part.lower() not in _STOP:
                offset = text.find(part, start)
                spans.append((part, offset, offset + len(part)))
    return spans


_STOP = {"which", "who", "what", "when", "where", "why", "how", "are", "is", "was", "were", "do", "does", "did", "the", "both", "film", "song", "album"}


def _residue(question: str, spans: list[str]) -> str:
    text = question
    for span in spans:
        text = text.replace(span, " ")
    text = re.sub(rf"\b(?:{'|'.join(re.escape(p) for p, _ in _CUES)})\b", " ", text, flags=re.I)
    text = re.sub(r"\b(?:which|who|what|when|where|why|how|is|are|was|were|do|does|did|the|of|or|and|both|film|song|album|'s)\b", " ", text, flags=re.I)
    text = " ".join(re.sub(r"[^\w\s]", " ", text).split())
    return text if len(text) >= 3 else ""


def sql_plan(question: str) -> Plan:
    """Tables whose documents match the question, and the tables a foreign key joins to them."""
    return Plan(
        anchors=[
            Anchor(var="T", text=clipped(question), label="table", match_mode="doc"),
            Anchor(var="S", text=clipped(question), label="table", match_mode="doc"),
        ],
        hops=[
            Hop(**{"from": "S", "rel": "HAS_COLUMN", "to_var": "C1", "to_label": "column"}),
            Hop(**{"from": "C1", "rel": "FOREIGN_KEY", "to_var": "C2", "to_label": "column"}),
            Hop(**{"from": "C2", "rel": "HAS_COLUMN", "to_var": "J", "to_label": "table"}),
        ],
        target=Target(var="T", labels=["table"], relevance_text=clipped(question), vars=["T", "J"]),
    )


def entities_plan(question: str, entities: list[tuple[str, str]], schema: Schema) -> Plan:
    """The question's entities (text, spaCy type) by name, then the passages mentioning them; else ``doc_search``."""
    anchors, hops, targets = [], [], []
    for number, (text, kind) in enumerate(entities, start=1):
        label = kind.lower()
        if label not in schema.labels or len(anchors) == MAX_ANCHORS:  # a passage-long question names dozens
            continue
        var = f"A{number}"
        anchors.append(Anchor(var=var, text=clipped(text), label=label, match_mode="name"))
        hops.append(Hop(**{"from": var, "rel": "MENTIONS", "to_var": f"T{number}", "to_label": "passage"}))
        targets.append(f"T{number}")
    residue = clipped(_residue(question, [text for text, _ in entities]))
    if not anchors:
        return Plan(anchors=[Anchor(var="T", text=clipped(question), label="passage", match_mode="doc")], target=Target(var="T", labels=["passage"]))
    return Plan(anchors=anchors, hops=hops, target=Target(var=targets[0], labels=["passage"], relevance_text=residue, vars=targets))


def clipped(text: str) -> str:
    """``text`` within a plan's bound on text, cut at a word where it is longer."""
    if len(text) <= MAX_TEXT:
        return text
    return text[: MAX_TEXT + 1].rsplit(" ", 1)[0][:MAX_TEXT]


RISK_TABLE = (  # (least best-anchor cosine, n_cand range) -> level; the first row that holds wins
    (0.9, (1, 50), "aggressive"),
    (0.8, (1, 500), "normal"),
    (0.6, (1, None), "weak"),
)


def risk_level(best_cosine: float, n_cand: int) -> str:
    """The rules planner's self-report, from what execution found: ``no_trade`` when nothing linked well."""
    for least, (low, high), level in RISK_TABLE:
        if best_cosine >= least and n_cand >= low and (high is None or n_cand <= high):
            return level
    return "no_trade"
