#!/usr/bin/env node
// ts_sdk_server.mjs: a stdio MCP server built on the official TypeScript SDK v2
// (@modelcontextprotocol/server, serveStdio) with the tools the official conformance
// scenarios call, as a reference to check bridge.mjs and run.sh against (and to compare our
// Rust servers with). See README.md here for the tool list and what each must do.
//
// usage: node ts_sdk_server.mjs [--modern-only] [--sdk-as-is]
//   default: both eras (initialize → 2025 era, a request with a 2026-07-28 _meta → stateless era)
//   --modern-only: serveStdio's legacy: 'reject' (initialize gets -32022)
//   --sdk-as-is: without the checks below that make up for the SDK's stdio entry, which
//     (2.4.0) checks the 2026-07-28 envelope on a connection's opening message only and pins
//     the connection's era on it: later requests naming an unknown version are served; a
//     first request with no _meta pins the 2025 era (so every later 2026-07-28 request
//     fails), or in --modern-only gets -32022 where the spec asks -32602.
// The SDK is loaded from $AWF_TOOLS_DIR/node/node_modules (where .ci/run installs it),
// because this script lives outside that tree and ES modules ignore NODE_PATH.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const tools = process.env.AWF_TOOLS_DIR;
if (!tools) {
  console.error("AWF_TOOLS_DIR must name the tools folder (the one holding node/node_modules)");
  process.exit(2);
}
const pkg = (p) => import(pathToFileURL(join(tools, "node", "node_modules", "@modelcontextprotocol", "server", "dist", p)).href);
const { Server, MissingRequiredClientCapabilityError, ProtocolError, ProtocolErrorCode } = await pkg("index.mjs");
const { serveStdio, StdioServerTransport } = await pkg("stdio.mjs");

const modernOnly = process.argv.includes("--modern-only");
const asIs = process.argv.includes("--sdk-as-is");

// The per-request envelope check of basic/index.mdx ("Per-request protocol fields") on every
// request, not only the first: -32602 when a required _meta field is missing, -32022 for a
// version other than 2026-07-28. A request with none of the three envelope keys in _meta is
// 2025-era traffic once `initialize` was seen (and `initialize` and `ping` themselves), and
// is left to the SDK; before that (and always in --modern-only) it is a malformed 2026-07-28
// request. Without this, one malformed first request pins the SDK's connection to 2025.
const SUPPORTED = ["2026-07-28"];
const ENVELOPE_KEYS = ["protocolVersion", "clientCapabilities", "clientInfo"].map((k) => `io.modelcontextprotocol/${k}`);
let sawInitialize = false;
function envelopeError(m) {
  if (typeof m?.method !== "string" || m.id === undefined) return undefined;
  const meta = m.params?._meta;
  const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  const claims = isObject(meta) && ENVELOPE_KEYS.some((k) => k in meta);
  if (!claims && m.method === "initialize") sawInitialize = true;
  if (!claims && (m.method === "initialize" || (!modernOnly && (sawInitialize || m.method === "ping")))) return undefined;
  const err = (code, message, data) => ({ jsonrpc: "2.0", id: m.id, error: { code, message, ...(data && { data }) } });
  const version = isObject(meta) ? meta["io.modelcontextprotocol/protocolVersion"] : undefined;
  if (typeof version !== "string") return err(-32602, "Invalid params: _meta lacks io.modelcontextprotocol/protocolVersion");
  if (!isObject(meta["io.modelcontextprotocol/clientCapabilities"])) return err(-32602, "Invalid params: _meta lacks io.modelcontextprotocol/clientCapabilities");
  if (!SUPPORTED.includes(version)) return err(-32022, `Unsupported protocol version: ${version}`, { supported: SUPPORTED, requested: version });
  return undefined;
}
function checkedStdio() {
  const inner = new StdioServerTransport();
  return {
    start: () => inner.start(),
    send: (message, options) => inner.send(message, options),
    close: () => inner.close(),
    set onmessage(handler) {
      inner.onmessage = (message, extra) => {
        const error = envelopeError(message);
        if (error) inner.send(error).catch(() => {});
        else handler(message, extra);
      };
    },
    set onerror(handler) {
      inner.onerror = handler;
    },
    set onclose(handler) {
      inner.onclose = handler;
    },
  };
}

