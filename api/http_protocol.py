"""The HTTP layer under ``graphlake serve``: uvicorn's httptools protocol with a bound on a request's
head, its own refusals in the API's JSON shape, and an access log that never records a query string.

As uvicorn runs it, httptools reads a request head of any size (a 256 MB header held a worker for
minutes and 400 MB) and answers a malformed request in plain text. Here the bytes of a head are
counted as they arrive and a head past ``MAX_HEAD_BYTES`` is refused (431) before the parser holds
more of it; a request the parser refuses (a bad request line or method, ``Content-Length: -1``, a
length beside chunked encoding) is answered ``{"error": "..."}`` like every other refusal. (h11 bounds
heads too, but parsing in Python it cost bm25's small requests 17 % of their throughput.)

A slow client holds nothing for long: a request's head must arrive whole within
``$GRAPHLAKE_SERVE_HEAD_TIMEOUT_S`` of the connection (or of its first byte, on a kept-alive one) and
its body within ``$GRAPHLAKE_SERVE_BODY_TIMEOUT_S`` of the head, else a 408 closes the connection; one
client address holds at most ``$GRAPHLAKE_SERVE_CLIENT_CONNECTIONS`` open connections (past them:
429, closed at once).
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections import Counter
from typing import Any

from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from graphlake.common.settings import SERVE_BODY_TIMEOUT_S, SERVE_CLIENT_CONNECTIONS, SERVE_HEAD_TIMEOUT_S

MAX_HEAD_BYTES = 64 << 10  # request line and headers (Envoy's default is 60 KiB, nginx's 32 KiB)
MAX_ERROR_CHARS = 300  # an error line past this is cut: a refusal never echoes a request back whole
MAX_BODY_BYTES = 4 << 20  # a full batch of the longest queries, escaped, fits with room to spare
LINGER_S = 2.0  # after refusing a request mid-send, what the client still sends is read and dropped this long
_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\S*)[ \t]*\r?$")
_CHUNKED = re.compile(rb"(?im)^transfer-encoding:")
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large", 429: b"Too Many Requests", 431: b"Request Header Fields Too Large"}
_OPEN: Counter[str] = Counter()  # connections open per client address (the event loop's thread alone counts)


def error_line(message: str) -> str:
    """``message`` on one line, at most ``MAX_ERROR_CHARS`` characters."""
    line = " ".join(message.split())
    return line if len(line) <= MAX_ERROR_CHARS else f"{line[: MAX_ERROR_CHARS - 20]}… ({len(line):,} characters)"


def refused_head(head: bytes) -> tuple[int, str]:
    """The status and the line for a request head the parser would not read (``head``: its first bytes)."""
    length = _LENGTH.search(head)
    if len(set(_LENGTH.findall(head))) > 1:
        return 400, "Content-Length: two headers that differ; send one"
    if length is not None and _CHUNKED.search(head):
        return 400, "Content-Length beside Transfer-Encoding: send one of them"
    if length is not None and length.group(1).isdigit():  # digits, past what the parser counts
        return 413, f"body: over {MAX_BODY_BYTES >> 20} MiB"
    return 400, "not an HTTP request this server reads (its request line or a header is malformed)"


class JsonErrorsProtocol(HttpToolsProtocol):
    """httptools as uvicorn runs it, with a bounded head and refusals in the API's one-line JSON."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head, self._heads = b"", 0  # the current head's bytes so far (at most the bound), heads read whole
        self._in_head, self._draining = True, False
        self._address, self._timer = None, None  # the client address counted in _OPEN; the head's or the body's deadline

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address, most = self.client[0] if self.client else "", int(SERVE_CLIENT_CONNECTIONS.number())
        if _OPEN[address] >= most:
            return self._refuse(429, f"{most} connections are open from {address} already ({SERVE_CLIENT_CONNECTIONS.name}): close one first")
        _OPEN[address] += 1
        self._address = address
        self._due("head")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._address is not None:
            _OPEN[self._address] -= 1
            if not _OPEN[self._address]:
                del _OPEN[self._address]
            self._address = None
        self._due(None)
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        if self._timer is None:  # a kept-alive connection's next request: its head is due from its first byte
            self._due("head")
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head, self._heads = False, self._heads + 1
        self._due("body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._due(None)
        super().on_message_complete()
        self._head, self._in_head = b"", True  # the connection's next request starts

    def _due(self, part: str | None) -> None:
        """The deadline of the request's ``part`` (``head`` or ``body``) in place of the one before; None: no deadline."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if part is not None:
            seconds = (SERVE_HEAD_TIMEOUT_S if part == "head" else SERVE_BODY_TIMEOUT_S).number()
            self._timer = self.loop.call_later(seconds, self._late, part, seconds)

    def _late(self, part: str, seconds: float) -> None:
        self._timer = None
        if not self.transport.is_closing():
            self._refuse(408, f"the request's {part} did not arrive within {seconds:g} s")

    def data_received(self, data: bytes) -> None:
        if self._draining:
            return
        room = MAX_HEAD_BYTES - len(self._head)
        if not self._in_head or len(data) <= room:
            if self._in_head:
                self._head += data
            return super().data_received(data)
        # this chunk passes the bound: the head must end within its first ``room`` bytes
        self._head += data[:room]
        heads = self._heads
        super().data_received(data[:room])
        if self._draining or self.transport.is_closing():
            return None
        if self._heads == heads:  # refused before the parser holds more of it
            return self._refuse(431, f"request line and headers: over {MAX_HEAD_BYTES >> 10} KiB")
        super().data_received(data[room:])

    def send_400_response(self, msg: str) -> None:
        self._refuse(*refused_head(self._head))

    def _refuse(self, status: int, said: str) -> None:
        self._due(None)
        body = json.dumps({"error": error_line(said)}).encode()
        head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % (status, _REASONS[status], len(body))
        self.transport.write(head + body)
        # a lingering close: closed with the client's bytes unread, the socket would be reset and the answer
        # lost; the rest of what it sends is read and dropped for up to LINGER_S
        self._draining = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


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
