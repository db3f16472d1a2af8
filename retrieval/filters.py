"""Metadata filters: a small expression language over a document's metadata, one form for Python and
JSON and one for a command line, both parsed into the same validated tree.

JSON (the API, the server)::

    {"field": "year", "gte": 2015, "lt": 2020}
    {"and": [{"field": "lang", "eq": "en"}, {"not": {"field": "authors", "in": ["A. Writer"]}}]}

Text (``graphlake query --filter``, and any API that takes a string)::

    year >= 2015 and year < 2020 and (lang = "en" or lang in ["de", "fr"]) and not draft = true

    year exists and title prefix "Design" and abstract contains "sled"

A condition names a ``field``: a key of the document's metadata (``a.b`` reaches into an object),
or ``doc_id`` / ``title``. Its operators are ``eq``, ``ne``, ``in``, ``gt``, ``gte``, ``lt``,
``lte``, ``exists`` (true: the document has the field; false: it has not, or only nulls and empty
lists), ``prefix`` and ``contains`` (a string value starts with / holds the text, case as given);
several in one condition must all hold. A list-valued field matches when one of its elements does
(``authors = "X"``: X is among the authors). A document without the field matches no condition on it
but ``exists: false`` (``ne`` included, as SQL's NULL), and ``not`` of such a condition matches it.
Numbers compare with numbers, strings with strings (ISO dates compare as dates do), booleans only
equal booleans; a value of a type the field never holds is refused (``metadata.py`` checks it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, NoReturn, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError, model_validator

from graphlake.common.unicode_checks import same_id

MAX_FILTER_CHARS = 4_000
MAX_VALUES = 1_000  # in one ``in`` list
MAX_DEPTH = 32  # groups within groups
MAX_TERMS = 100  # parts of one and / or
MAX_CONDITIONS = 1_000  # conditions in a whole filter
EXACT_INTEGERS = 2**53  # integers beyond this are not exact in JSON's numbers or in a double
BUILT_IN = ("doc_id", "title")  # the documents' own columns, filterable beside their metadata


def _exact(value: Any) -> Any:
    """Refuse an integer a double cannot hold exactly (a float would silently stand in for it)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > EXACT_INTEGERS:
        raise ValueError(f"a whole number within ±2^53 (what JSON and a double hold exactly), got {str(value)[:30]}")
    return value


def _composed(value: Any) -> Any:
    return same_id(value) if isinstance(value, str) else value


Text = Annotated[StrictStr, Field(max_length=1_000)]
Value = Annotated[StrictBool | StrictInt | StrictFloat | Text, BeforeValidator(_exact)]
FieldName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\s]+$")]
OPERATORS = ("eq", "ne", "in", "gt", "gte", "lt", "lte", "exists", "prefix", "contains")
RANGES = ("gt", "gte", "lt", "lte")
TEXTUAL = ("prefix", "contains")  # operators on string values only


class FilterError(ValueError):
    """A filter that cannot be read or applied; the message is one line naming the part at fault."""


