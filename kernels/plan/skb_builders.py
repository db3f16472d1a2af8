"""Semi-structured knowledge bases (SKBs) the lake extracts itself, GRASP's substitutes for STaRK.

An SKB is typed nodes and typed relations. A node that is a retrievable unit (a table document, a
passage) carries its ``node_id`` in the ``nodes`` table and uses it as its SKB id; other nodes (a
database, a column, a date, a country) are SKB-only, with ids ``<label>:<key>``. Sources:

* ``sql_schema`` (Spider, BIRD): database, table, column; HAS_TABLE, HAS_COLUMN, FOREIGN_KEY. Read from
  the table documents' metadata and the ``foreign_keys`` table; no question is read.
* ``wiki_rules`` (2Wiki): each passage typed (film, person, song, album, place, organization, other)
  and linked by Wikidata-style relations found in its first sentences by patterns ("directed by Y",
  "(born DATE in PLACE)", "was an American ...", "son of Y", "married Y"...). An object that names a
  passage's title is that passage, else a value node of the relation's range. No question is read.
* ``wiki_evidence`` (2Wiki, an **oracle**): the same passage nodes, linked by the gold ``evidences``
  triples of the questions: an upper bound on what extraction could give, never a headline result.
* ``entities`` (any other corpus): passages, the spaCy entities they mention (labelled by entity type)
  and citations: MENTIONS and CITES.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from graphlake.kernels.text.entities import normalise, title_aliases

ORACLE_SOURCES = frozenset({"wiki_evidence"})
PASSAGE_LABELS = ("film", "person", "song", "album", "place", "organization", "other")


@dataclass
class SKB:
    """An SKB being built: nodes by id (the first description of an id wins) and edges with provenance."""

    nodes: dict[str, dict] = field(default_factory=dict)
    edges: list[tuple[str, str, str, str]] = field(default_factory=list)

    def node(self, skb_id: str, label: str, name: str, text: str = "", node_id: str | None = None, metadata: dict | None = None) -> str:
        self.nodes.setdefault(skb_id, {"skb_id": skb_id, "label": label, "name": name, "text": text or name, "node_id": node_id, "metadata": json.dumps(metadata) if metadata else None})
        return skb_id

    def value(self, label: str, name: str) -> str:
        """A node for a value with no passage (a date, a country): one per label and normalised name."""
        return self.node(f"{label}:{normalise(name) or name}", label, name)

    def edge(self, src: str, relation: str, dst: str, provenance: str) -> None:
        self.edges.append((src, relation, dst, provenance))

    def tables(self) -> tuple[pa.Table, pa.Table]:
        """``skb_nodes`` and ``skb_edges`` rows (partition columns aside); an edge is kept once per provenance."""
        nodes = sorted(self.nodes.values(), key=lambda n: n["skb_id"])
        edges = sorted(set(self.edges))
        node_table = pa.table({k: pa.array([n[k] for n in nodes], pa.string()) for k in ("skb_id", "label", "name", "text", "node_id", "metadata")})
        edge_table = pa.table({k: pa.array([e[i] for e in edges], pa.string()) for i, k in enumerate(("src", "relation", "dst", "provenance"))})
        return node_table, edge_table


# ---------------------------------------------------------------- sql_schema


def sql_schema(documents: pa.Table, nodes: pa.Table, foreign_keys: pa.Table) -> SKB:
    """Spider/BIRD schemas as an SKB: one HAS_COLUMN per schema column, one FOREIGN_KEY per ``foreign_keys`` row."""
    skb = SKB()
    node_of = _first_node(nodes)
    column_of: dict[tuple[str, str], str] = {}
    for doc in documents.to_pylist():
        meta = json.loads(doc["metadata"] or "{}")
        if "db_id" not in meta:
            raise ValueError(f"document {doc['doc_id']!r} has no db_id in its metadata: sql_schema needs a spider or bird corpus")
        db, table = meta["db_id"], meta["table"]
        database = skb.node(f"database:{db}", "database", db, f"database {db}")
        table_id = skb.node(node_of[doc["doc_id"]], "table", table, doc["text"], node_of[doc["doc_id"]], {"db_id": db})
        skb.edge(database, "HAS_TABLE", table_id, f"documents:{doc['doc_id']}")
        types = meta.get("column_types") or [None] * len(meta["columns"])
        for name, kind in zip(meta["columns"], types, strict=True):
            key = "primary key" if name in meta.get("primary_key", []) else ""
            described = ", ".join(part for part in (kind, key) if part)
            text = f"column {name}{f' ({described})' if described else ''} of table {table} in database {db}"
            column = skb.node(f"column:{doc['doc_id']}.{name}", "column", name, text)
            column_of[(doc["doc_id"], name.lower())] = column
            skb.edge(table_id, "HAS_COLUMN", column, f"documents:{doc['doc_id']}")
    for fk in foreign_keys.to_pylist():
        src = column_of[(fk["src_doc_id"], fk["src_column"].lower())]
        dst = column_of[(fk["dst_doc_id"], fk["dst_column"].lower())]
        skb.edge(src, "FOREIGN_KEY", dst, f"foreign_keys:{fk['src_doc_id']}#{fk['position']}")
    return skb


def _first_node(nodes: pa.Table) -> dict[str, str]:
    """The first node of each document (benchmark documents are one node each)."""
    first: dict[str, str] = {}
    for doc_id, node_id in zip(nodes.column("doc_id").to_pylist(), nodes.column("node_id").to_pylist(), strict=True):
        first.setdefault(doc_id, node_id)
    return first


# ---------------------------------------------------------------- 2Wiki: passages, typing, linking

RELATION_RANGE = {
    "director": "person",
    "producer": "person",
    "composer": "person",
    "performer": "person",
    "father": "person",
    "mother": "person",
    "spouse": "person",
    "child": "person",
    "sibling": "person",
    "founded by": "person",
    "date of birth": "date",
    "date of death": "date",
    "publication date": "date",
    "inception": "date",
    "place of birth": "place",
    "place of death": "place",
    "country of citizenship": "country",
    "country": "country",
    "country of origin": "country",
    "educated at": "organization",
    "employer": "organization",
    "publisher": "organization",
    "award received": "award",
    "cause of death": "cause",
    "has part": "person",
}
WIKI_RELATIONS = tuple(RELATION_RANGE)


class TitleLinker:
    """Names to passages by title: normalised title, or its form without a parenthetical when unambiguous."""

    def __init__(self, titles: Mapping[str, str]) -> None:
        self.aliases = title_aliases(titles.values())
        self.by_title: dict[str, str] = {}
        for skb_id, title in titles.items():
            self.by_title.setdefault(normalise(title), skb_id)

    def __call__(self, name: str) -> str | None:
        key = normalise(name)
        return self.by_title.get(self.aliases.get(key, key))


def passages(documents: pa.Table, nodes: pa.Table) -> list[tuple[str, str, str]]:
    """(skb id = node id, title, text) of each passage: 2Wiki passages are one node each."""
    titles = dict(zip(documents.column("doc_id").to_pylist(), documents.column("title").to_pylist(), strict=True))
    return [
        (node_id, titles[doc_id] or "", text) for node_id, doc_id, text in zip(nodes.column("node_id").to_pylist(), nodes.column("doc_id").to_pylist(), nodes.column("text").to_pylist(), strict=True)
    ]


_LEAD = re.compile(r"\b(?:is|was|are|were)\s+(?:an?|the)\s+(?P<kind>[^.;]{0,120})", re.I)
_KINDS = (
    ("film", re.compile(r"\b(?:film|movie|documentary|short|serial|cartoon|animated feature)\b", re.I)),
    ("album", re.compile(r"\b(?:album|EP|mixtape|soundtrack)\b", re.I)),
    ("song", re.compile(r"\b(?:song|single|ballad|anthem|hymn|composition)\b", re.I)),
    (
        "place",
        re.compile(
            r"\b(?:village|town|city|municipality|commune|county|district|river|lake|island|mountain|region|province|parish|suburb|neighbourhood|neighborhood|locality|settlement|community|state|country|capital|creek|hamlet)\b",
            re.I,
        ),
    ),
    (
        "organization",
        re.compile(
            r"\b(?:company|band|group|university|college|school|club|magazine|newspaper|organization|organisation|label|party|corporation|studio|team|publisher|network|channel|agency|institute|academy|museum|league|association)\b",
            re.I,
        ),
    ),
)
_ROLE = re.compile(r"(?:director|producer|actor|actress|writer|composer|critic|editor|maker|executive|singer|songwriter|player|manager|distributor|owner|founder|member)s?\b", re.I)
_PERSON_CUES = re.compile(
    r"\(\s*(?:born|c\.|b\.|died|d\.|\d{1,2}\s+\w+\s+\d{3,4}|\w+\s+\d{1,2},\s+\d{3,4}|\d{3,4})|\b(?:actor|actress|director|singer|writer|politician|player|footballer|king|queen|prince|princess|duke|duchess|count|countess|earl|baron|lord|lady|emperor|empress|bishop|composer|musician|painter|poet|author|novelist|artist|producer|screenwriter|businessman|journalist|son|daughter|wife|husband|consort|sultan|noble|nobleman|noblewoman|scientist|athlete|cricketer|general|officer|monk|saint|priest|philosopher|professor|engineer|architect|dancer|model|comedian|rapper|guitarist|pianist|drummer|cyclist|swimmer|boxer|wrestler|coach|manager|judge|lawyer|diplomat|economist|historian|mathematician|physicist|chemist|biologist|physician|surgeon)\b",
    re.I,
)


def passage_label(title: str, text: str) -> str:
    """A passage's type from its lead sentence: what it "is a ..." first, a person's dates or role next."""
    lead = " ".join(_sentences(text)[:2])
    match = _LEAD.search(lead)
    head = match.group("kind") if match else ""
    for label, pattern in _KINDS:
        kind = pattern.search(head)
        if kind:
            # "an American film director" is a person: a role noun right after the kind word
            return "person" if label != "place" and _ROLE.match(head[kind.end() :].lstrip()) else label
    if re.search(r"\bdirected\s+by\b", lead):
        return "film"
    if _PERSON_CUES.search(lead[:200]):
        return "person"
    return "other"


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"(])", text) if s]


# ---------------------------------------------------------------- wiki_rules: relation patterns

_DATE = r"(?P<obj>(?:\d{1,2}\s+[A-Z][a-z]+\s+\d{3,4})|(?:[A-Z][a-z]+\s+\d{1,2},\s*\d{3,4})|(?:[A-Z][a-z]+\s+\d{3,4})|(?:\d{3,4}))"
_YEAR = r"(?P<obj>\d{4})"
_ANY = r"(?P<obj>)"  # a name follows: read by _names_after
_MEDIA = ("film", "song", "album")
# (relation, the subject labels it applies to, the cue; a cue ending in _ANY is followed by a name)
_PATTERNS: tuple[tuple[str, tuple[str, ...], re.Pattern], ...] = tuple(
    (relation, labels, re.compile(pattern))
    for relation, labels, pattern in (
        ("director", ("film",), rf"\b(?:directed|co-directed)\s+(?:\w+\s+){{0,3}}?by\b{_ANY}"),
        ("producer", _MEDIA, rf"\bproduced\s+(?:\w+\s+){{0,2}}?by\b{_ANY}"),
        ("composer", _MEDIA, rf"\b(?:music|score|soundtrack)\s+(?:\w+\s+){{0,3}}?by\b{_ANY}"),
        ("composer", _MEDIA, rf"\bcomposed\s+(?:\w+\s+){{0,2}}?by\b{_ANY}"),
        ("performer", ("song", "album"), rf"\b(?:performed|recorded|sung|released|written|created)\s+(?:\w+\s+){{0,3}}?by\b{_ANY}"),
        ("performer", ("song", "album"), rf"\b(?:song|single|album|EP|LP)\s+(?:\w+\s+){{0,2}}?by\b{_ANY}"),
        ("publisher", ("organization", "other", *_MEDIA), rf"\bpublished\s+(?:\w+\s+){{0,2}}?by\b{_ANY}"),
        ("founded by", ("organization", "other"), rf"\bfounded\s+(?:in\s+\d{{4}}\s+)?by\b{_ANY}"),
        ("father", ("person",), rf"\b(?:son|daughter|child|heir|eldest|youngest)\s+(?:\w+\s+){{0,2}}?of\b{_ANY}"),
        ("father", ("person",), rf"\b(?:his|her)\s+father,?{_ANY}"),
        ("father", ("person",), rf"\bborn\s+(?:[^.;]{{0,60}}?\s)?to\b{_ANY}"),
        ("mother", ("person",), rf"\b(?:his|her)\s+mother,?{_ANY}"),
        ("spouse", ("person",), rf"\b(?:married|wife\s+of|husband\s+of|consort\s+of|widow\s+of|widower\s+of|spouse\s+of|(?:his|her)\s+(?:wife|husband|spouse))\b(?:\s+to)?{_ANY}"),
        ("child", ("person",), rf"\b(?:father|mother)\s+of\b{_ANY}"),
        ("educated at", ("person",), rf"\b(?:educated\s+at|graduated\s+from|studied\s+(?:\w+\s+)?at|attended)\b{_ANY}"),
        ("employer", ("person",), rf"\b(?:worked\s+(?:for|at)|employed\s+by|professor\s+at|joined)\b{_ANY}"),
        ("award received", ("person", *_MEDIA), rf"\b(?:won|received|awarded|nominated\s+for)\b{_ANY}"),
        ("place of birth", ("person",), rf"\bborn\s+(?:on\s+)?(?:[^()]{{0,30}}?\s)?in\b{_ANY}"),
        ("place of death", ("person",), rf"\bdied\s+(?:on\s+)?(?:[^()]{{0,30}}?\s)?in\b{_ANY}"),
        ("date of birth", ("person",), rf"\(\s*(?:born\s+)?(?:[^();]{{0,40}};\s*)?{_DATE}\s*(?:[–\-]|in\b|\)|;|,)"),
        ("date of birth", ("person",), rf"\bborn\s+(?:on\s+)?{_DATE}"),
        ("date of death", ("person",), rf"[–\-]\s*(?:died\s+)?{_DATE}\s*\)"),
        ("date of death", ("person",), rf"\bdied\s+(?:on\s+)?{_DATE}"),
        ("publication date", _MEDIA, rf"\b(?:is|was)\s+an?\s+{_YEAR}\b"),
        ("publication date", _MEDIA, rf"\breleased\s+(?:\w+\s+){{0,3}}?in\s+(?:[A-Z][a-z]+\s+)?{_YEAR}"),
        ("inception", ("organization", "other"), rf"\b(?:founded|established|formed|launched|created)\s+(?:\w+\s+){{0,3}}?in\s+(?:[A-Z][a-z]+\s+)?{_YEAR}"),
        ("cause of death", ("person",), r"\bdied\s+(?:\w+\s+){0,4}?(?:of|from)\s+(?P<obj>[a-z][a-z ]{2,40}?)(?=[.,;]|\s+(?:in|at|on)\b)"),
    )
)
_PARTICLES = "de|da|di|du|van|von|der|den|del|la|le|of|the|y|al|bin|ibn|el"
_WORD = rf"(?:[A-Z0-9][\w'’\-&]*\.?|{_PARTICLES})"
_RUN = re.compile(rf"{_WORD}(?:\s+{_WORD})*")
_LOWER_EDGE = re.compile(rf"^(?:(?:{_PARTICLES})\s+)+|(?:\s+(?:{_PARTICLES}))+$")


def _names_after(text: str, start: int) -> list[str]:
    """Capitalised runs in the words after a cue, up to the clause's end: the candidates for its object."""
    window = re.split(r"[;()\[\]\n]|,\s+(?:and|but|who|which|where)\b|(?<=\w\w)\.\s+(?=[A-Z])", text[start : start + 160])[0]
    names = []
    for match in _RUN.finditer(window):
        name = _LOWER_EDGE.sub("", match.group(0)).strip(" .,'’")
        name = re.sub(r"'s?$", "", name)
        if name and name[0].isupper() and name.lower() not in ("the", "he", "she", "it", "his", "her"):
            names.append(name)
        if len(names) == 4:
            break
    return names


