// End-to-end check of `mailctl mcp` with the official TypeScript MCP SDK client.
//
// It spawns `$MAILCTL_BIN mcp --socket $MAILCTL_SOCKET` (as the current user),
// then: lists tools, lists and creates a mailbox, subscribes to its inbox,
// sends a message to itself, waits for it (with progress), reads it, replies,
// marks it read, creates/lists/deletes a hook, and checks that the inbox
// subscription fired. It prints one line per step and exits non-zero on the
// first failure.
//
//   cd test/mcp && npm ci && MAILCTL_SOCKET=/path/to.sock MAILCTL_BIN=mailctl node e2e.mjs
//
// Environment: MAILCTL_BIN (default "mailctl"), MAILCTL_SOCKET (required),
// E2E_MAILBOX (default "e2e-<pid>"), E2E_TIMEOUT_SECS (default 60),
// E2E_KEEP_MAILBOX (set: do not delete the mailbox at the end), and
// E2E_FOREIGN_MAILBOX: a mailbox owned by ANOTHER user; when set, the script
// also checks that this user can neither see nor touch it (run it as the
// second user against the first user's mailbox).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const bin = process.env.MAILCTL_BIN || "mailctl";
const socket = process.env.MAILCTL_SOCKET;
const mailbox = process.env.E2E_MAILBOX || `e2e-${process.pid}`;
const timeoutSecs = Number(process.env.E2E_TIMEOUT_SECS || 60);
if (!socket) {
  console.error("e2e: set MAILCTL_SOCKET to the daemon's control socket");
  process.exit(2);
}

const steps = [];
function step(name, detail) {
  steps.push(name);
  console.log(`ok   ${name}${detail ? ": " + detail : ""}`);
}
function fail(name, why) {
  console.error(`FAIL ${name}: ${why}`);
  console.error(`${steps.length} step(s) passed before the failure`);
  process.exit(1);
}

const client = new Client({ name: "mailctl-e2e", version: "1.0.0" });
const updates = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updates.push(n.params.uri));

const transport = new StdioClientTransport({
  command: bin,
  args: ["mcp", "--socket", socket],
  stderr: "inherit",
});

// call runs a tool and returns its structured content, failing on tool errors.
async function call(name, args, opts = {}) {
  let res;
  try {
    res = await client.callTool({ name, arguments: args }, undefined, { timeout: (timeoutSecs + 30) * 1000, ...opts });
  } catch (e) {
    fail(name, `protocol error: ${e.message}`);
  }
  const sc = res.structuredContent;
  if (res.isError) fail(name, `tool error ${sc?.code}: ${sc?.message}`);
  if (!sc || typeof sc.summary !== "string" || !sc.meta || typeof sc.meta.now_utc !== "string") {
    fail(name, `result lacks the envelope: ${JSON.stringify(res).slice(0, 300)}`);
  }
  const text = res.content?.[0]?.text;
  if (!text || JSON.stringify(JSON.parse(text)) !== JSON.stringify(sc)) fail(name, "text content is not the structured JSON");
  return sc;
}

async function until(what, cond, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  fail(what, `not seen within ${ms} ms`);
}

try {
  await client.connect(transport);
} catch (e) {
  fail("connect", e.message);
}
step("initialize", `${client.getServerVersion()?.name} ${client.getServerVersion()?.version}`);
if (!client.getInstructions()?.includes("UNTRUSTED")) fail("initialize", "server instructions do not explain fencing");

const { tools } = await client.listTools();
const names = tools.map((t) => t.name);
const reference = ["mailbox_list", "mailbox_create", "mailbox_delete", "email_list", "email_read", "email_send",
  "email_reply", "email_mark_read", "email_mark_unread", "hook_create", "hook_list", "hook_delete"];
for (const r of reference) if (!names.includes(r)) fail("tools/list", `missing ${r}`);
if (tools.length > 16) fail("tools/list", `${tools.length} tools`);
for (const t of tools) if (!t.annotations || !t.outputSchema) fail("tools/list", `${t.name} lacks annotations or outputSchema`);
step("tools/list", `${tools.length} tools`);

await call("mailbox_list", {});
step("mailbox_list");

const created = await call("mailbox_create", { name: mailbox });
const address = created.data.address;
if (!address || !address.startsWith(mailbox + "@")) fail("mailbox_create", `address ${address}`);
const again = await call("mailbox_create", { name: mailbox });
if (again.data.address !== address || again.data.created !== false) fail("mailbox_create", "not idempotent");
step("mailbox_create", address);

