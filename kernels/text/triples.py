"""Knowledge-graph triples (subject, relation, object) from node text, with or without an LLM.

* ``spacy_mentions_and_triples``: offline, deterministic subject-verb-object patterns over spaCy dependency
  parses (``en_core_web_sm``), so the knowledge graph and its logical edges exist on any machine.
* ``llm_entities`` / ``llm_triples``: GraphER's NER prompt (Appendix A.1.1), asked for JSON instead
  of a Python list so it can be schema-constrained, then an open-IE prompt that names those
  entities so the triples are anchored on them (the two-step NER -> OpenIE recipe).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, Field

from graphlake.common.llm import LLMClient
from graphlake.kernels.text.entities import Mention, doc_mentions, normalise, spacy_model, title_aliases

if TYPE_CHECKING:  # spaCy is imported where a pipeline loads: the Definitions load this module
    from spacy.tokens import Doc, Span, Token


HUB_NODES = 25  # an entity more nodes name is a hub: it makes no logical edges (logical_edges)
# Bounds keep a constrained decoder (llama.cpp turns the schema into a grammar) from looping forever.
MAX_NAME = 120
Name = Annotated[str, Field(max_length=MAX_NAME)]


class Entities(BaseModel):
    entities: list[Name] = Field(max_length=48, description="key entities, as written in the text")


class Triple(BaseModel):
    subject: Name
    relation: Name
    object: Name

    def key(self) -> tuple[str, str, str]:
        return (self.subject, self.relation, self.object)


class Triples(BaseModel):
    triples: list[Triple] = Field(max_length=48)


# GraphER Appendix A.1.1, with the output format changed from a Python list to a JSON object.
NER_PROMPT = """Identify the key entities (people, organizations, locations, dates, etc.) from the following paragraph.
Return the result as a JSON object {"entities": [...]} holding a list of strings, with no explanations, only the JSON.

Example:

Text:

"Barack Obama was born in Honolulu, Hawaii, and served as the 44th President of the United States."

Output:

{"entities": ["Barack Obama", "Honolulu", "Hawaii", "United States", "44th President"]}

Text:

{content}

Output:
"""

TRIPLES_PROMPT = """Extract the facts stated in the following paragraph as (subject, relation, object) triples.
Use the named entities listed below as subjects and objects wherever possible; relations are short verb phrases.
Return the result as a JSON object {"triples": [{"subject": ..., "relation": ..., "object": ...}]}, with no explanations.

Example:

Text:

"Barack Obama was born in Honolulu, Hawaii, and served as the 44th President of the United States."

Named entities: ["Barack Obama", "Honolulu", "Hawaii", "United States", "44th President"]

Output:

{"triples": [{"subject": "Barack Obama", "relation": "was born in", "object": "Honolulu"}, {"subject": "Honolulu", "relation": "is located in", "object": "Hawaii"}, {"subject": "Barack Obama", "relation": "served as", "object": "44th President"}]}

Text:

{content}

Named entities: {entities}

Output:
"""


def llm_entities(client: LLMClient, text: str) -> list[str]:
    answer = client.structured(NER_PROMPT.replace("{content}", text), Entities)
    return _unique(e.strip() for e in answer.entities if e.strip())


def llm_triples(client: LLMClient, text: str, entities: list[str] | None = None) -> list[Triple]:
    """Triples of ``text``; runs the NER prompt first when ``entities`` is not given."""
    if entities is None:
        entities = llm_entities(client, text)
    prompt = TRIPLES_PROMPT.replace("{entities}", json.dumps(entities, ensure_ascii=False)).replace("{content}", text)
    answer = client.structured(prompt, Triples)
    cleaned = [Triple(subject=t.subject.strip(), relation=t.relation.strip(), object=t.object.strip()) for t in answer.triples]
    return _unique_triples(t for t in cleaned if t.subject and t.relation and t.object and t.subject != t.object)


def spacy_source() -> str:
    meta = spacy_model(ner_only=False).meta
    return f"{meta['lang']}_{meta['name']}-{meta['version']}"


def spacy_mentions_and_triples(texts: list[str], n_process: int = 1, batch_size: int = 256) -> list[tuple[list[Mention], list[Triple]]]:
    """Each text's NER mentions and its subject-verb-object triples from one pass of the whole pipeline:
    the NER runs once, and finds what the NER pipe alone finds (``spacy_entities``).

    Triples' arguments are named entities or noun chunks. Patterns: ``S verb O`` (relation = verb
    lemma), ``S verb prep O`` (lemma + preposition), passives ``O was verbed by S`` (turned active) and
    ``S was verbed prep O`` ("be verbed prep"), negation kept as "not", coordinated subjects/objects
    and verbs sharing a subject expanded.
    """
    return [(doc_mentions(doc), _doc_triples(doc)) for doc in spacy_model(ner_only=False).pipe(texts, n_process=n_process, batch_size=batch_size)]


_SUBJECT_DEPS = {"nsubj", "nsubjpass"}
_OBJECT_DEPS = {"dobj", "attr", "oprd", "dative"}


def _doc_triples(doc: Doc) -> list[Triple]:
    spans = _argument_spans(doc)
    found: list[Triple] = []
    for verb in doc:
        subjects = _subjects(verb) if verb.pos_ in ("VERB", "AUX") else []
        if not subjects:
            continue
        passive = any(s.dep_ == "nsubjpass" for s in subjects)
        negation = "not " if any(c.dep_ == "neg" for c in verb.children) else ""
        lemma = verb.lemma_.lower()
        pairs: list[tuple[Token, str, Token]] = []
        for child in verb.children:
            if child.dep_ in _OBJECT_DEPS:
                pairs += [(s, lemma, o) for s in subjects for o in _conjuncts(child)]
            elif child.dep_ == "agent" and passive:
                pairs += [(a, lemma, s) for a in _pobjs(child) for s in subjects]
            elif child.dep_ == "prep":
                relation = f"be {verb.text.lower()} {child.text.lower()}" if passive else f"{lemma} {child.text.lower()}"
                pairs += [(s, relation, o) for s in subjects for o in _pobjs(child)]
        for subject, relation, obj in pairs:
            head, tail = spans.get(subject.i), spans.get(obj.i)
            if head and tail and head != tail:
                found.append(Triple(subject=head, relation=negation + relation, object=tail))
    return _unique_triples(found)


def _subjects(verb: Token) -> list[Token]:
    """The verb's own subjects, or those of the verb it is coordinated with ('X did A and wrote B')."""
    own = [s for c in verb.children if c.dep_ in _SUBJECT_DEPS for s in _conjuncts(c)]
    if own or verb.dep_ != "conj" or verb.head.pos_ not in ("VERB", "AUX"):
        return own
    return _subjects(verb.head)


