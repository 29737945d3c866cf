"""An MCP client no one at cordon wrote (the `mcp` package from PyPI)
against `cordon mcp` (stdio) or `/mcp` on `cordon serve` (streamable HTTP).

usage: client.py stdio CORDON_BINARY ARGS... | client.py http URL TOKEN THREAD
Prints one JSON document: the tools listed and what each call returned.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def text_of(result):
    return {
        "is_error": bool(result.is_error),
        "text": "".join(getattr(c, "text", "") for c in result.content),
    }


async def session_calls(session, calls):
    await session.initialize()
    listed = await session.list_tools()
    out = {"tools": {t.name: t.input_schema for t in listed.tools}, "calls": []}
    for name, args in calls:
        out["calls"].append(text_of(await session.call_tool(name, args)))
    return out


async def main():
    mode = sys.argv[1]
    calls = json.loads(sys.stdin.read())
    if mode == "stdio":
        params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
        async with stdio_client(params) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                out = await session_calls(session, calls)
    else:
        url, token, thread = sys.argv[2], sys.argv[3], sys.argv[4]
        headers = {"Authorization": f"Bearer {token}"}
        if thread:
            headers["cordon-thread"] = thread
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    out = await session_calls(session, calls)
    print(json.dumps(out))


asyncio.run(main())
