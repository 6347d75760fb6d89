// End-to-end check of `mailctl mcp` with the official TypeScript MCP SDK client.
//
// It spawns `$MAILCTL_BIN mcp --socket $MAILCTL_SOCKET` (as the current user),
// then: lists tools, lists and creates a mailbox, subscribes to its inbox,
// sends a message to itself, waits for it (with progress), reads it, replies,
// marks it read, creates/lists/deletes a hook, and checks that the inbox
// subscription fired; then an unknown tool and a valid call after it, list
// rows (plain sender address, folder, uri), a thread read across folders, a
// reply to a sent message, a bad cursor, subscribe errors, the send policy in
// mailbox_list's row, and 13 and 20 MiB attachments (the 20 MiB refused at the
// limit that row shows). It prints one line per step and exits non-zero on the first
// failure.
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
if (tools.length > 17) fail("tools/list", `${tools.length} tools`);
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

// The policy that governs the mailbox is in its mailbox_list row, so an agent
// can plan instead of probing with failures; the large-attachment step below
// checks that the daemon enforces the limit shown here.
const mine = (await call("mailbox_list", {})).data.mailboxes.find((m) => m.name === mailbox);
const policy = mine?.send_policy;
if (!policy || typeof policy.enabled !== "boolean" || typeof policy.hold !== "boolean" || typeof policy.dry_run_only !== "boolean" ||
  !Array.isArray(policy.allow_domains) || !Array.isArray(policy.allow_addresses) || !(policy.max_attachment_bytes > 0) ||
  !["max_recipients", "max_message_bytes", "per_minute", "per_hour", "per_day"].every((k) => Number.isInteger(policy[k]))) {
  fail("policy visible", JSON.stringify(mine).slice(0, 400));
}
step("policy visible", `enabled=${policy.enabled} hold=${policy.hold} max_attachment_bytes=${policy.max_attachment_bytes} per_minute=${policy.per_minute}`);

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

const labelled = await call("email_label", { mailbox, id: msg.id, labels_add: ["e2e"], star: true });
if (!labelled.data.changed.includes(msg.id)) fail("email_label", JSON.stringify(labelled.data));
const byLabel = await call("email_list", { mailbox, label: "E2E", starred: true });
if (!byLabel.data.messages.some((m) => m.id === msg.id && m.starred && m.labels?.includes("e2e"))) {
  fail("email_list label", JSON.stringify(byLabel.data).slice(0, 300));
}
step("email_label, email_list by label and star", msg.id);

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

// expectError calls a tool that must fail with code, as a tool error.
async function expectError(name, args, code) {
  const res = await client.callTool({ name, arguments: args }, undefined, { timeout: (timeoutSecs + 30) * 1000 });
  if (!res.isError || res.structuredContent?.code !== code) {
    fail(name, `want tool error ${code}, got ${JSON.stringify(res.structuredContent ?? res).slice(0, 300)}`);
  }
  return res.structuredContent;
}

// An unknown tool is a protocol error, and the session goes on.
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
  fail("unknown tool", "the call succeeded");
} catch (e) {
  if (e.code !== -32602) fail("unknown tool", `want JSON-RPC -32602, got ${e.code}: ${e.message}`);
}
await call("mailbox_list", {});
step("unknown tool, then a valid call", "-32602, session alive");

// Rows carry the plain sender address beside the (possibly fenced) display value.
const listed = await call("email_list", { mailbox, subject });
const row = listed.data.messages.find((m) => m.id === msg.id);
if (!row || row.from_address !== address || row.folder !== "inbox" || row.uri !== `mailctl://mailbox/${mailbox}/inbox/${msg.id}`) {
  fail("email_list rows", JSON.stringify(row));
}
step("email_list rows", `from_address ${row.from_address}, uri ${row.uri}`);

// A thread read lists the sent copies with their folder, readable as given.
const thread = await call("email_read", { mailbox, id: msg.id, thread: true, max_chars: 100 });
const sentRow = thread.data.thread.find((r) => r.folder === "sent");
if (!sentRow || !thread.data.thread.some((r) => r.folder === "inbox")) fail("thread", JSON.stringify(thread.data.thread).slice(0, 300));
await call("email_read", { mailbox, id: sentRow.id, folder: sentRow.folder, max_chars: 100 });
step("thread across folders", `${thread.data.thread.length} rows`);

// A reply to your own sent message goes to its recipients, not to you.
const other = `${mailbox}-b`;
const otherAddr = (await call("mailbox_create", { name: other })).data.address;
const toOther = await call("email_send", { from_mailbox: mailbox, to: otherAddr, subject: `${subject} (b)`, body: "first" });
const replyToSent = await call("email_reply", { mailbox, id: toOther.data.id, body: "second" });
if (JSON.stringify(replyToSent.data.envelope.rcpt_to) !== JSON.stringify([otherAddr])) {
  fail("reply to a sent message", `went to ${JSON.stringify(replyToSent.data.envelope.rcpt_to)}, want ${otherAddr}`);
}
step("reply to a sent message", `to ${otherAddr}`);

// A cursor not issued for this listing is refused with invalid_input.
await expectError("email_list", { mailbox, cursor: "bogus" }, "invalid_input");
step("bad cursor", "invalid_input");

// Subscribe errors carry JSON-RPC codes (not 0).
for (const uri of ["mailctl://mailboxes", `mailctl://mailbox/${mailbox}-ghost/inbox`]) {
  try {
    await client.subscribeResource({ uri });
    fail("resources/subscribe", `${uri} accepted`);
  } catch (e) {
    if (e.code !== -32602) fail("resources/subscribe", `${uri}: want -32602, got ${e.code}: ${e.message}`);
  }
}
step("subscribe errors", "-32602");

// Large attachments pass the transport: 13 MiB (17 MiB of base64, past the
// go-sdk's default 16 MiB line limit) is sent; 20 MiB (27 MiB of base64) is
// past the send policy's attachment limit (15 MiB by default) and answered
// too_large by the daemon, and the session goes on.
if (!((13 << 20) <= policy.max_attachment_bytes && policy.max_attachment_bytes < (20 << 20))) {
  fail("large attachments", `this step expects send_policy.max_attachment_bytes between 13 and 20 MiB, mailbox_list shows ${policy.max_attachment_bytes}`);
}
const b64 = (mib) => Buffer.alloc(mib << 20, 7).toString("base64");
const big = await call("email_send", { from_mailbox: mailbox, to: otherAddr, subject: `${subject} (13 MiB)`, body: "big",
  attachments_base64: [{ filename: "big.bin", data: b64(13) }] });
if (!["delivered", "queued"].includes(big.data.status)) fail("13 MiB attachment", JSON.stringify(big.data).slice(0, 300));
const tooBig = await expectError("email_send", { from_mailbox: mailbox, to: otherAddr, subject: `${subject} (20 MiB)`, body: "big",
  attachments_base64: [{ filename: "big.bin", data: b64(20) }] }, "too_large");
if (!tooBig.message.includes(String(policy.max_attachment_bytes))) fail("20 MiB attachment", `the refusal does not name the limit mailbox_list shows: ${tooBig.message}`);
await call("mailbox_list", {});
step("large attachments", `13 MiB ${big.data.status}; 20 MiB too_large: ${tooBig.message.slice(0, 80)}`);
await call("mailbox_delete", { name: other, force: true });

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