DEMONYMS = {
    "american": "United States",
    "british": "United Kingdom",
    "english": "United Kingdom",
    "scottish": "United Kingdom",
    "welsh": "United Kingdom",
    "irish": "Ireland",
    "french": "France",
    "german": "Germany",
    "italian": "Italy",
    "spanish": "Spain",
    "portuguese": "Portugal",
    "dutch": "Netherlands",
    "belgian": "Belgium",
    "swiss": "Switzerland",
    "austrian": "Austria",
    "swedish": "Sweden",
    "norwegian": "Norway",
    "danish": "Denmark",
    "finnish": "Finland",
    "icelandic": "Iceland",
    "russian": "Russia",
    "soviet": "Soviet Union",
    "ukrainian": "Ukraine",
    "polish": "Poland",
    "czech": "Czech Republic",
    "czechoslovak": "Czechoslovakia",
    "slovak": "Slovakia",
    "hungarian": "Hungary",
    "romanian": "Romania",
    "bulgarian": "Bulgaria",
    "serbian": "Serbia",
    "croatian": "Croatia",
    "slovenian": "Slovenia",
    "bosnian": "Bosnia and Herzegovina",
    "yugoslav": "Yugoslavia",
    "greek": "Greece",
    "turkish": "Turkey",
    "ottoman": "Ottoman Empire",
    "armenian": "Armenia",
    "georgian": "Georgia",
    "azerbaijani": "Azerbaijan",
    "iranian": "Iran",
    "persian": "Iran",
    "iraqi": "Iraq",
    "israeli": "Israel",
    "egyptian": "Egypt",
    "moroccan": "Morocco",
    "algerian": "Algeria",
    "tunisian": "Tunisia",
    "nigerian": "Nigeria",
    "ghanaian": "Ghana",
    "kenyan": "Kenya",
    "ethiopian": "Ethiopia",
    "south african": "South Africa",
    "indian": "India",
    "pakistani": "Pakistan",
    "bangladeshi": "Bangladesh",
    "sri lankan": "Sri Lanka",
    "nepali": "Nepal",
    "chinese": "China",
    "taiwanese": "Taiwan",
    "japanese": "Japan",
    "korean": "South Korea",
    "south korean": "South Korea",
    "north korean": "North Korea",
    "vietnamese": "Vietnam",
    "thai": "Thailand",
    "filipino": "Philippines",
    "indonesian": "Indonesia",
    "malaysian": "Malaysia",
    "singaporean": "Singapore",
    "australian": "Australia",
    "new zealand": "New Zealand",
    "canadian": "Canada",
    "mexican": "Mexico",
    "brazilian": "Brazil",
    "argentine": "Argentina",
    "argentinian": "Argentina",
    "chilean": "Chile",
    "colombian": "Colombia",
    "peruvian": "Peru",
    "venezuelan": "Venezuela",
    "cuban": "Cuba",
    "uruguayan": "Uruguay",
    "estonian": "Estonia",
    "latvian": "Latvia",
    "lithuanian": "Lithuania",
    "belarusian": "Belarus",
    "albanian": "Albania",
    "macedonian": "North Macedonia",
    "luxembourgish": "Luxembourg",
    "afghan": "Afghanistan",
    "saudi": "Saudi Arabia",
    "lebanese": "Lebanon",
    "syrian": "Syria",
    "jordanian": "Jordan",
    "hong kong": "Hong Kong",
    "bengali": "India",
    "tamil": "India",
    "telugu": "India",
    "malayalam": "India",
    "kannada": "India",
    "hindi": "India",
    "marathi": "India",
    "punjabi": "India",
    "bollywood": "India",
}
_DEMONYM = re.compile(
    r"\b(?:is|was)\s+(?:an?|the)\s+(?:(?:former|retired|\d{4}|\d{4}s|[a-z]+-born)\s+)*(?P<demonym>" + "|".join(sorted((re.escape(d.title()) for d in DEMONYMS), key=len, reverse=True)) + r")\b"
)