class _Node(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    def key(self) -> str:
        """The canonical form: equal filters select alike, so their allowed nodes are computed once."""
        return self.model_dump_json(by_alias=True, exclude_none=True)

    def fields(self) -> set[str]:
        raise NotImplementedError

    def conditions(self) -> list[Condition]:
        """Every condition in the filter, in order."""
        raise NotImplementedError


class Condition(_Node):
    """One field's test: every operator given must hold (``gte`` and ``lt`` make a range)."""

    field: FieldName
    eq: Value | None = None
    ne: Value | None = None
    in_: Annotated[list[Value], Field(min_length=1, max_length=MAX_VALUES)] | None = Field(None, alias="in")
    gt: Value | None = None
    gte: Value | None = None
    lt: Value | None = None
    lte: Value | None = None
    exists: StrictBool | None = None
    prefix: Annotated[StrictStr, Field(min_length=1, max_length=1_000)] | None = None
    contains: Annotated[StrictStr, Field(min_length=1, max_length=1_000)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _ids_composed(cls, data: Any) -> Any:
        """A ``doc_id``'s values as the lake keeps ids (``same_id``: NFC), so that "café" typed either way
        finds its document."""
        if isinstance(data, dict) and data.get("field") == "doc_id":
            return {name: [_composed(item) for item in value] if isinstance(value, list) else _composed(value) for name, value in data.items()}
        return data

    @model_validator(mode="after")
    def _some(self) -> Condition:
        given = self.operators()
        if not given:
            raise ValueError(f"a condition on {self.field!r} needs an operator: {', '.join(OPERATORS)}")
        for name, value in given.items():
            if name in RANGES and isinstance(value, bool):
                raise ValueError(f"{self.field} {name}: a range needs a number or a string, got {value!r}")
        return self

    def operators(self) -> dict[str, Any]:
        """The operators this condition sets, with their values."""
        return {name: value for name in OPERATORS if (value := getattr(self, "in_" if name == "in" else name)) is not None}

    def values(self) -> list[tuple[str, Any]]:
        """Each value compared with the field, with its operator (an ``in`` list's one by one; not ``exists``)."""
        return [(name, item) for name, value in self.operators().items() if name != "exists" for item in (value if name == "in" else [value])]

    def fields(self) -> set[str]:
        return {self.field}

    def conditions(self) -> list[Condition]:
        return [self]


class And(_Node):
    and_: Annotated[list[Filter], Field(min_length=1, max_length=MAX_TERMS)] = Field(alias="and")

    def fields(self) -> set[str]:
        return set().union(*(part.fields() for part in self.and_))

    def conditions(self) -> list[Condition]:
        return [condition for part in self.and_ for condition in part.conditions()]


class Or(_Node):
    or_: Annotated[list[Filter], Field(min_length=1, max_length=MAX_TERMS)] = Field(alias="or")

    def fields(self) -> set[str]:
        return set().union(*(part.fields() for part in self.or_))

    def conditions(self) -> list[Condition]:
        return [condition for part in self.or_ for condition in part.conditions()]


class Not(_Node):
    not_: Filter = Field(alias="not")

    def fields(self) -> set[str]:
        return self.not_.fields()

    def conditions(self) -> list[Condition]:
        return self.not_.conditions()


Filter = Union[Condition, And, Or, Not]  # noqa: UP007 (the forward references above need the name)
for _model in (And, Or, Not):
    _model.model_rebuild()

_SHAPES: dict[str, type[_Node]] = {"and": And, "or": Or, "not": Not}


def parse_filter(value: Any) -> Filter:
    """A filter from its JSON form (a mapping), its text form (a string) or an already parsed one;
    ``FilterError`` in one line otherwise."""
    if isinstance(value, And | Or | Not | Condition):
        return value
    if isinstance(value, str):
        if len(value) > MAX_FILTER_CHARS:
            raise FilterError(f"filter: at most {MAX_FILTER_CHARS:,} characters, got {len(value):,}")
        stripped = value.strip()
        if stripped.startswith("{"):
            try:
                return parse_filter(json.loads(stripped))
            except json.JSONDecodeError as error:
                raise FilterError(f"filter: not valid JSON at character {error.pos + 1}: {error.msg}") from None
        return _Parser(value).parse()
    if not isinstance(value, Mapping):
        raise FilterError(f"filter: a mapping (JSON) or a string, got {type(value).__name__}")
    return _from_mapping(value, "filter", 0, [0])


def _from_mapping(value: Any, where: str, depth: int, seen: list[int]) -> Filter:
    """One node of the JSON form, its shape told by its keys; errors name the path to it. Bounds are
    checked before what they bound is read: a list's length before its items, and ``seen`` counts the
    nodes read so far against ``MAX_CONDITIONS``."""
    seen[0] += 1
    if seen[0] > MAX_CONDITIONS:
        raise FilterError(f"{where}: more than {MAX_CONDITIONS:,} conditions and groups in one filter")
    if depth > MAX_DEPTH:
        raise FilterError(f"filter: groups nested more than {MAX_DEPTH} deep")
    if not isinstance(value, Mapping):
        raise FilterError(f"{where}: a condition or and/or/not, got {json.dumps(value)[:60]}")
    shapes = [key for key in _SHAPES if key in value]
    if "field" in value or not shapes:
        if shapes:
            raise FilterError(f"{where}: a condition (field) cannot also hold {shapes[0]!r}; put both under 'and'")
        unknown = sorted(set(value) - {"field", *OPERATORS})
        if unknown or "field" not in value:
            what = f"unknown key {unknown[0]!r}" if unknown else "no 'field'"
            raise FilterError(f"{where}: {what} (a condition is {{field, {', '.join(OPERATORS)}}}; a group is and / or / not)")
        return _validated(Condition, dict(value), where)
    if len(value) != 1:
        raise FilterError(f"{where}: {' and '.join(repr(k) for k in sorted(value))}: one of and / or / not per object")
    (shape,) = shapes
    inner = value[shape]
    if shape == "not":
        return Not(**{"not": _from_mapping(inner, f"{where}.not", depth + 1, seen)})
    if not isinstance(inner, list) or not inner:
        raise FilterError(f"{where}.{shape}: a non-empty list of conditions")
    if len(inner) > MAX_TERMS:
        raise FilterError(f"{where}.{shape}: at most {MAX_TERMS} parts, got {len(inner):,} (group them in further and / or)")
    parts = [_from_mapping(item, f"{where}.{shape}[{i}]", depth + 1, seen) for i, item in enumerate(inner)]
    return _validated(_SHAPES[shape], {shape: parts}, where)


def _validated(model: type[_Node], data: dict, where: str) -> Filter:
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problems = error.errors()
        problem = next((p for p in problems if p["type"] in ("value_error", "string_too_long", "string_unicode")), problems[0])  # the reason
        loc = [part for part in problem["loc"] if isinstance(part, int) or part.isidentifier()]
        typed = [part for part in loc if part in ("bool", "int", "float", "str")]
        place = ".".join(str(part) for part in loc if part not in typed)
        message = problem["msg"].removeprefix("Value error, ") if problem["type"] != "string_unicode" else "not valid Unicode (a lone surrogate, \\ud800 to \\udfff)"
        if typed and problem is problems[0] and problem["type"] != "value_error":  # none of the union's types: say what it may be
            message = f"a number, a string or true/false, got {json.dumps(problem['input'])[:60]}"
        raise FilterError(f"{where}{'.' + place if place else ''}: {message}") from None


# ------------------------------------------------------------------------------------- the text form

_TOKEN = re.compile(
    r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]))"""
    r"""|(?P<op>==|!=|<=|>=|=|<|>)|(?P<punct>[()\[\],])|(?P<word>[^\s()\[\],=!<>"']+))"""
)
_COMPARISONS = {"=": "eq", "==": "eq", "!=": "ne", "<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}
_KEYWORDS = {"and", "or", "not", "in"}
_TESTS = ("exists", "prefix", "contains")  # words after a field name: ``year exists``, ``title prefix "A"``


class _Parser:
    """Recursive descent over ``or`` < ``and`` < ``not`` < a condition or a parenthesised filter."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        position = 0
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                if text[position:].strip():
                    self.fail(position, f"unexpected {text[position:].strip()[:1]!r}")
                break
            kind = match.lastgroup
            self.tokens.append((kind, match.group(kind), match.start(kind)))
            position = match.end()
        self.at = 0
        self.depth = 0

    def fail(self, position: int, problem: str) -> NoReturn:
        raise FilterError(f"filter: {problem} at character {position + 1} of {self.text.strip()[:80]!r}")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def next(self, expected: str) -> tuple[str, str, int]:
        token = self.peek()
        if token is None:
            self.fail(len(self.text), f"expected {expected}, the filter ended")
        self.at += 1
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "word" and token[1].lower() == word:
            self.at += 1
            return True
        return False

    def parse(self) -> Filter:
        if not self.tokens:
            raise FilterError("filter: empty")
        found = self.disjunction()
        token = self.peek()
        if token is not None:
            self.fail(token[2], f"expected and / or, got {token[1]!r}")
        return found

    def disjunction(self) -> Filter:
        parts = [self.conjunction()]
        while self.joined("or", parts):
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else Or(**{"or": parts})

    def conjunction(self) -> Filter:
        parts = [self.negation()]
        while self.joined("and", parts):
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else And(**{"and": parts})

    def joined(self, word: str, parts: list[Filter]) -> bool:
        """Whether ``word`` joins one more part, refused past ``MAX_TERMS`` parts."""
        token = self.peek()
        if not self.keyword(word):
            return False
        if len(parts) == MAX_TERMS:
            self.fail(token[2], f"at most {MAX_TERMS} parts joined by one {word!r} (group them in parentheses)")
        return True

    def negation(self) -> Filter:
        token = self.peek()
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(f"filter: groups nested more than {MAX_DEPTH} deep")
        try:
            return self.group(token)
        finally:
            self.depth -= 1

    def group(self, token: tuple[str, str, int] | None) -> Filter:
        if self.keyword("not"):
            return Not(**{"not": self.negation()})
        if token is not None and token[1] == "(":
            self.at += 1
            inner = self.disjunction()
            closing = self.next("')'")
            if closing[1] != ")":
                self.fail(closing[2], f"expected ')', got {closing[1]!r}")
            return inner
        return self.condition()

    def condition(self) -> Filter:
        kind, name, position = self.next("a field name")
        if kind != "word" or name.lower() in _KEYWORDS:
            self.fail(position, f"expected a field name, got {name!r}")
        for test in _TESTS:
            if self.keyword(test):
                return self.build({"field": name, test: True if test == "exists" else self.value()}, position)
        negated = self.keyword("not")
        if negated or self.keyword("in"):
            if negated and not self.keyword("in"):
                self.fail(self.peek()[2] if self.peek() else len(self.text), f"expected 'in' after '{name} not'")
            found: Filter = self.build({"field": name, "in": self.values()}, position)
            return Not(**{"not": found}) if negated else found
        kind, op, at = self.next(f"a comparison after {name!r} (=, !=, <, <=, >, >=, in, exists, prefix, contains)")
        if kind != "op":
            self.fail(at, f"expected a comparison after {name!r} (=, !=, <, <=, >, >=, in, exists, prefix, contains), got {op!r}")
        return self.build({"field": name, _COMPARISONS[op]: self.value()}, position)

    def build(self, data: dict, position: int) -> Filter:
        try:
            return _validated(Condition, data, "filter")
        except FilterError as error:
            self.fail(position, f"{data['field']} {str(error).removeprefix('filter').lstrip('.: ')}")

    def values(self) -> list[Any]:
        kind, text, position = self.next("'['")
        if text != "[":
            self.fail(position, f"expected '[' after in, got {text!r}")
        found = [self.value()]
        while True:
            kind, text, position = self.next("',' or ']'")
            if text == "]":
                return found
            if text != ",":
                self.fail(position, f"expected ',' or ']', got {text!r}")
            found.append(self.value())

    def value(self) -> Any:
        kind, text, position = self.next("a value")
        if kind == "string":
            try:
                return json.loads('"' + text[1:-1].replace('\\"', '"').replace("\\'", "'").replace('"', '\\"') + '"')
            except json.JSONDecodeError as error:
                self.fail(position + error.pos, "a bad escape or a control character in a string (escape them as JSON does: \\t, \\n, \\\\, \\u00e9)")
        if kind == "number":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "word" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind == "word" and text.lower() not in _KEYWORDS:
            return text  # a bare word is a string: lang = en
        self.fail(position, f'expected a value (a number, "text", true or false), got {text!r}')