// a 1x1 red PNG, and a 10 ms silent 8 kHz mono 8-bit WAV
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV = (() => {
  const samples = 80;
  const b = Buffer.alloc(44 + samples, 128);
  b.write("RIFF", 0);
  b.writeUInt32LE(36 + samples, 4);
  b.write("WAVEfmt ", 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(8000, 24);
  b.writeUInt32LE(8000, 28);
  b.writeUInt16LE(1, 32);
  b.writeUInt16LE(8, 34);
  b.write("data", 36);
  b.writeUInt32LE(samples, 40);
  return b.toString("base64");
})();

// the JSON Schema 2020-12 fixture of the json-schema-2020-12 scenario, verbatim
const JSON_SCHEMA_2020_12 = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  type: "object",
  $defs: { address: { $anchor: "addressDef", type: "object", properties: { street: { type: "string" }, city: { type: "string" } } } },
  properties: {
    name: { type: "string" },
    address: { $ref: "#/$defs/address" },
    contactMethod: { type: "string", enum: ["phone", "email"] },
    phone: { type: "string" },
    email: { type: "string" },
  },
  allOf: [{ anyOf: [{ required: ["phone"] }, { required: ["email"] }] }],
  if: { properties: { contactMethod: { const: "phone" } }, required: ["contactMethod"] },
  then: { required: ["phone"] },
  else: { required: ["email"] },
  additionalProperties: false,
};

const noArgs = { type: "object", properties: {} };
const text = (t) => ({ content: [{ type: "text", text: t }] });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

serveStdio(
  () => {
    const server = new Server({ name: "awf-official-ts-sdk-server", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } });
    let extra = 0;
    const TOOLS = {
      // first in the list: the header-validation scenario calls the first tool with {}
      test_simple_text: { description: "Returns a simple text", run: async () => text("This is a simple text response for testing.") },
      test_image_content: { description: "Returns an image", run: async () => ({ content: [{ type: "image", data: PNG, mimeType: "image/png" }] }) },
      test_audio_content: { description: "Returns audio", run: async () => ({ content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] }) },
      test_embedded_resource: {
        description: "Returns an embedded resource",
        run: async () => ({ content: [{ type: "resource", resource: { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." } }] }),
      },
      test_multiple_content_types: {
        description: "Returns text, image and resource",
        run: async () => ({
          content: [
            { type: "text", text: "Multiple content types test:" },
            { type: "image", data: PNG, mimeType: "image/png" },
            { type: "resource", resource: { uri: "test://mixed-content-resource", mimeType: "application/json", text: JSON.stringify({ test: "data", value: 123 }) } },
          ],
        }),
      },
      test_error_handling: {
        description: "Always fails (isError result)",
        run: async () => ({ isError: true, content: [{ type: "text", text: "This tool intentionally returns an error for testing" }] }),
      },
      test_tool_with_progress: {
        description: "Reports progress 0, 50, 100 of 100 when given a progressToken",
        run: async (params, ctx) => {
          const token = params._meta?.progressToken;
          for (const progress of [0, 50, 100]) {
            if (token !== undefined) await ctx.mcpReq.notify({ method: "notifications/progress", params: { progressToken: token, progress, total: 100, message: `Completed step ${progress} of 100` } });
            if (progress < 100) await sleep(50);
          }
          return text(`progress done (token ${JSON.stringify(token ?? null)})`);
        },
      },
      json_schema_2020_12_tool: {
        description: "Tool with JSON Schema 2020-12 features (SEP-1613)",
        inputSchema: JSON_SCHEMA_2020_12,
        run: async (params) => text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(params.arguments ?? {})}`),
      },
      // 2026-07-28 diagnostics of the server-stateless scenario
      test_missing_capability: {
        description: "Needs the client's sampling capability: -32021 without it",
        run: async (params, ctx) => {
          const caps = ctx.mcpReq.envelope?.["io.modelcontextprotocol/clientCapabilities"] ?? server.getClientCapabilities() ?? {};
          if (!caps.sampling) throw new MissingRequiredClientCapabilityError({ requiredCapabilities: { sampling: {} } });
          return text("Success");
        },
      },
      test_streaming_elicitation: { description: "Answers with a plain result (never a server-to-client request)", run: async () => text("Streaming complete") },
      test_logging_tool: { description: "Would log only when _meta logLevel is set; this server has no logging", run: async () => text("Logging evaluated") },
      test_trigger_tool_change: {
        description: "Adds a tool, so the tool list changes (notifications/tools/list_changed)",
        run: async () => {
          extra += 1;
          TOOLS[`test_added_${extra}`] = { description: "Added by test_trigger_tool_change", run: async () => text("added") };
          await server.sendToolListChanged();
          return text("Mutation triggered");
        },
      },
    };
    server.setRequestHandler("tools/list", async () => ({
      tools: Object.entries(TOOLS).map(([name, t]) => ({ name, description: t.description, inputSchema: t.inputSchema ?? noArgs })),
    }));
    server.setRequestHandler("tools/call", async (request, ctx) => {
      const tool = TOOLS[request.params.name];
      if (!tool) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
      return tool.run(request.params, ctx);
    });
    return server;
  },
  { legacy: modernOnly ? "reject" : "serve", ...(!asIs && { transport: checkedStdio() }), onerror: (e) => process.stderr.write(`ts_sdk_server: ${e.message}\n`) },
);