def country_name(value: str) -> str:
    """A demonym or country spelling as one country name ('American', 'US', 'United States of America' -> 'United States')."""
    key = " ".join(value.lower().replace(".", "").split())
    aliases = {
        "us": "United States",
        "usa": "United States",
        "united states of america": "United States",
        "america": "United States",
        "uk": "United Kingdom",
        "england": "United Kingdom",
        "great britain": "United Kingdom",
    }
    return DEMONYMS.get(key) or aliases.get(key) or value.strip()


_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"), 1)}


def date_key(value: str) -> str:
    """A date as ISO text where it parses ('2 November 1932', 'November 2, 1932' -> '1932-11-02'; '1974' -> '1974')."""
    text = value.strip().lower().replace(",", " ")
    words = text.split()
    year = next((w for w in reversed(words) if re.fullmatch(r"\d{3,4}", w)), None)
    month = next((_MONTHS[w] for w in words if w in _MONTHS), None)
    day = next((int(w) for w in words if re.fullmatch(r"\d{1,2}", w)), None)
    if year is None:
        return value.strip()
    if month and day:
        return f"{int(year):04d}-{month:02d}-{day:02d}"
    return f"{int(year):04d}-{month:02d}" if month else f"{int(year):04d}"


def value_node(skb: SKB, relation: str, value: str, linker: TitleLinker) -> str:
    """An object as its passage when a title names it, else a value node of the relation's range."""
    linked = linker(value)
    if linked is not None:
        return linked
    label = RELATION_RANGE.get(relation, "other")
    if label == "date":
        key = date_key(value)
        return skb.node(f"date:{key}", "date", key)
    if label == "country":
        return skb.value("country", country_name(value))
    return skb.value(label, value)


