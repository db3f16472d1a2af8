"""One way to call an OpenAI-compatible server: retry timeouts, lost connections, 429 and 5xx with
exponential backoff (or after the server's ``Retry-After``), within ``timeout × (retries + 1)``
seconds in all, and give up with a message naming the server, the attempts and the setting that
bounds them. The chat client (``llm.py``) and the embeddings client (``embeddings.py``) both call
through it, so a hosted model fails the same way whatever it serves."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TypeVar

from graphlake.common.progress import PREFIX

R = TypeVar("R")
LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retries:
    """How long one attempt may take, how many follow a failed one, the first pause, and the setting a
    user changes to allow more time (named when the calls give up)."""

    timeout_s: float
    max_retries: int
    backoff_s: float
    setting: str


def retrying(
    call: Callable[[float], R],
    retries: Retries,
    describe: str,
    answer: str,
    unavailable: type[Exception],
    refused: type[Exception],
    status_hook: Callable[[Exception], None] | None = None,
) -> R:
    """``call(timeout)`` until it answers. ``answer`` names what a good body is (in the error for a
    body that is not one); ``unavailable`` is raised when every attempt failed, ``refused`` at once
    for a status that retrying cannot mend (4xx other than 429). ``status_hook`` sees a status error
    first and may raise its own (the chat client's refused response_format)."""
    import openai

    retryable = (openai.InternalServerError, openai.RateLimitError)  # 5xx, 429; connection errors are retried too
    attempts = retries.max_retries + 1
    deadline = time.monotonic() + retries.timeout_s * attempts
    for attempt in range(1, attempts + 1):
        said = f"{describe}, attempt {attempt} of {attempts}"
        try:
            return call(max(1e-3, min(retries.timeout_s, deadline - time.monotonic())))
        except openai.APIStatusError as error:
            if status_hook is not None:
                status_hook(error)
            if not isinstance(error, retryable):
                raise refused(f"{said}: refused the request ({error.status_code}): {error}") from error
            failure, wait = f"{error.status_code}: {error}", retry_after(error.response.headers.get("retry-after"))
        except openai.APIConnectionError as error:  # includes timeouts
            failure, wait = f"{type(error).__name__}: {error}", None
        except (json.JSONDecodeError, openai.APIResponseValidationError) as error:
            raise refused(f"{said}: answered with a body that is not {answer} (the server's fault, not the model's): {error}") from error
        pause = max(retries.backoff_s * 2 ** (attempt - 1), wait or 0.0)
        if attempt == attempts or time.monotonic() + pause >= deadline:
            asked = f"; it asked to retry after {wait:.0f} s" if wait else ""
            raise unavailable(
                f"{describe} failed after {attempt} of {attempts} attempts within {retries.timeout_s * attempts:.0f} s ({retries.setting}={retries.timeout_s:g} s x {attempts}){asked}: {failure}"
            )
        # a line for the person waiting (a step's run log, where Dagster manages the ``graphlake`` logger)
        LOG.warning(f"{PREFIX}{said} failed ({failure.splitlines()[0][:200]}); retrying in {pause:.0f} s")
        time.sleep(pause)
    raise AssertionError("unreachable: the last attempt returns or raises")


def retry_after(header: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    if not header:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(header).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
