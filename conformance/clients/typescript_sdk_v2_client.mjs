// Drive an MCP stdio server with the official TypeScript SDK v2 client
// (@modelcontextprotocol/client, StdioClientTransport) in one of its version-negotiation
// modes: connect, list the tools, call one, and print what happened as one JSON line.
//
// usage: node typescript_sdk_v2_client.mjs MODE TOOL ARGS_JSON -- CMD [ARG...]
//   MODE  legacy  the 2025 handshake only (`initialize`; the SDK's default)
//         auto    `server/discover` first (on a disposable sibling process), 2026-07-28 on
//                 modern evidence, else the `initialize` handshake
//         modern  pinned to 2026-07-28 (`{ pin: '2026-07-28' }`): no fallback
// Prints one JSON line {"sdkVersion", "mode", "protocolVersion", "era", "server", "tools",
// "list": {"ttlMs", "cacheScope"}, "call": {"tool", "isError", "text", "serverInfo"}} and
// exits 0, or {"sdkVersion", "mode", "error"} and exits 1. Judging the outcome (which
// revision, which text) is the caller's.
// The SDK is loaded from $AWF_TOOLS_DIR/node/node_modules (where .ci/run installs it),
// because this script lives outside that tree and ES modules ignore NODE_PATH.
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { readFileSync } from "node:fs";

const [mode, tool, argsJson, dashes, command, ...commandArgs] = process.argv.slice(2);
const modes = { legacy: "legacy", auto: "auto", modern: { pin: "2026-07-28" } };
if (!(mode in modes) || !tool || dashes !== "--" || !command) {
  console.error("usage: typescript_sdk_v2_client.mjs legacy|auto|modern TOOL ARGS_JSON -- CMD [ARG...]");
  process.exit(2);
}
const tools = process.env.AWF_TOOLS_DIR;
if (!tools) {
  console.error("AWF_TOOLS_DIR must name the tools folder (the one holding node/node_modules)");
  process.exit(2);
}
const pkg = join(tools, "node", "node_modules", "@modelcontextprotocol", "client");
const sdkVersion = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version;
const { Client } = await import(pathToFileURL(join(pkg, "dist", "index.mjs")).href);
const { StdioClientTransport } = await import(pathToFileURL(join(pkg, "dist", "stdio.mjs")).href);

const client = new Client(
  { name: "awf-conformance-ts-v2-client", version: "1.0.0" },
  // A short probe: a server that does not answer `server/discover` is legacy, not slow.
  { versionNegotiation: { mode: modes[mode], probe: { timeoutMs: 10_000 } } },
);
const transport = new StdioClientTransport({ command, args: commandArgs, stderr: "inherit" });
try {
  await client.connect(transport);
  const listed = await client.listTools();
  const names = listed.tools.map((t) => t.name);
  const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJson) });
  const text = result.content
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("\n");
  console.log(
    JSON.stringify({
      sdkVersion,
      mode,
      protocolVersion: client.getNegotiatedProtocolVersion() ?? null,
      era: client.getProtocolEra() ?? null,
      server: client.getServerVersion() ?? null,
      tools: names,
      // What only a 2026-07-28 answer carries: the list's cache hints, the result's serverInfo.
      list: { ttlMs: listed.ttlMs ?? null, cacheScope: listed.cacheScope ?? null },
      call: {
        tool,
        isError: result.isError ?? false,
        text,
        serverInfo: result._meta?.["io.modelcontextprotocol/serverInfo"] ?? null,
      },
    }),
  );
  await client.close();
} catch (error) {
  console.log(JSON.stringify({ sdkVersion, mode, error: String(error?.stack ?? error) }));
  await client.close().catch(() => {});
  process.exit(1);
}
