"""A cached, structured-output client for any OpenAI-compatible chat server (vLLM, llama.cpp, OpenAI).

Why a wrapper and not the bare ``openai`` client:

* every answer must be a validated pydantic object, so the schema is sent as
  ``response_format={"type": "json_schema", ...}`` and the reply is validated; a server that
  refuses that is asked with llama-cpp-python's ``{"type": "json_object", "schema": ...}`` (its
  server, 0.3.36, rejects ``json_schema`` but turns this into a grammar), and failing that with the
  schema in the prompt and no response_format, the JSON then dug out of the text;
* LLM calls are slow and may cost money, so each validated answer is cached under a hash of
  (model, prompt, schema) and a re-materialization makes no calls;
* assets record what a run spent (calls, cache hits, tokens, seconds, cost) as metadata.

The cache is one JSON file per answer, ``<cache_dir>/<model slug>/<key>.json``, written to a
temporary file and swapped in with ``os.replace``. Per-answer files (rather than a lake table) make
every paid call durable the moment it returns, so a killed run keeps what it paid for, and they let
several Dagster processes fill one cache without rewriting each other's partition. DuckDB reads
them as a table: ``SELECT * FROM read_json('<home>/llm_cache/*/*.json')``.

Configuration comes from the environment only; the API key is never logged, cached or repr'd, and
is redacted from every error (``common/redact.py``), as is anything key-like a server echoes. A
call gives up within ``timeout × (retries + 1)`` seconds, backoff and a server's ``Retry-After``
included, with a message naming the server, the model and the attempts made.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from graphlake.common.openai_retries import Retries, retrying
from graphlake.common.redact import redact
from graphlake.common.settings import LLM_API_KEY, LLM_BASE_URL, LLM_MODEL, LLM_PRICE, LLM_RETRIES, LLM_TIMEOUT

ENV_BASE_URL, ENV_MODEL, ENV_API_KEY = LLM_BASE_URL.name, LLM_MODEL.name, LLM_API_KEY.name
ENV_TIMEOUT, ENV_RETRIES = LLM_TIMEOUT.name, LLM_RETRIES.name

T = TypeVar("T", bound=BaseModel)
_SLUG = re.compile(r"[^A-Za-z0-9_.\-]+")


class LLMError(RuntimeError):
    """An LLM call failed; the message names the server."""


class LLMUnavailable(LLMError):
    """No server is configured, or it did not answer after every retry."""


class LLMOutputError(LLMError):
    """The server answered, but not with JSON that fits the schema."""


class _FormatRefused(Exception):
    """The server rejected the request's response_format; the next, looser one is tried."""


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str
    timeout_s: float = 120.0
    max_retries: int = 4
    api_key: str = field(default="none", repr=False)  # local servers ignore it; the client needs one
    backoff_s: float = 1.0
    max_tokens: int = 512
    price_per_1k_tokens: float | None = None

    @classmethod
    def from_env(cls, **overrides) -> LLMConfig:
        base_url = LLM_BASE_URL.text()
        if not base_url:
            raise LLMUnavailable(f"no LLM server configured: set {ENV_BASE_URL} (e.g. http://127.0.0.1:8000/v1) and {ENV_MODEL}")
        model = LLM_MODEL.text()
        if not model:
            raise LLMUnavailable(f"{ENV_BASE_URL} is {base_url} but {ENV_MODEL} is not set")
        settings = {"base_url": base_url, "model": model, "api_key": LLM_API_KEY.text() or "none"}
        for variable, key in ((LLM_PRICE, "price_per_1k_tokens"), (LLM_TIMEOUT, "timeout_s"), (LLM_RETRIES, "max_retries")):
            if variable.set():
                settings[key] = variable.number(error=LLMUnavailable)
        return cls(**(settings | overrides))

    def describe(self) -> str:
        return f"LLM server at {self.base_url} (model {self.model})"


