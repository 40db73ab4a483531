#!/usr/bin/env node
// bridge.mjs: serve one MCP stdio server over Streamable HTTP as MCP 2026-07-28 defines it
// (stateless: no initialize, no sessions, every request carries its own _meta), so that the
// official conformance suite (which only speaks HTTP) can test a stdio server at 2026-07-28.
//
// usage: node bridge.mjs [--port N] [--host 127.0.0.1] -- CMD [ARG...]
//        (or BRIDGE_PORT=N; port 0 = any free port). Prints the endpoint URL
//        (http://127.0.0.1:PORT/mcp) on stdout once listening; diagnostics go to stderr.
//
// One server process serves every HTTP request. Each POST body goes to it unchanged as one
// stdin line; the stdout line with the same JSON-RPC id is the HTTP answer: plain JSON, or
// an SSE stream when notifications for that request come first (notifications/progress with
// the request's progressToken; notifications/message; for subscriptions/listen, the
// notifications whose _meta["io.modelcontextprotocol/subscriptionId"] is the request's id).
// When the HTTP client goes away before the answer, the server gets notifications/cancelled
// (on HTTP, closing the stream is the cancellation; on stdio it is that notification).
// What stdio cannot carry is checked here, as streamable-http.mdx asks of the server:
// Origin/Host (403), POST only (405), JSON bodies (415/400), the MCP-Protocol-Version,
// Mcp-Method and Mcp-Name headers against the body (400, -32020), notifications (202).
// HTTP status of an answer: -32601 → 404; -32020/-32021/-32022, -32700/-32600 and -32602 for
// a request whose _meta lacks a required field → 400; anything else → 200.
import http from "node:http";
import { spawn } from "node:child_process";
import readline from "node:readline";

const argv = process.argv.slice(2);
const dashes = argv.indexOf("--");
if (dashes < 0 || dashes === argv.length - 1) {
  console.error("usage: node bridge.mjs [--port N] [--host H] -- CMD [ARG...]");
  process.exit(2);
}
const opts = argv.slice(0, dashes);
const [command, ...commandArgs] = argv.slice(dashes + 1);
const opt = (name, fallback) => (opts.includes(name) ? opts[opts.indexOf(name) + 1] : fallback);
const port = Number(opt("--port", process.env.BRIDGE_PORT ?? 0));
const host = opt("--host", "127.0.0.1");
const PATH = "/mcp";
const KEEPALIVE_MS = 15000;
const log = (msg) => process.stderr.write(`bridge: ${msg}\n`);

// ---- the stdio server -------------------------------------------------------------------
let child = null;
const inflight = new Map(); // JSON.stringify(id) -> pending request

function startChild() {
  const proc = spawn(command, commandArgs, { stdio: ["pipe", "pipe", "inherit"] });
  proc.on("error", (e) => log(`cannot start ${command}: ${e.message}`));
  proc.stdin.on("error", () => {}); // EPIPE when it dies; reported by "exit"
  proc.on("close", (code, signal) => {
    log(`server exited (${signal ?? code}); the next request starts a new one`);
    if (child === proc) child = null;
    for (const p of [...inflight.values()]) {
      finish(p, JSON.stringify({ jsonrpc: "2.0", id: p.id, error: { code: -32603, message: "the stdio server exited" } }), 502);
    }
  });
  readline.createInterface({ input: proc.stdout, crlfDelay: Infinity }).on("line", onServerLine);
  return proc;
}
const toServer = (line) => {
  child ??= startChild();
  child.stdin.write(line + "\n");
};