const inboxURI = `mailctl://mailbox/${mailbox}/inbox`;
await client.subscribeResource({ uri: inboxURI });
step("resources/subscribe", inboxURI);

const code = String(100000 + Math.floor(Math.random() * 899999));
const subject = `e2e ${process.pid} ${Date.now()}`;
let progress = 0;
const waiting = call("email_wait", { mailbox, subject, timeout_secs: timeoutSecs }, {
  onprogress: () => { progress++; },
  resetTimeoutOnProgress: true,
});
// Give the wait a moment to start its watch before the mail can arrive.
await new Promise((r) => setTimeout(r, 500));
const sent = await call("email_send", { from_mailbox: mailbox, to: address, subject,
  body: `Hello from the e2e test.\n\nYour verification code is ${code}.\n\nhttps://example.invalid/confirm` });
if (!sent.data.message_id) fail("email_send", JSON.stringify(sent.data));
step("email_send", `${sent.data.status} ${sent.data.message_id}`);

const waited = await waiting;
const msg = waited.data.message;
if (!waited.data.codes.includes(code)) fail("email_wait", `codes ${JSON.stringify(waited.data.codes)}, want ${code}`);
step("email_wait", `${msg.id} after ${waited.data.waited_ms} ms, ${progress} progress notification(s)`);

const read = await call("email_read", { mailbox, id: msg.id });
if (!read.data.body.includes(code)) fail("email_read", "body lacks the code");
step("email_read", `trusted=${read.data.trusted}`);

const reply = await call("email_reply", { mailbox, id: msg.id, body: "Thanks, received." });
step("email_reply", `${reply.data.status} ${reply.data.message_id}`);

const marked = await call("email_mark_read", { mailbox, id: msg.id });
if (!marked.data.changed.includes(msg.id)) fail("email_mark_read", JSON.stringify(marked.data));
step("email_mark_read");

const hook = await call("hook_create", { mailbox, event: "on_receive", cmd: ["/bin/true"] });
const hookName = hook.data.name;
if (!hookName) fail("hook_create", "no effective name");
const hooks = await call("hook_list", { mailbox });
if (!hooks.data.hooks.some((h) => h.name === hookName)) fail("hook_list", `${hookName} not listed`);
await call("hook_delete", { name: hookName });
step("hook_create/list/delete", hookName);

await until("notifications/resources/updated", () => updates.includes(inboxURI), timeoutSecs * 1000);
step("notifications/resources/updated", inboxURI);

const inbox = await client.readResource({ uri: inboxURI });
if (!inbox.contents[0].text.includes(msg.id)) fail("resources/read", "inbox resource lacks the message");
step("resources/read", inboxURI);

// A missing daemon-side object comes back as a coded tool error.
const missing = await client.callTool({ name: "email_read", arguments: { mailbox, id: "does-not-exist" } });
if (!missing.isError || missing.structuredContent?.code !== "not_found") fail("not_found", JSON.stringify(missing).slice(0, 300));
step("error codes", "not_found");

const foreign = process.env.E2E_FOREIGN_MAILBOX;
if (foreign) {
  const listed = await call("mailbox_list", {});
  if (listed.data.mailboxes.some((m) => m.name === foreign)) fail("isolation", `${foreign} is listed`);
  const attempts = [
    ["email_list", { mailbox: foreign }],
    ["email_read", { mailbox: foreign, id: "x" }],
    ["email_send", { from_mailbox: foreign, to: address, subject: "spoof", body: "x" }],
    ["email_mark_read", { mailbox: foreign, id: "x" }],
    ["hook_create", { mailbox: foreign, event: "on_receive", cmd: ["/bin/true"] }],
    ["hook_list", { mailbox: foreign }],
    ["mailbox_delete", { name: foreign, force: true }],
    ["email_wait", { mailbox: foreign, timeout_secs: 1 }],
  ];
  for (const [name, args] of attempts) {
    const res = await client.callTool({ name, arguments: args });
    const sc = res.structuredContent || {};
    if (name === "hook_list" && !res.isError) {
      if (sc.data.hooks.length) fail("isolation", `hook_list shows ${foreign}'s hooks`);
      continue;
    }
    if (!res.isError || !["not_found", "forbidden"].includes(sc.code)) {
      fail("isolation", `${name} on ${foreign}: ${JSON.stringify(sc).slice(0, 200)}`);
    }
  }
  step("isolation", `${foreign} is invisible and untouchable`);
}

if (!process.env.E2E_KEEP_MAILBOX) {
  await call("mailbox_delete", { name: mailbox, force: true });
  step("mailbox_delete");
}

await client.close();
console.log(`PASS ${steps.length} steps`);
process.exit(0);
