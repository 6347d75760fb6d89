package netns

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testbin"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// agentScript is what an agent's wake-up hook runs: the official
// TypeScript MCP SDK client starts `mailctl mcp`, reads the message that
// woke it and replies to it.
const agentScript = `import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const { MAILCTL_BIN: bin, MAILCTL_SOCKET: socket, MAILCTL_MAILBOX: mailbox, MAILCTL_ID: id } = process.env;
const client = new Client({ name: "netns-agent", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: bin, args: ["mcp", "--socket", socket], env: process.env, stderr: "inherit" }));
async function call(name, args) {
  const res = await client.callTool({ name, arguments: args }, undefined, { timeout: 90000 });
  if (res.isError) {
    console.error(name, "failed:", JSON.stringify(res.structuredContent));
    process.exit(1);
  }
  return res.structuredContent;
}
const msg = await call("email_read", { mailbox, id });
const reply = await call("email_reply", { mailbox, id, body: "Agent here: read your message (" + msg.summary.length + " chars of summary)." });
console.log("replied", reply.data.status, reply.data.message_id);
await client.close();
`

// TestAgentMCP runs scenario 3: a trusted message wakes an on_receive hook
// on b.test whose script drives ` + "`mailctl mcp`" + ` with the TypeScript MCP
// SDK and replies; the reply reaches a.test threaded under the original.
func TestAgentMCP(t *testing.T) {
	requireLab(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	modules := filepath.Join(root, "test", "mcp", "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Skip("the TypeScript MCP SDK is not installed: run `npm ci` in test/mcp")
	}

	l := newLab(t)
	// The script and a link to the SDK, readable by the hook's owner.
	scriptDir := testusers.SharedDir(t)
	script := filepath.Join(scriptDir, "agent.mjs")
	if err := os.WriteFile(script, []byte(agentScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(scriptDir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss"}, TrustedSenders: []string{"*@b.test"}})
	env := append([]string{"/usr/bin/env", "MAILCTL_BIN=" + mailctlBin, "MAILCTL_SOCKET={SOCK}"}, testbin.CoverEnv()...)
	hook := "name = \"agent\"\nmailbox = \"agent\"\nevent = \"on_receive\"\ntimeout_secs = 120\ncmd = " +
		quoteList(append(env, node, script))
	b := l.newMailHost("b", "b.test", hostOptions{Mailboxes: []string{"agent"}, TrustedSenders: []string{"boss@a.test"}, Hooks: []string{hook}})

	res := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"agent@b.test"}, Subject: "Can you confirm?", Body: "Please confirm you got this."})
	if res.Status != "delivered" {
		t.Fatalf("send: %q %+v", res.Status, res.Recipients)
	}
	var reply stored
	if !waitFor(60*time.Second, func() bool {
		for _, m := range a.folder("boss", "inbox") {
			if strings.Trim(m.Meta.InReplyTo, "<>") == strings.Trim(res.MessageID, "<>") {
				reply = m
				return true
			}
		}
		return false
	}) {
		var runs protocol.HookRuns
		b.call(protocol.VerbHookRuns, protocol.HookRunsArgs{}, &runs)
		t.Fatalf("no reply from the agent reached a.test; hook runs on b: %+v", runs.Runs)
	}
	if !strings.Contains(reply.Body, "Agent here") || reply.Meta.Trusted != "true" || reply.Meta.DMARC.Result != "pass" {
		t.Errorf("agent reply: trusted=%q dmarc=%+v body=%q", reply.Meta.Trusted, reply.Meta.DMARC, clip(reply.Body, 200))
	}
	sent := a.sentCopy("boss", res.ID, "delivered", 10*time.Second)
	if reply.Meta.ThreadID != sent.Meta.ThreadID {
		t.Errorf("agent reply thread_id %q, want %q", reply.Meta.ThreadID, sent.Meta.ThreadID)
	}
	// The run is recorded when the script exits, a moment after its reply.
	var runs protocol.HookRuns
	waitFor(30*time.Second, func() bool {
		runs = protocol.HookRuns{}
		return b.call(protocol.VerbHookRuns, protocol.HookRunsArgs{Name: "agent"}, &runs) == nil && len(runs.Runs) > 0
	})
	if len(runs.Runs) != 1 || runs.Runs[0].ExitCode != 0 {
		t.Errorf("hook runs %+v, want one that exited 0", runs.Runs)
	}
	took := time.Duration(0)
	if len(runs.Runs) > 0 {
		took = time.Duration(runs.Runs[0].DurationMS) * time.Millisecond
	}
	summary(t, "3-agent-mcp", "a.test→b.test woke the hook; TypeScript MCP SDK → mailctl mcp → email_reply in %v; reply on a.test trusted=%s dmarc=%s same thread",
		took, reply.Meta.Trusted, reply.Meta.DMARC.Result)
}