function onServerLine(line) {
  if (!line.trim()) return;
  let msg;
  try {
    msg = JSON.parse(line);
  } catch {
    return log(`server wrote a line that is not JSON: ${line.slice(0, 200)}`);
  }
  if (msg === null || typeof msg !== "object" || Array.isArray(msg)) return log(`server wrote a non-object: ${line.slice(0, 200)}`);
  if (msg.method === undefined) {
    // a response
    const p = inflight.get(JSON.stringify(msg.id));
    if (p) finish(p, line);
    else log(`answer to no request in flight (id ${JSON.stringify(msg.id)}): ${line.slice(0, 200)}`);
    return;
  }
  if (msg.id !== undefined) return log(`server sent a request (${msg.method}); 2026-07-28 forbids that; dropped`);
  const params = msg.params ?? {};
  const sub = params._meta?.["io.modelcontextprotocol/subscriptionId"];
  let target;
  if (sub !== undefined) target = inflight.get(JSON.stringify(sub));
  else if (params.progressToken !== undefined) {
    const token = JSON.stringify(params.progressToken);
    target = [...inflight.values()].find((p) => p.progressToken === token);
  } else if (msg.method === "notifications/message") {
    // stdio carries no request id on a log message: give it to the one request it can be for
    const open = [...inflight.values()].filter((p) => !p.listen);
    const asked = open.filter((p) => p.logLevel);
    target = open.length === 1 ? open[0] : asked.length === 1 ? asked[0] : undefined;
  }
  if (target) sseEvent(target, line);
  else log(`notification for no open request, dropped: ${line.slice(0, 200)}`);
}

// ---- HTTP answers -------------------------------------------------------------------------
function sseEvent(p, line) {
  if (!p.sse) {
    p.sse = true;
    p.res.writeHead(200, {
      "Content-Type": "text/event-stream",
      "Cache-Control": "no-cache, no-transform",
      Connection: "keep-alive",
      "X-Accel-Buffering": "no",
    });
    if (p.listen) p.keepalive = setInterval(() => p.res.write(":\n\n"), KEEPALIVE_MS);
  }
  p.res.write(`event: message\ndata: ${line}\n\n`);
}

function finish(p, line, status) {
  inflight.delete(p.key);
  p.done = true;
  clearInterval(p.keepalive);
  if (p.sse) {
    p.res.end(`event: message\ndata: ${line}\n\n`);
    return;
  }
  const msg = JSON.parse(line);
  p.res.writeHead(status ?? statusOf(msg.error, p.body), { "Content-Type": "application/json" });
  p.res.end(line);
}

function metaIncomplete(body) {
  const meta = body.params?._meta;
  const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  return !isObject(meta) || typeof meta["io.modelcontextprotocol/protocolVersion"] !== "string" || !isObject(meta["io.modelcontextprotocol/clientCapabilities"]);
}

function statusOf(error, body) {
  if (!error) return 200;
  if (error.code === -32601) return 404;
  if ([-32700, -32600, -32020, -32021, -32022].includes(error.code)) return 400;
  if (error.code === -32602 && metaIncomplete(body)) return 400;
  return 200;
}

function reject(res, status, code, message, id, extraHeaders = {}) {
  res.writeHead(status, { "Content-Type": "application/json", ...extraHeaders });
  res.end(JSON.stringify({ jsonrpc: "2.0", ...(id !== undefined && { id }), error: { code, message } }));
}

