"""The bodies the API takes over HTTP and MCP (``api/server.py``, ``api/mcp_server.py``): one pydantic
model per request, strict (``"k": "5"`` or ``true`` is refused, not read as a number) and bounded, so
that a request is refused the same way whichever transport carries it; and an answer's JSON."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, WithJsonSchema

from graphlake.api.hit_spans import MAX_CONTEXT, Shown
from graphlake.api.results import NAMESPACE, SearchResult
from graphlake.api.validation import MAX_BATCH, MAX_CORPORA, MAX_EMBED_CHARS, MAX_K, MAX_NAME_CHARS, MAX_PAGE, MAX_QUERY_CHARS
from graphlake.common.unicode_checks import SPACES_ONLY_NOT
from graphlake.retrieval.core import METHOD_NAME
from graphlake.retrieval.filters import MAX_FILTER_CHARS
from graphlake.warehouse.corpora import CORPUS_NAME
from graphlake.warehouse.write_checks import EXACT_INTEGER, MAX_DOCUMENT_CHARS, MAX_METADATA_DEPTH, MAX_TITLE_CHARS, MAX_WRITE_DOCUMENTS

MAX_SQL_CHARS = 100_000
MAX_SQL_ROWS = 100_000  # in one answer over HTTP (the Python API's own limit is ten times that)

# what a document's metadata may hold (warehouse/write_checks.py): any JSON, its whole numbers within ±2^53
# (a filter compares them as float64); "graphlake" is the adapters' key. Recursive: the server's OpenAPI
# document holds the value's schema as a component (api/server.py)
METADATA_VALUE = "MetadataValue"
VALUE_REF = {"$ref": f"#/components/schemas/{METADATA_VALUE}"}
METADATA_VALUE_SCHEMA = {
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "string"},
        {"type": "integer", "minimum": -EXACT_INTEGER, "maximum": EXACT_INTEGER},
        {"type": "number", "not": {"type": "integer"}},
        {"type": "array", "items": VALUE_REF},
        {"type": "object", "additionalProperties": VALUE_REF},
    ],
    "description": f"any JSON value, nested at most {MAX_METADATA_DEPTH} deep; whole numbers within ±2^53",
}
VALUE_PLACEHOLDER = {"x-graphlake-schema": METADATA_VALUE}  # pydantic resolves every $ref it sees: the server puts VALUE_REF in its place
METADATA_SCHEMA = {"type": "object", "additionalProperties": VALUE_PLACEHOLDER, "not": {"required": [NAMESPACE]}, "default": {}}
DEADLINE = "seconds this request may take, at most the server's deadline ($GRAPHLAKE_SERVE_DEADLINE_S, 60 by default, its default too); past it: 504"
# as strict as the checks behind them (api/validation.py, warehouse/write_checks.py), so that the
# schema says what the server takes: a name's characters, a text with something in it besides spaces
CorpusName = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=f"^{CORPUS_NAME.pattern}$", examples=["demo"])]
MethodName = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=f"^{METHOD_NAME.pattern}$", examples=["bm25"])]
Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS, pattern=SPACES_ONLY_NOT, examples=["Which vessel carried the sled?"])]
DocumentId = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=SPACES_ONLY_NOT, description="compared and kept in Unicode's composed form (NFC)")]


class _Search(BaseModel):
    """Any other field is one of the method's query-time parameters (``GET /methods`` lists them)."""

    model_config = ConfigDict(extra="allow", strict=True)

    corpus: CorpusName | Annotated[list[CorpusName], Field(min_length=1, max_length=MAX_CORPORA, json_schema_extra={"uniqueItems": True})]  # several: their rankings fused, each hit naming its corpus
    method: MethodName
    k: int = Field(10, ge=1, le=MAX_K)
    filter: dict[str, Any] | Annotated[str, Field(max_length=MAX_FILTER_CHARS)] | None = None  # retrieval/filters.py: JSON or text
    group_by: Literal["span", "document", "chunk"] = "span"  # api/hit_spans.py: a hit is a span of its document, one a document, or a ranked node
    context: Annotated[int, Field(ge=0, le=MAX_CONTEXT)] | Literal["document"] | None = None  # neighbouring nodes a side with each hit, or its document
    min_relevance: Annotated[float, Field(ge=0, le=1)] | None = None  # api/relevance.py: hits at least this relevant
    after_write: Annotated[int, Field(ge=0)] | None = None  # a lake-owned corpus: see the writes up to this number (read your writes)
    timeout_s: Annotated[float, Field(gt=0, description=DEADLINE)] | None = None

    def shown(self) -> Shown:
        return Shown(self.group_by, self.context, self.min_relevance)

    def overrides(self) -> dict[str, Any]:
        return {**(self.model_extra or {}), **({"after_write": self.after_write} if self.after_write is not None else {})}


