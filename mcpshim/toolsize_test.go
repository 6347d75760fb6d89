package mcpshim

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

// The budgets of the tool list an agent pays for in every session: the whole
// tools/list response as the server writes it on stdio, and per tool its
// name, description and input schema (what a model must read to call it).
const (
	maxToolsListBytes = 30_000
	maxToolBytes      = 800
	maxOneToolBytes   = 2000
)

// toolsListBytes returns the exact line the server writes to stdout for a
// tools/list (the JSON-RPC response, without its newline).
func toolsListBytes(t *testing.T, s *Server) []byte {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, &LineTransport{In: inR, Out: outW})
		outW.Close()
	}()
	t.Cleanup(func() { cancel(); inW.Close(); testwait.Recv(t, "Run to return once its input closed", done) })
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(outR, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			lines <- line[:len(line)-1]
		}
	}()
	reply := func(id string) []byte {
		timeout := time.After(20 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("session ended before the reply to %s", id)
				}
				var m struct {
					ID any `json:"id"`
				}
				if json.Unmarshal(line, &m) == nil && m.ID == id {
					return line
				}
			case <-timeout:
				t.Fatalf("no reply to %s", id)
			}
		}
	}
	send := func(line string) {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	reply("init")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
	return reply("list")
}

// The tool list stays lean: the whole response within maxToolsListBytes,
// and name, description and input schema within maxToolBytes per tool on
// average (how the issue that set the budget measured it, and what a model
// reads before its first call) and within maxOneToolBytes for any one tool
// (email_send has 17 parameters: no wording fits them in 800 bytes), with the
// default tool set and with every tool. The numbers are printed, so a change
// that grows them shows: go test -v -run TestToolListSize ./mcpshim
func TestToolListSize(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tools []string
	}{{"default", nil}, {"all", []string{"all"}}} {
		t.Run(tc.name, func(t *testing.T) {
			line := toolsListBytes(t, New(Options{SocketPath: noDaemon(t), Tools: tc.tools}))
			var resp struct {
				Result struct {
					Tools []listedTool `json:"tools"`
				} `json:"result"`
			}
			if err := json.Unmarshal(line, &resp); err != nil {
				t.Fatal(err)
			}
			tools := resp.Result.Tools
			want := DefaultToolNames()
			if tc.tools != nil {
				want = ToolNames()
			}
			if len(tools) != len(want) {
				t.Fatalf("%d tools listed, want %d", len(tools), len(want))
			}
			var sum, biggest, outputs int
			for _, tool := range tools {
				n := tool.modelBytes()
				sum += n
				biggest = max(biggest, n)
				outputs += len(tool.OutputSchema)
				t.Logf("%-18s %4d bytes (description %3d, input schema %4d; output schema %4d)", tool.Name, n, n-len(tool.Name)-len(tool.InputSchema), len(tool.InputSchema), len(tool.OutputSchema))
				if n > maxOneToolBytes {
					t.Errorf("%s: name + description + input schema is %d bytes, at most %d", tool.Name, n, maxOneToolBytes)
				}
				if len(tool.OutputSchema) == 0 {
					t.Errorf("%s has no output schema", tool.Name)
				}
			}
			avg := sum / len(tools)
			t.Logf("tools/list (%s, %d tools): %d bytes in all, %d of them output schemas; name + description + input schema %d bytes per tool on average, %d at most",
				tc.name, len(tools), len(line), outputs, avg, biggest)
			if len(line) > maxToolsListBytes {
				t.Errorf("tools/list is %d bytes, at most %d", len(line), maxToolsListBytes)
			}
			if avg > maxToolBytes {
				t.Errorf("name + description + input schema is %d bytes per tool on average, at most %d", avg, maxToolBytes)
			}
		})
	}
}

// listedTool is a tool as tools/list carries it, schemas as sent.
type listedTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
}

// modelBytes is what a model reads of the tool: its name, its description
// as the JSON string sent and its input schema.
func (l listedTool) modelBytes() int {
	desc, _ := marshal(l.Description)
	return len(l.Name) + len(desc) + len(l.InputSchema)
}
