// Drive an MCP stdio server with the official TypeScript SDK client
// (@modelcontextprotocol/sdk, StdioClientTransport): initialize, list the tools, call one,
// and check the answer.
//
// usage: node typescript_sdk_client.mjs TOOL ARGS_JSON EXPECTED_TEXT -- CMD [ARG...]
// The SDK is loaded from $AWF_TOOLS_DIR/node/node_modules (where .ci/run installs it),
// because this script lives outside that tree and ES modules ignore NODE_PATH.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [tool, argsJson, expected, dashes, command, ...commandArgs] = process.argv.slice(2);
if (dashes !== "--" || !command) {
  console.error("usage: typescript_sdk_client.mjs TOOL ARGS_JSON EXPECTED_TEXT -- CMD [ARG...]");
  process.exit(2);
}
const tools = process.env.AWF_TOOLS_DIR;
if (!tools) {
  console.error("AWF_TOOLS_DIR must name the tools folder (the one holding node/node_modules)");
  process.exit(2);
}
const sdk = (p) => import(pathToFileURL(join(tools, "node", "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const client = new Client({ name: "awf-conformance-ts-client", version: "1.0.0" });
const transport = new StdioClientTransport({ command, args: commandArgs, stderr: "inherit" });
await client.connect(transport);
console.log(`initialized: server ${JSON.stringify(client.getServerVersion())}`);
const listed = await client.listTools();
const names = listed.tools.map((t) => t.name);
console.log(`tools: ${names.join(", ")}`);
let failure = null;
if (!names.includes(tool)) {
  failure = `tool ${tool} is not listed`;
} else {
  const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJson) });
  const texts = result.content.filter((c) => c.type === "text").map((c) => c.text);
  console.log(`call ${tool}: isError=${result.isError} text=${JSON.stringify(texts)}`);
  if (result.isError || !texts.some((t) => t.includes(expected))) {
    failure = `expected a successful result containing ${JSON.stringify(expected)}`;
  }
}
await client.close();
if (failure) {
  console.error(`FAIL: ${failure}`);
  process.exit(1);
}
console.log("OK");