def wiki_rules(documents: pa.Table, nodes: pa.Table) -> SKB:
    """2Wiki passages typed and linked by relations found in their first two sentences; no question read."""
    skb, found = _passage_nodes(documents, nodes)
    linker = TitleLinker({skb_id: title for skb_id, title, _ in found})
    gender = {skb_id: _gender(text) for skb_id, _, text in found}
    for skb_id, title, text in found:
        label = skb.nodes[skb_id]["label"]
        lead = " ".join(_sentences(text)[:2])
        for relation, labels, pattern in _PATTERNS:
            if label not in labels:
                continue
            for match in pattern.finditer(lead):
                obj = _object(match, lead, linker)
                if not obj or normalise(obj) == normalise(title):
                    continue
                target = value_node(skb, relation, obj, linker)
                if target == skb_id:
                    continue
                named = relation
                if relation == "father" and gender.get(target) == "female":
                    named = "mother"
                skb.edge(skb_id, named, target, f"{skb_id}:{match.start()}")
        if label == "person":
            demonym = _DEMONYM.search(lead)
            if demonym:
                skb.edge(skb_id, "country of citizenship", skb.value("country", country_name(demonym.group("demonym"))), f"{skb_id}:demonym")
        elif label in ("film", "song", "album"):
            demonym = _DEMONYM.search(lead)
            if demonym:
                skb.edge(skb_id, "country of origin", skb.value("country", country_name(demonym.group("demonym"))), f"{skb_id}:demonym")
        elif label in ("place", "organization"):
            country = re.search(r"\bin\s+(?:[\w ,\-]+,\s*)?(?P<c>[A-Z][\w ]+?)(?:[.,;]|$)", lead)
            if country and country_name(country.group("c")) in set(DEMONYMS.values()):
                skb.edge(skb_id, "country", skb.value("country", country_name(country.group("c"))), f"{skb_id}:located")
    return skb


