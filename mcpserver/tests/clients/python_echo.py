"""Drives a stdio MCP server with the official Python SDK client.

usage: python_echo.py SERVER_COMMAND [ARGS...]
Prints one JSON object with what the client saw; exits non-zero on any surprise.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.shared.exceptions import MCPError as McpError
from mcp.client.stdio import stdio_client


async def main() -> None:
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    seen = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["protocolVersion"] = init.protocol_version
            seen["serverName"] = init.server_info.name
            tools = await session.list_tools()
            seen["tools"] = sorted(t.name for t in tools.tools)
            result = await session.call_tool("echo", {"text": "hello from python"})
            seen["echo"] = {"isError": result.is_error, "text": result.content[0].text}
            try:
                bad = await session.call_tool("echo", {"text": 42})
                seen["bad_arguments"] = {"isError": bad.is_error, "text": bad.content[0].text}
            except McpError as e:
                seen["bad_arguments"] = {"code": e.error.code, "message": e.error.message}
            try:
                unknown = await session.call_tool("no_such_tool", {})
                seen["unknown_tool"] = {"isError": unknown.is_error, "text": unknown.content[0].text}
            except McpError as e:
                seen["unknown_tool"] = {"code": e.error.code, "message": e.error.message}
    print(json.dumps(seen))


asyncio.run(main())
