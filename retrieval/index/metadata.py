"""A corpus's document metadata as a filter reads it: each field a typed column (numbers, strings,
booleans, a list's elements exploded beside their document), so that a filter's condition is one
vectorised comparison, and the nodes a filter allows are a mask over the node rows every index shares.
The language itself is ``retrieval/filters.py``."""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphlake.common.suggest import did_you_mean
from graphlake.kernels.results import Allowed
from graphlake.retrieval.filters import BUILT_IN, TEXTUAL, And, Condition, Filter, FilterError, Not, Or

CACHED_FILTERS = 128  # the allowed masks kept per corpus (a tenant's filter repeats on every request)


@dataclass(frozen=True)
class _Column:
    """One field over the documents: for each value type, the values and the document each belongs to."""

    present: np.ndarray  # bool per document: it has the field (a value not null: a scalar, or an object within)
    typed: dict[str, tuple[np.ndarray, pa.Array]]  # "number" | "string" | "bool" -> (document index, values)


def _type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


_ARROW = {"number": pa.float64(), "string": pa.string(), "bool": pa.bool_()}


def _arrow(kind: str, items: list[Any]) -> pa.Array:
    """Values of one type as the column compares them: every number as a float (JSON's integers have
    no bound, a float64's range is ±1.8e308: a larger one compares as infinity of its sign)."""
    return pa.array([_number(item) for item in items] if kind == "number" else items, _ARROW[kind])


