// Drive an MCP stdio server with the MCP Inspector CLI (@modelcontextprotocol/inspector
// --cli): list the tools, call one, and check the answer. Each Inspector run is its own
// client session (initialize, one method, close).
//
// usage: node inspector_cli.mjs TOOL ARGS_JSON EXPECTED_TEXT -- CMD [ARG...]
// ARGS_JSON must be a flat object: the Inspector takes arguments as key=value pairs.
// The Inspector is run from $AWF_TOOLS_DIR/node/node_modules with this same Node binary
// (it needs Node >= 22.19).
import { spawnSync } from "node:child_process";
import { join } from "node:path";

const [tool, argsJson, expected, dashes, ...command] = process.argv.slice(2);
if (dashes !== "--" || command.length === 0) {
  console.error("usage: inspector_cli.mjs TOOL ARGS_JSON EXPECTED_TEXT -- CMD [ARG...]");
  process.exit(2);
}
const tools = process.env.AWF_TOOLS_DIR;
if (!tools) {
  console.error("AWF_TOOLS_DIR must name the tools folder (the one holding node/node_modules)");
  process.exit(2);
}
const launcher = join(tools, "node", "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js");

function inspector(...args) {
  const run = spawnSync(process.execPath, [launcher, "--cli", ...command, ...args], { encoding: "utf8", timeout: 60_000 });
  if (run.status !== 0) {
    console.error(`FAIL: inspector ${args.join(" ")} exited ${run.status ?? run.signal}\n${run.stdout}\n${run.stderr}`);
    process.exit(1);
  }
  return JSON.parse(run.stdout);
}

const names = inspector("--method", "tools/list").tools.map((t) => t.name);
console.log(`tools: ${names.join(", ")}`);
if (!names.includes(tool)) {
  console.error(`FAIL: tool ${tool} is not listed`);
  process.exit(1);
}
const pairs = Object.entries(JSON.parse(argsJson)).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`);
const callArgs = ["--method", "tools/call", "--tool-name", tool];
if (pairs.length > 0) callArgs.push("--tool-arg", ...pairs);
const result = inspector(...callArgs);
const texts = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text);
console.log(`call ${tool}: isError=${result.isError} text=${JSON.stringify(texts)}`);
if (result.isError || !texts.some((t) => t.includes(expected))) {
  console.error(`FAIL: expected a successful result containing ${JSON.stringify(expected)}`);
  process.exit(1);
}
console.log("OK");