def _conjuncts(token: Token) -> list[Token]:
    return [token, *token.conjuncts]


def _pobjs(preposition: Token) -> list[Token]:
    return [o for c in preposition.children if c.dep_ == "pobj" for o in _conjuncts(c)]


def _argument_spans(doc: Doc) -> dict[int, str]:
    """Token index -> the named entity, else the noun chunk (without determiners), it belongs to."""
    spans: dict[int, str] = {}
    for span in [*doc.noun_chunks, *doc.ents]:  # entities win over the noun chunks around them
        text = _strip_determiners(span)
        if 0 < len(text) <= MAX_NAME:
            spans.update({i: text for i in range(span.start, span.end)})
    return spans


def _strip_determiners(span: Span) -> str:
    """'the camera systems' -> 'camera systems'; a bare pronoun ('it', 'they') -> ''."""
    tokens = list(span)
    while tokens and (tokens[0].pos_ in ("DET", "PRON") or tokens[0].dep_ == "poss"):
        tokens = tokens[1:]
    return span.doc[tokens[0].i : span.end].text if tokens else ""


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _unique_triples(triples: Iterable[Triple]) -> list[Triple]:
    return list({t.key(): t for t in triples}.values())


def normalize_entity(text: str) -> str:
    """Match 'The  Vesk Reef' with 'vesk reef': casefold, single spaces, no leading article."""
    words = text.casefold().split()
    if words and words[0] in ("the", "a", "an"):
        words = words[1:]
    return " ".join(words)


def logical_edges(rows: Iterable[tuple[str, str, str, str]]) -> list[tuple[str, str, int]]:
    """Allan-Poe §3.4 logical edges from (node_id, subject, relation, object) rows.

    V(X) is the set of entities node X's own triples name (subjects and objects), the knowledge
    graph G is every triple of the corpus, and node X's logical triplets are
    {(s, r, t) in G | s in V(X), t not in V(X)}: each links X to every other node Y with t in V(Y).
    Relations keep their direction (s -> t gives X -> Y). The weight of X -> Y is the number of
    distinct triplets that link them. Returns (src, dst, weight) sorted by src, dst.

    A hub (an entity more than ``HUB_NODES`` nodes name: "film", "patients", "results") links no
    nodes: a triple between two hubs would link every node of one to every node of the other, and
    the edges grew as the square of the corpus (7.4 million at 11,374 nodes). Capped, they grow with
    it. The hybrid index's logical expansion skips hubs alike (``kernels/hybrid/graph_index.py``).
    """
    entities_of: dict[str, set[str]] = {}
    graph: set[tuple[str, str, str]] = set()
    for node_id, subject, relation, obj in rows:
        s, t = normalize_entity(subject), normalize_entity(obj)
        if s and t and s != t:
            entities_of.setdefault(node_id, set()).update((s, t))
            graph.add((s, " ".join(relation.casefold().split()), t))
    nodes_of: dict[str, set[str]] = {}
    for node_id, entities in entities_of.items():
        for entity in entities:
            nodes_of.setdefault(entity, set()).add(node_id)
    weights: dict[tuple[str, str], int] = {}
    for s, _, t in graph:
        if len(nodes_of[s]) > HUB_NODES or len(nodes_of[t]) > HUB_NODES:
            continue
        for x in nodes_of[s]:
            if t in entities_of[x]:
                continue
            for y in nodes_of[t]:
                weights[(x, y)] = weights.get((x, y), 0) + 1
    return [(src, dst, weight) for (src, dst), weight in sorted(weights.items())]


def evidence_triples(evidences: Iterable[list], titles: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """2Wiki's gold ``evidences`` ([subject, relation, object] per question) as (node_id, subject, relation,
    object) rows, on every node whose title names the subject or the object (``titles``: node id -> title;
    compared after ``normalise``, aliases as ``title_aliases``). A triple that names no node's title is dropped."""
    aliases = title_aliases(set(titles.values()))
    by_title: dict[str, list[str]] = {}
    for node_id, title in titles.items():
        by_title.setdefault(normalise(title), []).append(node_id)
    rows = set()
    for triple in evidences:
        if len(triple) != 3 or not all(isinstance(part, str) and part.strip() for part in triple):
            continue
        subject, relation, obj = (part.strip() for part in triple)
        for end in (subject, obj):
            key = normalise(end)
            rows.update((node_id, subject, relation, obj) for node_id in by_title.get(aliases.get(key, key), ()))
    return sorted(rows)
