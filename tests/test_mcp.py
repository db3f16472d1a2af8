"""graphlake for agents over MCP, through the ``mcp`` package's own client: over stdio (``graphlake mcp``)
the tools are listed and search a lake (the write tools only with ``--writes``); over streamable HTTP at
``/mcp`` of ``graphlake serve`` a client with the API key upserts, then finds what it wrote, and one
without the key is refused."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from graphlake.api import GraphLake
from served import KEY, Server

READING = {"search", "get_documents", "list_documents", "corpora", "methods"}


def _graphlake() -> str:
    return shutil.which("graphlake") or str(Path(sys.executable).parent / "graphlake")


def test_an_agent_searches_over_stdio_and_writes_over_http_with_the_key(lake, tmp_path):
    opened = GraphLake(lake)
    opened.create_corpus("field")
    opened.upsert("field", [{"id": "otter", "text": "Sea otters keep the kelp forest alive by eating urchins.", "metadata": {"year": 2019}}])

    async def over_stdio() -> tuple[set[str], dict, dict, bool]:
        params = StdioServerParameters(command=_graphlake(), args=["mcp"], env={**os.environ, "GRAPHLAKE_HOME": str(lake), "DAGSTER_HOME": str(lake / "dagster")})
        async with Client(params) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            found = await client.call_tool("search", {"corpus": "field", "method": "rrf", "query": "who eats the urchins?", "k": 2})
            bad = await client.call_tool("search", {"corpus": "field", "method": "rrf", "query": "x", "k": 0})
            return set(tools), tools["search"].input_schema, found.structured_content, bad.is_error

    names, schema, found, refused = asyncio.run(over_stdio())
    assert names == READING  # no write tool without --writes
    assert schema["properties"]["k"]["maximum"] == 1000 and "query" in schema["required"]  # the HTTP request model's bounds
    assert found["hits"][0]["doc_id"] == "otter" and found["hits"][0]["metadata"] == {"year": 2019}
    assert refused

    server = Server(lake, tmp_path / "server.log", KEY)
    try:

        async def over_http(headers: dict[str, str]) -> tuple[set[str], dict, dict]:
            async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0)) as http, Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                written = await client.call_tool("upsert", {"corpus": "field", "documents": [{"id": "gull", "text": "A gull stole the survey team's sandwich on the jetty."}]})
                found = await client.call_tool("search", {"corpus": "field", "method": "bm25", "query": "sandwich jetty", "k": 1})
                return tools, written.structured_content, found.structured_content

        tools, written, found = asyncio.run(over_http({"Authorization": f"Bearer {KEY}"}))
        assert tools == READING | {"upsert", "delete"}
        assert written["op"] == "upsert" and written["documents"] == 1
        assert found["hits"][0]["doc_id"] == "gull"
        with pytest.raises(ExceptionGroup) as refusal:  # the client's task group fails on the server's answer
            asyncio.run(over_http({}))
        assert refusal.group_contains(MCPError, match="error response")
        assert '"POST /mcp HTTP/1.1" 401' in server.log.read_text()  # refused by the API key, before any tool
        assert [d.id for d in opened.get_documents("field", ["gull"])] == ["gull"]
    finally:
        server.stop()
