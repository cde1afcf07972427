#!/usr/bin/env bash
# Interop check of Aquifer's agent adapters against the official TypeScript
# clients: @modelcontextprotocol/sdk (MCP over stdio and streamable HTTP) and
# @a2a-js/sdk (A2A over JSON-RPC). It builds aquiferd, installs the clients
# from npm into a temporary folder, starts aquiferd on a loopback port with
# AQUIFER_ADAPTER=http,a2a,mcp-http, and drives it (plus a second aquiferd
# in mcp-stdio mode, launched by the MCP client itself).
#
# Run by `make interop`; not part of `make test` (it needs node, npm and the
# npm registry). Exit status 0 means every check passed.
#
# Versions can be overridden: MCP_SDK_VERSION, A2A_SDK_VERSION.
set -euo pipefail

MCP_SDK_VERSION=${MCP_SDK_VERSION:-1.32.2}
A2A_SDK_VERSION=${A2A_SDK_VERSION:-1.3.0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

for tool in go node npm curl; do
	command -v "$tool" >/dev/null || { echo "interop: $tool is required" >&2; exit 2; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/aquifer-interop.XXXXXX")
DAEMON_PID=""
cleanup() {
	if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID" 2>/dev/null || true
		wait "$DAEMON_PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

echo "== building aquiferd"
(cd "$ROOT" && go build -o "$WORK/aquiferd" ./cmd/aquiferd)

echo "== installing @modelcontextprotocol/sdk@$MCP_SDK_VERSION and @a2a-js/sdk@$A2A_SDK_VERSION into $WORK/node"
mkdir -p "$WORK/node"
(
	cd "$WORK/node"
	npm init -y >/dev/null
	npm pkg set type=module >/dev/null
	npm install --no-audit --no-fund --loglevel=error \
		"@modelcontextprotocol/sdk@$MCP_SDK_VERSION" "@a2a-js/sdk@$A2A_SDK_VERSION" >/dev/null
)
echo "   installed: $(cd "$WORK/node" && node -e 'for (const p of ["@modelcontextprotocol/sdk","@a2a-js/sdk"]) process.stdout.write(p+"@"+JSON.parse(require("fs").readFileSync("node_modules/"+p+"/package.json")).version+" ")' 2>/dev/null || true)"

PORT=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
BASE="http://127.0.0.1:$PORT"
echo "== starting aquiferd (http,a2a,mcp-http) on $BASE"
AQUIFER_ADAPTER=http,a2a,mcp-http AQUIFER_HOST=127.0.0.1 PORT=$PORT \
	AQUIFER_A2A_PUBLIC_URL="$BASE" AQUIFER_DATA_DIR="$WORK/data-http" AQUIFER_LOG_LEVEL=warn \
	"$WORK/aquiferd" 2>"$WORK/aquiferd-http.log" &
DAEMON_PID=$!
for _ in $(seq 1 100); do
	curl -fs "$BASE/health" >/dev/null 2>&1 && break
	kill -0 "$DAEMON_PID" 2>/dev/null || { echo "aquiferd exited:"; cat "$WORK/aquiferd-http.log"; exit 1; }
	sleep 0.1
done
curl -fs "$BASE/health" >/dev/null || { echo "aquiferd did not become healthy"; cat "$WORK/aquiferd-http.log"; exit 1; }

cat >"$WORK/node/interop.mjs" <<'EOF'
// Drives aquiferd with the official TypeScript clients. Prints one line per
// check; exits non-zero on the first failure.
import http from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientFactory, JsonRpcTransportFactory, DefaultAgentCardResolver } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const BASE = process.env.AQUIFER_URL;
const BIN = process.env.AQUIFER_BIN;
const WORK = process.env.WORK;
let failures = 0;
const ok = (what, detail = '') => console.log(`ok    ${what}${detail ? ' — ' + detail : ''}`);
const fail = (what, detail) => { failures++; console.log(`FAIL  ${what} — ${detail}`); };
const check = (cond, what, detail) => (cond ? ok(what, detail) : fail(what, detail));

// A loopback upstream: /gate/* waits until released; everything else answers at once.
let release;
const released = new Promise((r) => (release = r));
const arrivals = new Map(); // path → resolve, for waiting until a job reaches the upstream
const arrived = (path) => new Promise((r) => arrivals.set(path, r));
const upstream = http.createServer(async (req, res) => {
  arrivals.get(req.url)?.();
  if (req.url.startsWith('/gate/')) await released;
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ path: req.url, method: req.method }));
});
// A push-notification receiver.
const pushes = [];
const receiver = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => { try { pushes.push({ token: req.headers['x-a2a-notification-token'], task: JSON.parse(body) }); } catch {} res.end(); });
});
await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
const UP = `http://127.0.0.1:${upstream.address().port}`;
const PUSH = `http://127.0.0.1:${receiver.address().port}`;
const stamp = Date.now();