class SearchRequest(_Search):
    query: Query


class BatchRequest(_Search):
    queries: list[Query] = Field(min_length=1, max_length=MAX_BATCH)


class SqlRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    statement: str = Field(min_length=1, max_length=MAX_SQL_CHARS)
    limit: int = Field(10_000, ge=1, le=MAX_SQL_ROWS)
    timeout_s: Annotated[float, Field(gt=0, description=DEADLINE)] | None = None


class WarmRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    corpus: CorpusName
    method: MethodName
    timeout_s: Annotated[float, Field(gt=0, description=DEADLINE)] | None = None


class DocumentBody(BaseModel):
    """One upserted document; anything else about it goes in its metadata."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: DocumentId
    text: str = Field(min_length=1, max_length=MAX_DOCUMENT_CHARS, pattern=SPACES_ONLY_NOT)
    title: str = Field("", max_length=MAX_TITLE_CHARS)
    metadata: Annotated[dict[str, Any], WithJsonSchema(METADATA_SCHEMA)] = {}


class UpsertRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    documents: list[DocumentBody] = Field(min_length=1, max_length=MAX_WRITE_DOCUMENTS, description="each with an id of its own (compared in NFC); two with one id are a 422 naming both")
    timeout_s: Annotated[float, Field(gt=0, description=DEADLINE)] | None = None


class DeleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    ids: list[DocumentId] = Field(min_length=1, max_length=MAX_WRITE_DOCUMENTS)


class IdsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    filter: dict[str, Any] | Annotated[str, Field(max_length=MAX_FILTER_CHARS)] | None = None


class DocumentIds(BaseModel):
    ids: list[str]


class GetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    ids: list[DocumentId] = Field(max_length=MAX_WRITE_DOCUMENTS)


class ListRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    after: DocumentId | None = None
    limit: int = Field(100, ge=1, le=MAX_PAGE)
    filter: dict[str, Any] | Annotated[str, Field(max_length=MAX_FILTER_CHARS)] | None = None


class EmbedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    corpus: CorpusName
    texts: list[Annotated[str, Field(max_length=MAX_EMBED_CHARS)]] = Field(min_length=1, max_length=MAX_BATCH)
    kind: Literal["passage", "query"] = "passage"
    timeout_s: Annotated[float, Field(gt=0, description=DEADLINE)] | None = None


class Embedded(BaseModel):
    vectors: list[list[float]]


class Dropped(BaseModel):
    corpus: str
    dropped: bool


class CorpusRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: CorpusName


class Health(BaseModel):
    status: str
    corpora: int


_ANSWER = TypeAdapter(SearchResult)


def answer_json(answer: SearchResult) -> bytes:
    """An answer in the encoding FastAPI gives a returned value, without its validation pass over every hit
    (the answer is the API's own dataclass, made by the lake): pydantic's serializer writes the same bytes
    as ``json.dumps(asdict(answer))`` at a 26th of its cost (19 µs against 490 for ten hits)."""
    return _ANSWER.dump_json(answer)