@dataclass
class LLMStats:
    """What a client spent; ``cost`` only when a price per 1k tokens is configured."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    price_per_1k_tokens: float | None = None

    @property
    def cost(self) -> float | None:
        if self.price_per_1k_tokens is None:
            return None
        return (self.prompt_tokens + self.completion_tokens) / 1000 * self.price_per_1k_tokens

    def as_metadata(self) -> dict[str, float | int]:
        metadata = {
            "llm_calls": self.calls,
            "llm_cache_hits": self.cache_hits,
            "llm_prompt_tokens": self.prompt_tokens,
            "llm_completion_tokens": self.completion_tokens,
            "llm_seconds": round(self.seconds, 3),
        }
        return metadata | ({"llm_cost": round(self.cost, 6)} if self.cost is not None else {})


def model_slug(model: str) -> str:
    """A model name as a folder name ('org/Model:Q4' -> 'org_Model_Q4')."""
    return _SLUG.sub("_", model).strip("_.-") or "model"


def cache_key(model: str, messages: list[dict[str, str]], schema: dict) -> str:
    payload = json.dumps({"model": model, "prompt": messages, "schema": schema}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


class LLMClient:
    def __init__(self, config: LLMConfig, cache_dir: Path) -> None:
        self.config = config
        self.cache_dir = Path(cache_dir) / model_slug(config.model)
        self.stats = LLMStats(price_per_1k_tokens=config.price_per_1k_tokens)
        self._format = 0  # index of the response format this server accepts, see _complete
        import openai  # here, not at import: the Definitions load this module and openai takes most of a second

        # retries are ours (with backoff and a message naming the server), not the SDK's
        self._client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key, timeout=config.timeout_s, max_retries=0)

    def structured(self, prompt: str, schema: type[T], system: str | None = None) -> T:
        """Ask for one ``schema`` object; answered from the cache when this exact request was made before.
        A failure's message has the key (and anything key-like) redacted, and carries no chained
        exception: the SDK's would repeat the server's answer verbatim."""
        try:
            return self._structured(prompt, schema, system)
        except LLMError as error:
            kind, message = type(error), redact(str(error), self.config.api_key)
        raise kind(message)  # outside the handler: no __context__ either

    def _structured(self, prompt: str, schema: type[T], system: str | None) -> T:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        json_schema = schema.model_json_schema()
        key = cache_key(self.config.model, messages, json_schema)
        path = self.cache_dir / f"{key}.json"
        if path.is_file():
            self.stats.cache_hits += 1
            return schema.model_validate_json(json.loads(path.read_text(encoding="utf-8"))["response"])
        started = time.perf_counter()
        completion = self._complete(messages, schema.__name__, json_schema)
        seconds = time.perf_counter() - started
        text = completion.choices[0].message.content or ""
        usage = completion.usage
        self.stats.calls += 1
        self.stats.seconds += seconds
        self.stats.prompt_tokens += usage.prompt_tokens if usage else 0
        self.stats.completion_tokens += usage.completion_tokens if usage else 0
        try:
            result = parse_json(text, schema)
        except LLMOutputError as error:
            raise LLMOutputError(f"{self.config.describe()}: {error}") from error
        self._store(
            path,
            {
                "key": key,
                "model": self.config.model,
                "prompt": messages,
                "schema": json_schema,
                "response": result.model_dump_json(),
                "prompt_tokens": usage.prompt_tokens if usage else None,
                "completion_tokens": usage.completion_tokens if usage else None,
                "seconds": round(seconds, 3),
            },
        )
        return result

    def _complete(self, messages: list[dict[str, str]], name: str, json_schema: dict):
        """Try the strictest response format the server takes; remember the first one it accepts."""
        hint = f"\n\nAnswer with only a JSON object that matches this JSON schema:\n{json.dumps(json_schema)}"
        hinted = messages[:-1] + [{"role": "user", "content": messages[-1]["content"] + hint}]
        attempts = [
            (messages, {"type": "json_schema", "json_schema": {"name": name, "schema": json_schema, "strict": True}}),
            # llama-cpp-python's server refuses 'json_schema' but turns this dialect into a grammar
            (hinted, {"type": "json_object", "schema": json_schema}),
            (hinted, None),
        ]
        for request, response_format in attempts[self._format :]:
            try:
                return self._with_retries(request, response_format)
            except _FormatRefused:
                self._format += 1
        raise AssertionError("the plain-text request has no response_format to refuse")

    def _with_retries(self, messages: list[dict[str, str]], response_format: dict | None):
        """One chat completion, retried as every OpenAI-compatible call is (``openai_retries.py``)."""
        extra = {"response_format": response_format} if response_format else {}
        config = self.config

        def refused_format(error: Exception) -> None:
            if response_format is not None and "response_format" in str(error):
                raise _FormatRefused from error

        def complete(timeout: float):
            return self._client.with_options(timeout=timeout).chat.completions.create(model=config.model, messages=messages, temperature=0.0, max_tokens=config.max_tokens, **extra)

        retries = Retries(config.timeout_s, config.max_retries, config.backoff_s, ENV_TIMEOUT)
        return retrying(complete, retries, config.describe(), "an OpenAI chat completion", LLMUnavailable, LLMError, refused_format)

    def _store(self, path: Path, entry: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        temporary.write_text(json.dumps(entry, ensure_ascii=False), encoding="utf-8")
        os.replace(temporary, path)


LAKE_CACHE = "llm_cache"  # folder in the lake root holding every cached answer


def lake_client(home: Path) -> LLMClient:
    """The client the assets use: configured from the environment, caching into the lake at ``home``."""
    return LLMClient(LLMConfig.from_env(), Path(home) / LAKE_CACHE)


def parse_json(text: str, schema: type[T]) -> T:
    """Validate the reply as ``schema``; failing that, the first JSON object found in the text."""
    try:
        return schema.model_validate_json(text)
    except ValidationError as first:
        decoder = json.JSONDecoder()
        for match in re.finditer(r"\{", text):
            try:
                value, _ = decoder.raw_decode(text, match.start())
                return schema.model_validate(value)
            except (json.JSONDecodeError, ValidationError):
                continue
        raise LLMOutputError(f"reply does not fit {schema.__name__}: {first.errors()[:2]}; reply was {text[:200]!r}") from first