function structured(res) {
  if (res.isError) throw new Error('tool error: ' + JSON.stringify(res.content));
  return res.structuredContent ?? JSON.parse(res.content[0].text);
}

async function mcpChecks(label, transport) {
  const client = new Client({ name: 'aquifer-interop', version: '1.0.0' });
  await client.connect(transport);
  const v = client.getServerVersion();
  ok(`${label}: connected`, `server ${v?.name} ${v?.version}`);
  const tools = (await client.listTools()).tools.map((t) => t.name).sort();
  check(tools.length === 11 && tools.includes('aquifer_cancel_job') && tools.includes('aquifer_enqueue_job') && tools.includes('aquifer_get_job'),
    `${label}: tools/list`, tools.join(', '));
  const tmpl = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
  check(tmpl.includes('aquifer://jobs/{job_id}'), `${label}: resources/templates/list`, tmpl.join(', '));
  const enq = structured(await client.callTool({ name: 'aquifer_enqueue_job', arguments: {
    user_id: 'interop', idempotent_key: `${label}-${stamp}`, url: `${UP}/${label}`, method: 'POST', body: 'hello' } }));
  check(/^[0-9a-f]{32}$/.test(enq.job_id), `${label}: aquifer_enqueue_job`, `job_id ${enq.job_id} status ${enq.status}`);
  const job = structured(await client.callTool({ name: 'aquifer_get_job', arguments: { job_id: enq.job_id, wait_seconds: 20 } }));
  check(job.status === 'completed' && job.response_status === 200, `${label}: aquifer_get_job wait_seconds=20`,
    `status ${job.status}, response_status ${job.response_status}, body ${job.body}`);
  const rr = await client.readResource({ uri: `aquifer://jobs/${enq.job_id}` });
  const doc = JSON.parse(rr.contents[0].text);
  check(doc.job_id === enq.job_id && doc.status === 'completed', `${label}: resources/read aquifer://jobs/{id}`, `status ${doc.status}`);
  const bad = await client.callTool({ name: 'aquifer_enqueue_job', arguments: { user_id: 'interop', idempotent_key: 'bad', url: 'ftp://nope' } });
  check(bad.isError === true, `${label}: invalid job is a tool error`, bad.content?.[0]?.text);
  const health = structured(await client.callTool({ name: 'aquifer_health', arguments: {} }));
  check(health.status === 'ok', `${label}: aquifer_health`, `status ${health.status}`);
  await client.close();
}