def _object(match: re.Match, lead: str, linker: TitleLinker) -> str | None:
    """The cue's object: the matched date or text, or of the names after it the first that is a passage's title (else the first)."""
    if match.group("obj"):
        return match.group("obj").strip()
    names = _names_after(lead, match.end())
    return next((name for name in names if linker(name) is not None), names[0] if names else None)


def _gender(text: str) -> str | None:
    words = re.findall(r"\b(?:he|his|him|she|her|hers)\b", text.lower())
    female = sum(w in ("she", "her", "hers") for w in words)
    male = len(words) - female
    return None if female == male else ("female" if female > male else "male")


def _passage_nodes(documents: pa.Table, nodes: pa.Table) -> tuple[SKB, list[tuple[str, str, str]]]:
    skb = SKB()
    found = passages(documents, nodes)
    for skb_id, title, text in found:
        skb.node(skb_id, passage_label(title, text), title, text, skb_id)
    return skb, found


def wiki_evidence(documents: pa.Table, nodes: pa.Table, evidences: Iterable[tuple[str, list]]) -> SKB:
    """The oracle: the same passage nodes linked by the questions' gold ``evidences`` (query id, triples)."""
    skb, found = _passage_nodes(documents, nodes)
    linker = TitleLinker({skb_id: title for skb_id, title, _ in found})
    for query_id, triples in evidences:
        for number, triple in enumerate(triples):
            if len(triple) != 3 or not all(isinstance(part, str) and part.strip() for part in triple):
                continue
            subject, relation, obj = (part.strip() for part in triple)
            src = linker(subject) or skb.value(_subject_label(relation), subject)
            skb.edge(src, relation, value_node(skb, relation, obj, linker), f"query:{query_id}#{number}")
    return skb


