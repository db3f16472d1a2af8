"""A fake OpenAI-compatible chat server on 127.0.0.1 whose faults are set on demand (llama.cpp's cannot
be): the LLM fault tests and the reliability probe (``benchmarks/reliability.py``) drive it."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"


def send_json(handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict | None = None) -> None:
    """Answer a request with a JSON ``body``; a client that already gave up (a slow answer) is no error."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    try:
        handler.wfile.write(body)
    except BrokenPipeError:
        pass


class LoopbackServer:
    """An HTTP server on a free loopback port, answering with ``handler`` on a thread of its own until closed."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FakeServer(LoopbackServer):
    """Answers /v1/chat/completions as ``mode`` says: good, garbage, 500, 429 (Retry-After), slow,
    not-json, echo-key (401 repeating the request's key, as several servers do)."""

    def __init__(self) -> None:
        self.mode = "good"
        self.requests = 0
        self.retry_after = "1"
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                server.requests += 1
                mode = server.mode
                if mode == "echo-key":
                    key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    return send_json(self, 401, json.dumps({"error": {"message": f"Incorrect API key provided: {key}", "code": "invalid_api_key"}}).encode())
                if mode == "500":
                    return send_json(self, 500, b'{"error": {"message": "boom"}}')
                if mode == "429":
                    return send_json(self, 429, b'{"error": {"message": "slow down"}}', {"Retry-After": server.retry_after})
                if mode == "slow":
                    time.sleep(3)
                if mode == "not-json":
                    return send_json(self, 200, b"<html>proxy error</html>")
                content = '{"entities": ["Marie Curie", "Paris"]}' if mode in ("good", "slow") else "lorem ipsum, no json here"
                body = {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": MODEL,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
                }
                send_json(self, 200, json.dumps(body).encode())

        super().__init__(Handler)