async function a2aChecks() {
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ legacyCompat: { enabled: true } })],
    cardResolver: new DefaultAgentCardResolver({ legacyCompat: { enabled: true } }),
  });
  const client = await factory.createFromUrl(BASE);
  const card = await client.getAgentCard();
  check(card.name === 'Aquifer' && card.supportedInterfaces?.[0]?.url === `${BASE}/a2a`, 'a2a: agent card',
    `${card.name}, ${card.supportedInterfaces?.[0]?.protocolBinding} ${card.supportedInterfaces?.[0]?.url} (protocol ${card.supportedInterfaces?.[0]?.protocolVersion}), skills ${card.skills.map((s) => s.id).join(',')}`);

  const msg = (data, extra = {}) => ({ message: { messageId: crypto.randomUUID(), role: Role.ROLE_USER,
    parts: [{ content: { $case: 'data', value: data } }] }, ...extra });

  const task = await client.sendMessage(msg({ user_id: 'interop', idempotent_key: `a2a-send-${stamp}`, url: `${UP}/a2a-send`, method: 'POST' }));
  const art = task.artifacts?.[0]?.parts?.[0]?.content?.value;
  check(task.status?.state === TaskState.TASK_STATE_COMPLETED && art?.response_status === 200, 'a2a: message/send (blocking)',
    `task ${task.id} ${TaskState[task.status?.state]}, artifact response_status ${art?.response_status} body ${art?.body}`);

  const states = [];
  let streamArtifact = false;
  for await (const ev of client.sendMessageStream(msg({ user_id: 'interop', idempotent_key: `a2a-stream-${stamp}`, url: `${UP}/a2a-stream` }))) {
    const p = ev.payload;
    if (p?.$case === 'task') states.push(TaskState[p.value.status.state]);
    if (p?.$case === 'statusUpdate') states.push(TaskState[p.value.status.state]);
    if (p?.$case === 'artifactUpdate') { streamArtifact = true; states.push('artifact'); }
  }
  check(states.at(-1) === 'TASK_STATE_COMPLETED' && streamArtifact, 'a2a: message/stream', states.join(' → '));

  const got = await client.getTask({ id: task.id });
  check(got.status?.state === TaskState.TASK_STATE_COMPLETED, 'a2a: tasks/get', `${got.id} ${TaskState[got.status?.state]}`);

  // A job held at the upstream keeps the next one to that upstream queued.
  const blocking = (extra) => ({ configuration: { returnImmediately: true, acceptedOutputModes: [], ...extra } });
  const busyArrived = arrived('/gate/busy');
  const busy = await client.sendMessage(msg({ user_id: 'interop', idempotent_key: `a2a-busy-${stamp}`, url: `${UP}/gate/busy` }, blocking()));
  const queued = await client.sendMessage(msg({ user_id: 'interop', idempotent_key: `a2a-queued-${stamp}`, url: `${UP}/gate/queued` }, blocking()));
  const pushed = await client.sendMessage(msg({ user_id: 'interop', idempotent_key: `a2a-push-${stamp}`, url: `${UP}/gate/push` }, blocking()));
  check(queued.status?.state === TaskState.TASK_STATE_SUBMITTED, 'a2a: message/send (non-blocking)', `task ${queued.id} ${TaskState[queued.status?.state]}`);

  const cfg = await client.createTaskPushNotificationConfig({ taskId: pushed.id, id: 'interop-hook', url: `${PUSH}/hook`, token: 'interop-token' });
  const listed = await client.listTaskPushNotificationConfig({ taskId: pushed.id });
  const fetched = await client.getTaskPushNotificationConfig({ taskId: pushed.id, id: 'interop-hook' });
  const configs = listed.configs ?? listed.taskPushNotificationConfigs ?? [];
  check(cfg.url === `${PUSH}/hook` && configs.length === 1 && fetched.url === `${PUSH}/hook`,
    'a2a: tasks/pushNotificationConfig/set, list, get', `config ${cfg.id} → ${cfg.url}`);

  await busyArrived; // dispatched: its request is at the upstream
  const canceled = await client.cancelTask({ id: queued.id });
  check(canceled.status?.state === TaskState.TASK_STATE_CANCELED, 'a2a: tasks/cancel (queued job)', TaskState[canceled.status?.state]);
  try {
    await client.cancelTask({ id: busy.id });
    fail('a2a: tasks/cancel (dispatched job)', 'was accepted');
  } catch (e) {
    check(/cancel/i.test(String(e?.message ?? e)), 'a2a: tasks/cancel (dispatched job) refused', String(e?.message ?? e).slice(0, 160));
  }

  release();
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline && !pushes.some((p) => p.task?.id === pushed.id && p.task?.status?.state === 'completed')) {
    await new Promise((r) => setTimeout(r, 50));
  }
  const final = pushes.find((p) => p.task?.id === pushed.id && p.task?.status?.state === 'completed');
  check(final && final.token === 'interop-token', 'a2a: push notification of the final state',
    final ? `${pushes.length} pushes, last state ${final.task.status.state}, token ${final.token}` : `got ${JSON.stringify(pushes.map((p) => p.task?.status?.state))}`);
  await client.deleteTaskPushNotificationConfig({ taskId: pushed.id, id: 'interop-hook' });
  const after = await client.listTaskPushNotificationConfig({ taskId: pushed.id });
  check((after.configs ?? after.taskPushNotificationConfigs ?? []).length === 0, 'a2a: tasks/pushNotificationConfig/delete');

  try {
    await client.sendMessage({ message: { messageId: crypto.randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: 'no data part' } }] } });
    fail('a2a: message without a data part', 'was accepted');
  } catch (e) {
    check(/data part/.test(String(e?.message ?? e)), 'a2a: message without a data part is invalid params', String(e?.message ?? e).slice(0, 160));
  }
}

async function step(name, fn) {
  try { await fn(); } catch (e) { fail(name, e?.stack ?? String(e)); }
}

await step('mcp stdio', () => mcpChecks('mcp-stdio', new StdioClientTransport({
  command: BIN,
  env: { PATH: process.env.PATH, HOME: process.env.HOME ?? WORK, AQUIFER_ADAPTER: 'mcp-stdio', AQUIFER_DATA_DIR: `${WORK}/data-stdio`, AQUIFER_LOG_LEVEL: 'warn' },
  stderr: 'ignore',
})));
await step('mcp streamable http', () => mcpChecks('mcp-http', new StreamableHTTPClientTransport(new URL(`${BASE}/mcp`))));
await step('a2a json-rpc', a2aChecks);

upstream.close();
receiver.close();
console.log(failures === 0 ? 'interop: all checks passed' : `interop: ${failures} check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
EOF

echo "== driving aquiferd with the TypeScript clients"
status=0
(cd "$WORK/node" && AQUIFER_URL="$BASE" AQUIFER_BIN="$WORK/aquiferd" WORK="$WORK" node interop.mjs) || status=$?
if [[ $status -ne 0 ]]; then
	echo "== aquiferd log"
	cat "$WORK/aquiferd-http.log"
fi
exit $status