def _subject_label(relation: str) -> str:
    if relation in ("director", "producer", "composer", "performer", "publication date", "country of origin"):
        return "film"
    if relation in ("inception", "founded by", "publisher", "country"):
        return "organization"
    return "person"


def coverage(extracted: SKB, oracle_triples: Iterable[tuple[str, str, str]], linker: TitleLinker) -> dict[str, dict[str, float]]:
    """Per relation: the share of gold (subject, relation, object) triples whose linked edge the extracted SKB holds (either direction)."""
    held = {(s, r, d) for s, r, d, _ in extracted.edges} | {(d, r, s) for s, r, d, _ in extracted.edges}
    probe = SKB()
    per: dict[str, list[int]] = {}
    for subject, relation, obj in oracle_triples:
        src = linker(subject)
        if src is None:
            continue
        dst = value_node(probe, relation, obj, linker)
        per.setdefault(relation, []).append(int((src, relation, dst) in held))
    return {r: {"triples": len(v), "recovered": sum(v), "share": round(sum(v) / len(v), 4)} for r, v in sorted(per.items())}


# ---------------------------------------------------------------- any corpus: entities


def entities_skb(documents: pa.Table, nodes: pa.Table, entities: pa.Table, mentions: pa.Table, citations: pa.Table | None) -> SKB:
    """Passages (node ids), the spaCy entities they mention, and their citations."""
    skb = SKB()
    titles = dict(zip(documents.column("doc_id").to_pylist(), documents.column("title").to_pylist(), strict=True))
    for node_id, doc_id, text in zip(nodes.column("node_id").to_pylist(), nodes.column("doc_id").to_pylist(), nodes.column("text").to_pylist(), strict=True):
        skb.node(node_id, "passage", titles.get(doc_id) or doc_id, text, node_id)
    for row in entities.to_pylist():
        skb.node(f"entity:{row['entity_id']}", (row["type"] or "entity").lower(), row["name"], row["name"])
    for row in mentions.to_pylist():
        skb.edge(row["node_id"], "MENTIONS", f"entity:{row['entity_id']}", f"mentions:{row['extractor']}")
    if citations is not None:
        for src, dst in zip(citations.column("src").to_pylist(), citations.column("dst").to_pylist(), strict=True):
            skb.edge(src, "CITES", dst, "edges:citation")
    return skb