// ---- requests -------------------------------------------------------------------------------
const LOCAL = new Set(["localhost", "127.0.0.1", "[::1]", "::1"]);
const hostnameOf = (hostHeader) => {
  try {
    return new URL(`http://${hostHeader}`).hostname;
  } catch {
    return null;
  }
};
const originIsLocal = (origin) => {
  try {
    const u = new URL(origin);
    return (u.protocol === "http:" || u.protocol === "https:") && LOCAL.has(u.hostname);
  } catch {
    return false;
  }
};
// Mcp-Name may carry the Base64 sentinel =?base64?...?= (streamable-http.mdx, Value Encoding)
const decodeName = (v) => {
  const m = /^=\?base64\?(.*)\?=$/.exec(v);
  return m ? Buffer.from(m[1], "base64").toString("utf8") : v;
};
const NAME_FIELD = { "tools/call": "name", "prompts/get": "name", "resources/read": "uri", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId" };

function headerMismatch(req, body) {
  const header = (name) => (req.headers[name] === undefined ? undefined : String(req.headers[name]).trim());
  const version = header("mcp-protocol-version");
  const bodyVersion = body.params?._meta?.["io.modelcontextprotocol/protocolVersion"];
  if (version === undefined) return "the MCP-Protocol-Version header is missing";
  if (typeof bodyVersion === "string" && bodyVersion !== version) return `MCP-Protocol-Version header ${version} does not match _meta protocolVersion ${bodyVersion}`;
  const method = header("mcp-method");
  if (method === undefined) return "the Mcp-Method header is missing";
  if (method !== body.method) return `Mcp-Method header ${method} does not match body method ${body.method}`;
  const field = NAME_FIELD[body.method];
  const bodyName = field && body.params?.[field];
  if (typeof bodyName === "string") {
    const name = header("mcp-name");
    if (name === undefined) return `the Mcp-Name header is missing (body params.${field} is ${bodyName})`;
    if (decodeName(name) !== bodyName) return `Mcp-Name header ${name} does not match body params.${field} ${bodyName}`;
  }
  return null;
}

function onRequest(req, res, text) {
  const url = new URL(req.url, "http://x");
  if (url.pathname !== PATH) return reject(res, 404, -32601, `no MCP endpoint here; it is ${PATH}`);
  const hostname = hostnameOf(req.headers.host ?? "");
  if (!hostname || !LOCAL.has(hostname)) return reject(res, 403, -32000, `Forbidden: Host ${req.headers.host} is not local`);
  if (req.headers.origin !== undefined && !originIsLocal(req.headers.origin)) return reject(res, 403, -32000, `Forbidden: Origin ${req.headers.origin} is not local`);
  if (req.method !== "POST") return reject(res, 405, -32000, "Method not allowed: this endpoint takes POST only (2026-07-28)", undefined, { Allow: "POST" });
  if (!/^application\/json\b/i.test(req.headers["content-type"] ?? "")) return reject(res, 415, -32000, "Unsupported Media Type: Content-Type must be application/json");
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    return reject(res, 400, -32700, "Parse error: the body is not JSON", null);
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) return reject(res, 400, -32600, "Invalid Request: the body must be one JSON-RPC request or notification (no batches)", null);
  if (typeof body.method !== "string") return reject(res, 400, -32600, "Invalid Request: JSON-RPC responses cannot be posted to this endpoint", body.id ?? null);
  // one stdin line: the body unchanged, unless it holds a raw newline (pretty-printed JSON)
  const line = /[\r\n]/.test(text) ? JSON.stringify(body) : text.trim();
  if (body.id === undefined) {
    toServer(line);
    res.writeHead(202).end();
    return;
  }
  const mismatch = headerMismatch(req, body);
  if (mismatch) return reject(res, 400, -32020, `Header mismatch: ${mismatch}`, body.id);
  const key = JSON.stringify(body.id);
  if (inflight.has(key)) return reject(res, 400, -32600, `Invalid Request: a request with id ${key} is already in flight`, body.id);
  const meta = body.params?._meta ?? {};
  const p = {
    id: body.id,
    key,
    res,
    body,
    listen: body.method === "subscriptions/listen",
    progressToken: meta.progressToken === undefined ? undefined : JSON.stringify(meta.progressToken),
    logLevel: meta["io.modelcontextprotocol/logLevel"] !== undefined,
    sse: false,
    done: false,
  };
  inflight.set(key, p);
  res.on("close", () => {
    if (p.done) return;
    // the client went away first: that cancels the request (and ends a subscription)
    inflight.delete(key);
    clearInterval(p.keepalive);
    toServer(JSON.stringify({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: p.id, reason: "HTTP client disconnected" } }));
  });
  toServer(line);
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => onRequest(req, res, Buffer.concat(chunks).toString("utf8")));
});
server.listen(port, host, () => {
  child = startChild();
  process.stdout.write(`http://${host}:${server.address().port}${PATH}\n`);
});

// End of our own life: close the server's stdin (its graceful shutdown), then go.
function shutdown() {
  server.close();
  for (const p of inflight.values()) p.res.destroy();
  if (!child) process.exit(0);
  const proc = child;
  proc.stdin.end();
  proc.on("exit", () => process.exit(0));
  setTimeout(() => proc.kill("SIGKILL"), 3000).unref();
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
