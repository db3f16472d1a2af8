"""The HTTP layer under ``graphlake serve``: uvicorn's h11 protocol with a bound on a request's head,
its own refusals in the API's JSON shape, and an access log that never records a query string.

httptools (uvicorn's default parser when installed) reads request heads of any size (a 256 MB header
held a worker for minutes) and answers a malformed request with plain text. h11 stops a head at
``MAX_HEAD_BYTES`` (431), and its parse errors (a bad request line, ``Content-Length: -1``, a length
beside chunked encoding) come back here as ``{"error": "..."}`` like every other refusal.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from typing import Any

import h11
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEAD_BYTES = 64 << 10  # request line and headers (Envoy's default is 60 KiB, nginx's 32 KiB)
MAX_ERROR_CHARS = 300  # an error line past this is cut: a refusal never echoes a request back whole
MAX_BODY_BYTES = 4 << 20  # a full batch of the longest queries, escaped, fits with room to spare
_DIGITS_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*\d+[ \t]*\r?$")
LINGER_S = 2.0  # after refusing a request mid-send, what the client still sends is read and dropped this long


def error_line(message: str) -> str:
    """``message`` on one line, at most ``MAX_ERROR_CHARS`` characters."""
    line = " ".join(message.split())
    return line if len(line) <= MAX_ERROR_CHARS else f"{line[: MAX_ERROR_CHARS - 20]}… ({len(line):,} characters)"


class JsonErrorsProtocol(H11Protocol):
    """h11 as uvicorn runs it, but a request it cannot parse is answered with the API's one-line JSON."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused: h11.RemoteProtocolError | None = None
        self._draining = False
        self._head = b""  # the connection's first bytes: what a refusal may need to say why
        parse = self.conn.next_event

        def remembered() -> Any:  # uvicorn's handler keeps only that parsing failed; the reply says why
            try:
                return parse()
            except h11.RemoteProtocolError as error:
                self._refused = error
                raise

        self.conn.next_event = remembered  # type: ignore[method-assign]

    def send_400_response(self, msg: str) -> None:
        refused = self._refused
        status = refused.error_status_hint if refused is not None else 400
        if status == 431:
            said = f"request line and headers: over {MAX_HEAD_BYTES >> 10} KiB"
        elif str(refused) == "bad Content-Length" and _DIGITS_LENGTH.search(self._head):  # digits, past h11's 20
            status, said = 413, f"body: over {MAX_BODY_BYTES >> 20} MiB"
        else:
            said = f"not an HTTP request this server reads ({refused or msg})"
        body = json.dumps({"error": error_line(said)}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
        for event in (h11.Response(status_code=status, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        # a lingering close: closed with the client's bytes unread, the socket would be reset and the answer
        # lost; the rest of what it sends is read and dropped for up to LINGER_S
        self._draining = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def data_received(self, data: bytes) -> None:
        if len(self._head) < MAX_HEAD_BYTES:
            self._head += data[: MAX_HEAD_BYTES - len(self._head)]
        if not self._draining:
            super().data_received(data)


class QueryStringRedacted(logging.Filter):
    """The access log's path without its query string: a key sent as ``?api_key=`` is refused, and is
    not written down either."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) == 5 and isinstance(record.args[2], str) and "?" in record.args[2]:
            client, method, path, version, status = record.args
            record.args = (client, method, path.partition("?")[0] + "?<query string not logged>", version, status)
        return True


def logging_config() -> dict:
    """uvicorn's logging, with the access log's query strings redacted."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_query"] = {"()": QueryStringRedacted}
    config["handlers"]["access"]["filters"] = ["redact_query"]
    return config
