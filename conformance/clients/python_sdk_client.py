"""Drive an MCP stdio server with the official Python SDK client (mcp==2.3.0):
initialize, list the tools, call one, and check the answer.

usage: python python_sdk_client.py TOOL ARGS_JSON EXPECTED_TEXT -- CMD [ARG...]
Exit 0 when TOOL is listed and its result is not an error and contains EXPECTED_TEXT.
"""

import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client


async def main(tool, args, expected, command):
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            print(f"initialized: protocol {init.protocol_version}, server {init.server_info.name}")
            listed = await session.list_tools()
            names = [t.name for t in listed.tools]
            print(f"tools: {', '.join(names)}")
            if tool not in names:
                sys.exit(f"FAIL: tool {tool!r} is not listed")
            result = await session.call_tool(tool, args)
            texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
            print(f"call {tool}: isError={result.is_error} text={texts!r}")
            if result.is_error or not any(expected in t for t in texts):
                sys.exit(f"FAIL: expected a successful result containing {expected!r}")
    print("OK")


if __name__ == "__main__":
    if len(sys.argv) < 6 or sys.argv[4] != "--":
        sys.exit(__doc__)
    anyio.run(main, sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[5:])