def _number(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


_SINGULAR = {"number": "a number", "string": "a string", "bool": "true/false"}
_PLURAL = {"number": "numbers", "string": "strings", "bool": "true/false"}


def _walk(value: Any, parts: list[str]) -> Iterator[Any]:
    """The scalars at a dotted path, through objects and lists (``entities.type`` over a list of objects)."""
    if isinstance(value, list):
        for item in value:
            yield from _walk(item, parts)
    elif not parts:
        if value is not None:
            yield value
    elif isinstance(value, dict):
        head, rest = parts[0], parts[1:]
        if head in value:
            yield from _walk(value[head], rest)


def _paths(value: Any, prefix: str, found: set[str]) -> None:
    if isinstance(value, list):
        for item in value:
            _paths(item, prefix, found)
    elif isinstance(value, dict):
        for key, inner in value.items():
            path = f"{prefix}.{key}" if prefix else key
            found.add(path)
            _paths(inner, path, found)


class DocumentMetadata:
    """The documents' metadata (the ``documents`` table's JSON column) and their ids and titles, read
    once per corpus snapshot; each field's column is built when a filter first names it."""

    def __init__(self, corpus: str, documents: pa.Table) -> None:
        self.corpus = corpus
        self.records = [json.loads(text) if text else {} for text in documents.column("metadata").to_pylist()]
        self._builtin = {name: documents.column(name).to_pylist() for name in BUILT_IN}
        self._columns: dict[str, _Column] = {}
        self._known: set[str] | None = None
        self._lock = threading.Lock()

    @classmethod
    def joined(cls, first: DocumentMetadata, then: DocumentMetadata) -> DocumentMetadata:
        """Two sets of documents as one, in that order (a snapshot's and its pending writes'), without
        reading either's JSON again."""
        joined = cls.__new__(cls)
        joined.corpus, joined.records = first.corpus, first.records + then.records
        joined._builtin = {name: first._builtin[name] + then._builtin[name] for name in BUILT_IN}
        joined._columns, joined._known, joined._lock = {}, None, threading.Lock()
        return joined

    def __len__(self) -> int:
        return len(self.records)

    def known(self) -> set[str]:
        """Every field some document has (dotted paths into objects), and the built-in ones."""
        if self._known is None:
            found: set[str] = set(BUILT_IN)
            for record in self.records:
                _paths(record, "", found)
            self._known = found
        return self._known

    def column(self, name: str) -> _Column:
        if name not in self._columns:
            with self._lock:
                if name not in self._columns:
                    self._columns[name] = self._build(name)
        return self._columns[name]

    def _build(self, name: str) -> _Column:
        values: dict[str, tuple[list[int], list[Any]]] = {kind: ([], []) for kind in _ARROW}
        present = np.zeros(len(self.records), dtype=bool)
        if name in BUILT_IN:
            found = ((i, [value]) for i, value in enumerate(self._builtin[name]))
        else:
            parts = name.split(".")
            found = ((i, list(_walk(record[name], []) if name in record else _walk(record, parts))) for i, record in enumerate(self.records))
        for i, items in found:
            for value in items:
                present[i] = True
                kind = _type(value)
                if kind is not None:  # an object is there, but nothing a comparison reads
                    values[kind][0].append(i), values[kind][1].append(value)
        typed = {kind: (np.asarray(docs, dtype=np.int64), _arrow(kind, items)) for kind, (docs, items) in values.items() if docs}
        return _Column(present, typed)

    def check(self, expression: Filter) -> None:
        """Refuse a filter naming a field no document has: a typo would otherwise select nothing, silently."""
        self.check_all(expression, [self])

    @staticmethod
    def check_all(expression: Filter, corpora: list[DocumentMetadata]) -> None:
        """Refuse a filter naming a field no document of any of these corpora has, or comparing a field
        with a value of a type it never holds (``year >= "2016"`` where years are numbers): either
        would otherwise select nothing, silently."""
        known = set().union(*(metadata.known() for metadata in corpora))
        where = f"corpus {corpora[0].corpus!r}" if len(corpora) == 1 else "the corpora " + ", ".join(repr(m.corpus) for m in corpora)
        for name in sorted(expression.fields() - known):
            listed = sorted(known)
            shown = ", ".join(listed[:20]) + (f", ... ({len(listed)} in all)" if len(listed) > 20 else "")
            raise FilterError(f"filter: no document of {where} has the field {name!r}{did_you_mean(name, known)} (fields: {shown})")
        for condition in expression.conditions():
            held = set().union(*(metadata.column(condition.field).typed for metadata in corpora))
            for op, value in condition.values():
                wanted = "string" if op in TEXTUAL else _type(value)
                if wanted not in held:
                    holds = " and ".join(_PLURAL[kind] for kind in sorted(held)) or "only objects"
                    raise FilterError(f"filter: {condition.field} {op} {json.dumps(value)}: {_SINGULAR[wanted]}, but {condition.field!r} holds {holds} in {where}: it would match nothing")

    def select(self, expression: Filter) -> np.ndarray:
        """A mask over the documents: those the filter allows."""
        if isinstance(expression, And):
            return np.logical_and.reduce([self.select(part) for part in expression.and_])
        if isinstance(expression, Or):
            return np.logical_or.reduce([self.select(part) for part in expression.or_])
        if isinstance(expression, Not):
            return ~self.select(expression.not_)
        return self._condition(expression)

    def _condition(self, condition: Condition) -> np.ndarray:
        column = self.column(condition.field)
        mask = np.ones(len(self.records), dtype=bool)
        for op, value in condition.operators().items():
            if op == "exists":
                mask &= column.present if value else ~column.present
            elif op == "ne":
                mask &= column.present & ~self._any(column, "eq", value)
            else:
                mask &= self._any(column, op, value)
        return mask

    def _any(self, column: _Column, op: str, value: Any) -> np.ndarray:
        """The documents one of whose values satisfies ``op value`` (values of the value's type only)."""
        mask = np.zeros(len(self.records), dtype=bool)
        wanted = value if op == "in" else [value]
        for kind in {_type(item) for item in wanted}:
            if kind not in column.typed:
                continue
            docs, values = column.typed[kind]
            same = [item for item in wanted if _type(item) == kind]
            if op in ("eq", "in"):
                hits = pc.is_in(values, value_set=_arrow(kind, same))
            elif op == "prefix":
                hits = pc.starts_with(values, pattern=value)
            elif op == "contains":
                hits = pc.match_substring(values, pattern=value)
            else:
                compare = {"gt": pc.greater, "gte": pc.greater_equal, "lt": pc.less, "lte": pc.less_equal}[op]
                hits = compare(values, _arrow(kind, same[:1])[0])
            mask[docs[np.asarray(hits.to_numpy(zero_copy_only=False), dtype=bool)]] = True
        return mask


class FilterCache:
    """The allowed nodes of the filters a corpus was last asked, most recent kept (``CACHED_FILTERS``)."""

    def __init__(self) -> None:
        self._found: OrderedDict[str, Allowed] = OrderedDict()
        self._lock = threading.Lock()

    def allowed(self, expression: Filter, metadata: DocumentMetadata, node_documents: np.ndarray, check: bool = True) -> Allowed:
        """The nodes ``expression`` allows; ``check``: refuse a field no document has (``FilterError``)."""
        key = expression.key()
        with self._lock:
            found = self._found.get(key)
            if found is not None:
                self._found.move_to_end(key)
                return found
        if check:
            metadata.check(expression)
        mask = metadata.select(expression)[node_documents]
        found = Allowed(mask, np.flatnonzero(mask).astype(np.int64), key)
        with self._lock:
            self._found[key] = found
            while len(self._found) > CACHED_FILTERS:
                self._found.popitem(last=False)
        return found
